"""The oracle's success on every task of an env (both splits), through the env's own reward: for
BFCL-v0 that is BFCL's multi-turn checker on the ground-truth calls. Prints the failures.

    python benchmarks/oracle_success.py --env BFCL-v0
    python benchmarks/oracle_success.py --env BFCL-v0 --category multi_turn_miss_param
"""

from __future__ import annotations

import argparse

import gymnasium as gym

import rehearsal_gym  # noqa: F401 - registers the env ids


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="BFCL-v0")
    parser.add_argument("--category", default=None, help="BFCL-v0's category")
    args = parser.parse_args()
    env = gym.make(args.env, **({"category": args.category} if args.category else {}))
    family = env.unwrapped.family
    ok, failed = 0, []
    for split, tasks in family.splits.items():
        for task in tasks:
            env.reset(options={"task": task})
            for turn in env.unwrapped.oracle_turns():
                obs, _, terminated, truncated, info = env.step(turn)
                if terminated or truncated:
                    break
            if info.get("success"):
                ok += 1
            else:
                failed.append(f"{task.id} ({split}): {obs[:160]}")
    print(f"{args.env}: the oracle succeeds on {ok} of {ok + len(failed)} tasks")
    for line in failed:
        print("  failed:", line)


if __name__ == "__main__":
    main()
