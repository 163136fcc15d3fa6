"""Does a skill in the observation help the agent? SEED's teacher, measured in the real env.

SEED distils the policy's log-probs with a skill inserted before the conversation (the teacher) into
the policy without it. That only carries signal if the agent acts better when it reads a skill. For
each model and family: held-out success on test tasks 0..N-1 without a skill and with the explainer's
workflow skill of the oracle's episode on the same task (`analyst.oracle_skill`; privileged, the best
skill a library could hold) as a ``<|skill|>`` turn, with the paired sign test between the two.

    python benchmarks/probes/skill_conditioning.py --models warm=DIR analyst=~/.cache/rehearsal_gym/training/analyst-XXXX \\
        --envs ToolCall-v0 Finance-v0 --tasks 500 --out runs/skills

Writes OUT/skill_conditioning.csv and .md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
from rehearsal_gym.envs import REAL_ENV_IDS

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.cli.options import named_paths
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.report import paired_sign_test, write_table
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.training.analyst import oracle_skill


def successes(lm: LM, env_id: str, skills: Sequence[str | None], batch: int = 32) -> list[int]:
    """Greedy success on test tasks 0..len(skills)-1, each with its skill turn (None: no skill)."""
    envs = [gym.make(env_id, split="test") for _ in range(min(batch, len(skills)))]
    out: list[int] = []
    for start in range(0, len(skills), len(envs)):
        chunk = range(start, min(start + len(envs), len(skills)))
        options = [{"task_index": i} | ({"skill": skills[i]} if skills[i] else {}) for i in chunk]
        out += [int(ep.success) for ep in run_episodes(lm, envs[: len(chunk)], options, skill_turns=True)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", required=True, help="NAME=DIR ...")
    parser.add_argument("--envs", nargs="+", default=["ToolCall-v0", "Finance-v0"], choices=REAL_ENV_IDS)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--out", default="runs/skills")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    try:
        models = named_paths(args.models, "--models", require_name=True)
    except ValueError as e:
        parser.error(str(e))
    rows = []
    for env_id in args.envs:
        env = gym.make(env_id, split="test")
        skills = [oracle_skill(env, i).hint() for i in range(args.tasks)]
        for name, path in models.items():
            lm = LM.load(path)
            plain = successes(lm, env_id, [None] * args.tasks)
            skilled = successes(lm, env_id, skills)
            test = paired_sign_test(plain, skilled)
            rows.append(
                {
                    "model": name,
                    "env": env_id,
                    "tasks": args.tasks,
                    "without skill": sum(plain) / args.tasks,
                    "with the oracle's workflow skill": sum(skilled) / args.tasks,
                    "gained / lost": f"{test['gained']} / {test['lost']}",
                    "p": f"{test['p_value']:.3g}",
                }
            )
            print(rows[-1], flush=True)
    print(write_table(rows, Path(args.out), "skill_conditioning"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
