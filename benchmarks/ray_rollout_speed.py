"""Rollout throughput: in-process sampling vs Ray rollout workers (1 and 2 local actors).

Every mode plays the same rounds of sampled episodes (same tasks, same model weights) and prints
episodes per second and the ratio to the in-process baseline. Ray modes use one CPU thread per
worker; the first round of each mode (actor start-up, weight transfer) is not timed.

    pip install -e ".[ray]"
    python benchmarks/ray_rollout_speed.py --episodes 32 --rounds 3
"""

from __future__ import annotations

import argparse
import time

import torch
from rehearsal_gym.agents.config import PPOConfig
from rehearsal_gym.agents.train_envs import make_train_envs

import rehearsal_gym  # noqa: F401
from rehearsal_gym.core.model import LM, LMConfig
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.defaults import default_tokenizer


def in_process(config: PPOConfig, lm: LM, options: list[dict], rounds: int, threads: int) -> float:
    torch.set_num_threads(threads)
    envs = make_train_envs(config, lm, len(options))
    run_episodes(lm, envs, options, greedy=False, seed=0)  # warm-up round
    start = time.perf_counter()
    for r in range(rounds):
        run_episodes(lm, envs, options, greedy=False, generator=torch.Generator().manual_seed(r), seed=r)
    return rounds * len(options) / (time.perf_counter() - start)


def on_ray(config: PPOConfig, lm: LM, options: list[dict], rounds: int, workers: int) -> float:
    from rehearsal_gym.agents.distributed import RayRollouts

    pool = RayRollouts(PPOConfig.from_flat(**{**config.flat(), "rollout_workers": workers}), lm)
    pool.sync(0, lm.model.state_dict())
    pool.collect(options, seed=0)  # warm-up round: actors start, weights arrive
    start = time.perf_counter()
    for r in range(rounds):
        pool.collect(options, seed=r)
    rate = rounds * len(options) / (time.perf_counter() - start)
    pool.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="ToolCall-v0")
    parser.add_argument("--episodes", type=int, default=32, help="episodes per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per mode")
    parser.add_argument("--max-turns", type=int, default=3)
    args = parser.parse_args()
    import ray

    torch.manual_seed(0)
    lm = LM.new(default_tokenizer(), LMConfig())  # untrained default size: every turn runs long
    config = PPOConfig.from_flat(
        env=args.env, tasks_per_iter=args.episodes, group_size=1, max_turns=args.max_turns
    )
    options = [{"task_index": i} for i in range(args.episodes)]
    rows = [
        ("in-process, 1 thread", in_process(config, lm, options, args.rounds, threads=1)),
        ("in-process, 2 threads", in_process(config, lm, options, args.rounds, threads=2)),
    ]
    torch.set_num_threads(1)
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    for workers in (1, 2):
        rows.append(
            (f"Ray, {workers} worker{'s' * (workers > 1)}", on_ray(config, lm, options, args.rounds, workers))
        )
    ray.shutdown()
    base = rows[0][1]
    print(f"\n{args.env}, {args.episodes} sampled episodes per round, {args.rounds} timed rounds")
    print("| rollouts | episodes/s | vs in-process 1 thread |\n|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:.2f} | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
