"""Environment-role fidelity on the oracle's calls: SelfSim-v0 in wrap mode plays the oracle's
turns of held-out tasks, so every call is a sensible one whatever the model can do as an agent,
and compares each imagined result with the real one (exact match, field accuracy, hallucinated
fields). For envs where the model cannot act (BFCL-v0's tool lists overflow the default model's
context), this is the world's fidelity that `rehearsal-gym fidelity` cannot measure.

    python benchmarks/oracle_fidelity.py --env BFCL-v0 --tasks 40
    python benchmarks/oracle_fidelity.py --env BFCL-v0 --tasks 40 --model runs/bfcl-world
    python benchmarks/oracle_fidelity.py --env ToolCall-v0 --tasks 100 --temperature 0.7
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import rehearsal_gym  # noqa: F401 - registers the env ids
from rehearsal_gym.defaults import resolve_lm


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="BFCL-v0")
    parser.add_argument("--tasks", type=int, default=40, help="held-out (test split) tasks")
    parser.add_argument(
        "--model", default=None, help="the world: model directory or Hub id (default: the default)"
    )
    parser.add_argument("--max-result-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=1.0, help="the world's sampling temperature")
    args = parser.parse_args()
    world = resolve_lm(args.model)
    env = gym.make(
        "SelfSim-v0",
        base=args.env,
        model=world,
        mode="wrap",
        split="test",
        max_result_tokens=args.max_result_tokens,
        temperature=args.temperature,
        max_turns=10_000,
    )
    rows, calls, invalid = [], 0, 0
    for i in range(args.tasks):
        env.reset(seed=i, options={"task_index": i})
        for turn in env.unwrapped.oracle_turns():
            _, _, terminated, truncated, info = env.step(turn)
            if "call" in info:
                calls += 1
                if "fidelity" in info:
                    rows.append(info["fidelity"])
                else:
                    invalid += 1
            if terminated or truncated:
                break
    print(
        f"{args.env}, world {args.model or 'default'}: {args.tasks} held-out tasks, {calls} oracle calls, "
        f"{invalid} imagined results unusable ({invalid / max(calls, 1):.1%})"
    )
    for key in ("exact", "field_accuracy", "hallucinated_fields"):
        values = [r[key] for r in rows] + [0.0 if key != "hallucinated_fields" else 1.0] * invalid
        print(f"  {key}: {np.mean(values):.3f} (an unusable result counts as 0 / all hallucinated)")


if __name__ == "__main__":
    main()
