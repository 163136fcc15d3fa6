"""Does the imagined world show the values the real tool returns, and as often?

For the first `--tasks` train tasks of one template, the oracle's first call is answered by the real
tool and by the frozen environment role (SelfSimEnv replace mode, one world seed per task) at each
`--temperatures`; the table counts each value of the result's `--field` (the most common field when
not given). Rehearsed training can only teach an agent to read a value the world shows it: on ToolCall
the warm start fails weekday questions exactly when the result is Tuesday, and real PPO's gains there
come from learning that case.

    python benchmarks/probes/world_coverage.py --model DIR --env ToolCall-v0 --template weekday --tasks 120 \\
        --temperatures 0.1 0.7 1.0 --out runs/coverage

Writes OUT/world_coverage.csv and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
from rehearsal_gym.envs import REAL_ENV_IDS

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.report import write_table
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

UNUSABLE = "(unusable result)"


def template_tasks(env_id: str, template: str, n: int, limit: int = 20_000) -> list[int]:
    """Indices of the first `n` train tasks of `template` (among the first `limit`)."""
    family = gym.make(env_id, split="train").unwrapped.family
    if template not in family.templates:
        raise ValueError(f"{env_id} has no template {template!r}; templates: {', '.join(family.templates)}")
    found = [i for i in range(limit) if family.task("train", i).template == template][:n]
    if len(found) < n:
        raise ValueError(f"only {len(found)} train tasks of {template!r} among the first {limit}")
    return found


def first_results(env: gym.Env, tasks: Sequence[int]) -> list[dict | None]:
    """The result of the oracle's first call of each task in `env` (None: unusable or no call)."""
    base = env.unwrapped
    results: list[dict | None] = []
    for k, index in enumerate(tasks):
        env.reset(seed=k, options={"task_index": index})
        turn = base.oracle_turns()[0]
        obs, _, terminated, _, info = env.step(turn)
        try:
            value = json.loads(obs)
        except json.JSONDecodeError:
            value = None
        results.append(value if isinstance(value, dict) and "error" not in info else None)
    return results


def coverage(real: list[dict | None], imagined: dict[str, list[dict | None]], field: str | None):
    """Rows value -> count under the real tool and under each imagined world; and the field used."""
    if field is None:
        keys = Counter(k for r in real if r for k in r)
        if not keys:
            raise ValueError("the real results have no fields")
        field = keys.most_common(1)[0][0]

    def value(result: dict | None) -> str:
        return UNUSABLE if result is None or field not in result else str(result[field])

    counts = {"real tool": Counter(map(value, real))} | {
        name: Counter(map(value, results)) for name, results in imagined.items()
    }
    values = sorted(set().union(*counts.values()), key=lambda v: (-counts["real tool"][v], v == UNUSABLE, v))
    rows = [{field: v} | {name: c[v] for name, c in counts.items()} for v in values]
    return rows, field


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local model directory (the frozen world)")
    parser.add_argument("--env", default="ToolCall-v0", choices=REAL_ENV_IDS)
    parser.add_argument("--template", default="weekday")
    parser.add_argument("--field", default=None, help="result field to count (default: the most common)")
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.1, 0.7, 1.0])
    parser.add_argument("--out", default="runs/coverage")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    if not all(t > 0 for t in args.temperatures):
        parser.error(f"--temperatures must be > 0, got {args.temperatures}")
    try:
        tasks = template_tasks(args.env, args.template, args.tasks)
    except ValueError as e:
        parser.error(str(e))
    lm = LM.load(args.model)
    real = first_results(gym.make(args.env, split="train"), tasks)
    imagined = {
        f"world T={t:g}": first_results(
            SelfSimEnv(args.env, model=lm, mode="replace", split="train", temperature=t), tasks
        )
        for t in args.temperatures
    }
    rows, field = coverage(real, imagined, args.field)
    print(f"\n{args.env} {args.template}: `{field}` of the oracle's first call, {len(tasks)} train tasks\n")
    print(write_table(rows, Path(args.out), "world_coverage"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
