"""Soak run: many episodes on a vector env, with a bounded-memory check.

Runs --episodes episodes of random valid tool calls across --num-envs sub-envs of each real env
(each episode builds and drops its own SQLite database), sampling the process's resident memory.
Fails (exit 1) when memory grows by more than --max-growth-mb after the warm-up.

    python benchmarks/soak.py --episodes 3000 --num-envs 8
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import gymnasium as gym
import numpy as np
from rehearsal_gym.envs import REAL_ENV_IDS

import rehearsal_gym  # noqa: F401
from rehearsal_gym.core.rollout import random_turn


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--max-growth-mb", type=float, default=50.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ok = True
    for env_id in REAL_ENV_IDS:
        envs = gym.make_vec(env_id, num_envs=args.num_envs, vectorization_mode="sync", max_turns=4)
        tools = envs.envs[0].unwrapped.tools
        envs.reset(seed=0)
        done_episodes, steps, samples = 0, 0, []
        t0 = time.time()
        while done_episodes < args.episodes:
            actions = tuple(random_turn(tools, rng) for _ in range(args.num_envs))
            _, _, terminated, truncated, _ = envs.step(actions)
            done_episodes += int(np.sum(terminated | truncated))
            steps += 1
            if steps % 200 == 0:
                samples.append(rss_mb())
        envs.close()
        warm = samples[len(samples) // 4] if samples else rss_mb()
        growth = max(samples) - warm if samples else 0.0
        ok &= growth <= args.max_growth_mb
        print(
            f"{env_id}: {done_episodes} episodes, {steps * args.num_envs} steps in {time.time() - t0:.0f}s; "
            f"RSS {warm:.0f} MB after warm-up, growth {growth:+.1f} MB (bound {args.max_growth_mb:.0f} MB)"
        )
    print("memory bounded: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
