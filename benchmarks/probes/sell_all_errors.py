"""Finance sell_all orders by kind of error: which of ticker and quantity each model gets wrong.

Replays every sell_all task among held-out tasks FIRST..FIRST+N-1 greedily with each model and
compares its first place_order call with the oracle's: `ok`, `ticker` (wrong symbol, right quantity),
`quantity` (right symbol, wrong quantity), `both`, `no order`; it also prints each model's most frequent
wrong tickers (requested -> sold). Rows split by how many holdings the
account has and where the requested symbol sits among them (0 = first; the get_account result lists them in
symbol order), since a model that copies the first holding's quantity fails only on later positions.

    python benchmarks/probes/sell_all_errors.py --model warm=DIR ppo=RUN/final_model --tasks 1000 --out runs/sell_all
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import gymnasium as gym
from rehearsal_gym.envs.finance import Book, FinanceEnv

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.cli.options import named_paths
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.protocol import ToolCall, parse_turn
from rehearsal_gym.core.report import write_table
from rehearsal_gym.core.rollout import run_episodes

KINDS = ("ok", "ticker", "quantity", "both", "no order")


def sell_all_tasks(first: int, n: int) -> list[tuple[int, int, int]]:
    """(task index, holdings, position of the requested symbol) of the test sell_all tasks in range."""
    family = FinanceEnv.family
    out = []
    for i in range(first, first + n):
        task = family.task("test", i)
        if task.template != "sell_all":
            continue
        book = Book(task.world_seed)
        try:
            held = list(book._account(task.params["account_id"])[1])
        finally:
            book.close()
        out.append((i, len(held), held.index(task.params["symbol"])))
    return out


def first_order(actions: list[str]) -> ToolCall | None:
    """The episode's first well-formed place_order call, if any."""
    for text in actions:
        turn = parse_turn(text, FinanceEnv.family.tools)
        if isinstance(turn, ToolCall) and turn.name == "place_order":
            return turn
    return None


def kind(actions: list[str], expected: ToolCall) -> str:
    order = first_order(actions)
    if order is None:
        return "no order"
    sym = order.arguments.get("symbol") == expected.arguments["symbol"]
    qty = order.arguments.get("qty") == expected.arguments["qty"]
    return "ok" if sym and qty else "quantity" if sym else "ticker" if qty else "both"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", nargs="+", required=True, help="NAME=DIR local model directories")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--first-task", type=int, default=0)
    parser.add_argument("--out", default="runs/sell_all")
    args = parser.parse_args()
    tasks = sell_all_tasks(args.first_task, args.tasks)
    family = FinanceEnv.family
    expected = {i: family.oracle_plan(family.task("test", i))[0][-1] for i, _, _ in tasks}
    rows = []
    try:
        models = named_paths(args.model, "--model", require_name=True)
    except ValueError as e:
        parser.error(str(e))
    for name, path in models.items():
        lm = LM.load(path)
        counts: dict[tuple[int, int], collections.Counter] = collections.defaultdict(collections.Counter)
        swaps: collections.Counter = collections.Counter()  # (requested, sold) of wrong tickers
        for s in range(0, len(tasks), 32):
            batch = tasks[s : s + 32]
            envs = [gym.make("Finance-v0", split="test") for _ in batch]
            episodes = run_episodes(lm, envs, [{"task_index": i} for i, _, _ in batch])
            for (i, held, pos), ep in zip(batch, episodes, strict=True):
                counts[(held, pos)][kind(ep.actions, expected[i])] += 1
                order = first_order(ep.actions)
                wanted = expected[i].arguments["symbol"]
                if order is not None and order.arguments.get("symbol") != wanted:
                    swaps[(wanted, order.arguments.get("symbol"))] += 1
            for env in envs:
                env.close()
        total: collections.Counter = sum(counts.values(), collections.Counter())
        for (held, pos), c in [*sorted(counts.items()), (("all", "all"), total)]:
            rows.append({"model": name, "holdings": held, "position": pos, **{k: c[k] for k in KINDS}})
        print(f"{name}: " + ", ".join(f"{k} {total[k]}" for k in KINDS), flush=True)
        if swaps:
            top = ", ".join(f"{a} -> {b} {n}" for (a, b), n in swaps.most_common(5))
            print(f"  wrong tickers (requested -> sold): {top}", flush=True)
    print(write_table(rows, Path(args.out), "sell_all_errors"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
