"""The PPO tables of docs/results.md: start vs PPO real vs PPO rehearsed vs PPO + SEED, per env and seed.

Runs `rehearsal-gym train` once per (env, setting, seed) into OUT/<env>_<setting>_s<seed>/ (a run whose
result.json exists is skipped, so a killed table resumes where it stopped), then writes OUT/ppo_runs.csv
and .md (one row per run: held-out success before and after PPO) and OUT/ppo_table.csv and .md (one row
per env: the warm start and the mean over seeds of each setting, with the gain over the warm start).
Before and after are evaluated on the same tasks, so each run also reports how many tasks it gained
and lost and the exact sign test's p-value (the chance of a split this uneven if PPO changed nothing).
The test conditions on the tasks drawn, so evaluate on many (default 1000): on 300 tasks a policy that
only shifts a constant answer towards the sample's most common value looked like a gain.

    python benchmarks/ppo_table.py --out runs/ppo_table                       # full table (~3.5 h on 2 cores)
    python benchmarks/ppo_table.py --envs ToolCall-v0 --settings real --seeds 0   # one run (~5 min)
    python benchmarks/ppo_table.py --out runs/ppo_table --report-only         # tables from finished runs

Settings: real (the real env), rehearsed (SelfSimEnv replace mode, consistent verifier: every tool
result is imagined by the policy's environment role, and both roles train; a task group's episodes
share one imagined world), frozen (the same, but the frozen warm start imagines the results and only
the agent role trains), frozen-unshared (frozen with a world per episode, as before `shared_worlds`
existed), seed (real env + SEED's
on-policy distillation from the policy's own skills; its "before" is the analyst warm start). Every run
is evaluated greedily in the real env on the same held-out tasks before and after.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rehearsal_gym.envs import REAL_ENV_IDS

from rehearsal_gym.core.report import seed_tables, write_table

COMMON = (
    "--lr 1e-4 --negative-weight 0 --temperature 0.7 --tasks-per-iter 16 --group-size 8 "
    "--minibatch-size 32 --iterations 30 --quiet"
).split()
REHEARSED = ["--rehearse", "replace", "--rehearsal-verifier", "consistent"]
FROZEN = [*REHEARSED, "--rehearsal-world", "frozen", "--no-train-env-role"]
SETTINGS = {
    "real": [],
    "rehearsed": [*REHEARSED, "--shared-worlds"],
    "frozen": [*FROZEN, "--shared-worlds"],
    "frozen-unshared": [*FROZEN, "--no-shared-worlds"],
    "seed": ["--seed-distill"],
}
COLUMNS = {
    "real": "PPO real",
    "rehearsed": "PPO rehearsed",
    "frozen": "PPO rehearsed, frozen world",
    "frozen-unshared": "PPO rehearsed, frozen world, one world per episode",
    "seed": "PPO + SEED",
}


def run_dir(out: Path, env: str, setting: str, seed: int) -> Path:
    return out / f"{env}_{setting}_s{seed}"


def run_one(
    out: Path,
    env: str,
    setting: str,
    seed: int,
    eval_tasks: int,
    model: str | None = None,
    extra: Sequence[str] = (),
) -> dict | None:
    path = run_dir(out, env, setting, seed)
    result = path / "result.json"
    if not result.exists():
        cmd = ["rehearsal-gym", "train", "--env", env, "--seed", str(seed), "--eval-tasks", str(eval_tasks)]
        cmd += COMMON + SETTINGS[setting] + list(extra) + ["--out", str(path), "--resume"]
        cmd += ["--model", model] if model else []
        print(" ".join(cmd), flush=True)
        start = time.monotonic()
        with open(path.with_suffix(".log"), "w") as log:
            code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        if code != 0 or not result.exists():
            print(f"  failed (exit {code}); see {path.with_suffix('.log')}", file=sys.stderr)
            return None
        print(f"  {time.monotonic() - start:.0f} s", flush=True)
    return json.loads(result.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", default=list(REAL_ENV_IDS), choices=REAL_ENV_IDS)
    parser.add_argument(
        "--settings",
        nargs="+",
        default=[s for s in SETTINGS if s != "frozen-unshared"],  # the old behaviour on request only
        choices=list(SETTINGS),
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--eval-tasks", type=int, default=1000)
    parser.add_argument("--out", default="runs/ppo_table")
    parser.add_argument("--model", default=None, help="local model directory (default: the embedded default)")
    parser.add_argument(
        "--train-args",
        default="",
        help="extra `rehearsal-gym train` flags for every run, after the table's own (so they override"
        " them), e.g. --train-args='--negative-weight 1'; use a separate --out per variant",
    )
    parser.add_argument("--report-only", action="store_true", help="only tabulate finished runs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for env in args.envs:
        for setting in args.settings:
            for seed in args.seeds:
                if args.report_only:
                    path = run_dir(out, env, setting, seed) / "result.json"
                    result = json.loads(path.read_text()) if path.exists() else None
                else:
                    result = run_one(
                        out, env, setting, seed, args.eval_tasks, args.model, shlex.split(args.train_args)
                    )
                if result is not None:
                    results[(env, setting, seed)] = result
    if not results:
        print(f"no finished runs under {out}", file=sys.stderr)
        return 1
    runs, summary = seed_tables(results, COLUMNS)
    write_table(runs, out, "ppo_runs")
    print(write_table(summary, out, "ppo_table"))
    print(f"\nwrote {out}/ppo_table.md, ppo_table.csv, ppo_runs.md, ppo_runs.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
