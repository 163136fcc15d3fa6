"""What a model's imagined Finance accounts show in rehearsed sell_all episodes.

Plays every sell_all task among held-out tasks FIRST..FIRST+N-1 in SelfSim-v0 (replace mode, the
consistent verifier) with each model as both the agent and its own frozen world (or, with `--world
DIR`, the one model at DIR as every agent's world: the frozen world a PPO run trained in), sampled at
`--temperature` as in rehearsed training, and counts per model: episodes whose agent saw a
get_account result (`account shown`), those whose shown account holds the requested symbol
(`symbol shown`; `symbol twice`: listed more than once) and lists the same symbols as the real
account (`same symbols`), accounts of several holdings with the symbol, shown and real (`several
shown`, `several real`), and those listing it first (`symbol first ...`: where copying the first
holding's quantity is right), orders that sell the requested symbol (`right symbol`) and the shown quantity of it (`shown qty sold`), and successes
under the consistent and the real verifier. A world that does not show the symbol leaves no order that
can pass the consistent verifier except the real one, which the agent was never shown.
`--premise-redraws N` has the world draw an account without the symbol, or listing it twice, again,
up to N times (SelfSimEnv's premise_redraws).

    python benchmarks/probes/imagined_accounts.py --model warm=DIR --tasks 1000 --out runs/imagined
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rehearsal_gym.envs.finance import Book, FinanceEnv

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.cli.options import named_paths
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.protocol import ToolCall
from rehearsal_gym.core.report import write_table
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.rehearsal.demos import record_oracle_episodes, result_bank
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

COLUMNS = (
    "episodes",
    "account shown",
    "symbol shown",
    "symbol twice",
    "same symbols",
    "several shown",
    "symbol first shown",
    "several real",
    "symbol first real",
    "right symbol",
    "shown qty sold",
    "consistent success",
    "real success",
)


def shown_holdings(account: Mapping[str, Any] | None) -> dict[str, Any]:
    """{symbol: qty} of a shown get_account result ({} if it has no readable holdings)."""
    holdings = account.get("holdings") if isinstance(account, Mapping) else None
    if not isinstance(holdings, list):
        return {}
    return {
        h["symbol"]: h.get("qty")
        for h in holdings
        if isinstance(h, Mapping) and isinstance(h.get("symbol"), str)
    }


def tally(
    symbol: str,
    real: Mapping[str, int],
    seen: list[tuple[ToolCall, Mapping[str, Any]]],
    success: bool,
    real_success: bool,
) -> collections.Counter:
    """The counts of one episode (see the module docstring)."""
    c: collections.Counter = collections.Counter(episodes=1)
    c["consistent success"] += success
    c["real success"] += real_success
    account = next((r for call, r in seen if call.name == "get_account"), None)
    order = next((call.arguments for call, _ in seen if call.name == "place_order"), None)
    held = shown_holdings(account)
    c["account shown"] += account is not None
    c["symbol shown"] += symbol in held
    listed = account.get("holdings") if isinstance(account, Mapping) else None
    c["symbol twice"] += (
        isinstance(listed, list)
        and sum(isinstance(h, Mapping) and h.get("symbol") == symbol for h in listed) > 1
    )
    c["same symbols"] += bool(held) and set(held) == set(real)
    # accounts of several holdings that hold the symbol, and those that list it first (where
    # copying the first holding's quantity is right)
    for where, symbols in (("shown", list(held)), ("real", list(real))):
        if len(symbols) > 1 and symbol in symbols:
            c[f"several {where}"] += 1
            c[f"symbol first {where}"] += symbols[0] == symbol
    if order is not None:
        c["right symbol"] += order.get("symbol") == symbol
        c["shown qty sold"] += (
            order.get("symbol") == symbol and symbol in held and order.get("qty") == held[symbol]
        )
    return c


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", nargs="+", required=True, help="NAME=DIR local model directories")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--first-task", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--premise-redraws", type=int, default=0)
    parser.add_argument("--world", default=None, help="local model directory imagining every model's results")
    parser.add_argument("--out", default="runs/imagined_accounts")
    args = parser.parse_args()
    family = FinanceEnv.family
    tasks = [
        i
        for i in range(args.first_task, args.first_task + args.tasks)
        if family.task("test", i).template == "sell_all"
    ]
    bank = result_bank(record_oracle_episodes("Finance-v0", range(40)))
    world = LM.load(args.world) if args.world else None
    rows = []
    try:
        models = named_paths(args.model, "--model", require_name=True)
    except ValueError as e:
        parser.error(str(e))
    for name, path in models.items():
        lm = LM.load(path)
        total: collections.Counter = collections.Counter()
        for s in range(0, len(tasks), 32):
            batch = tasks[s : s + 32]
            envs = [
                SelfSimEnv(
                    "Finance-v0",
                    model=world or lm,
                    mode="replace",
                    bank=bank,
                    temperature=args.temperature,
                    verifier="consistent",
                    split="test",
                    premise_redraws=args.premise_redraws,
                )
                for _ in batch
            ]
            options = [{"task_index": i, "world_seed": args.seed + i} for i in batch]
            episodes = run_episodes(
                lm, envs, options, greedy=False, temperature=args.temperature, seed=args.seed + s
            )
            for i, ep, env in zip(batch, episodes, envs, strict=True):
                task = family.task("test", i)
                book = Book(task.world_seed)
                try:
                    real = book._account(task.params["account_id"])[1]
                finally:
                    book.close()
                real_success = bool(ep.infos[-1].get("real_verifier_success")) if ep.infos else False
                total += tally(task.params["symbol"], real, env.seen, ep.success, real_success)
                env.close()
        rows.append({"model": name, **{k: total[k] for k in COLUMNS}})
        print(f"{name}: " + ", ".join(f"{k} {total[k]}" for k in COLUMNS), flush=True)
    print(write_table(rows, Path(args.out), "imagined_accounts"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
