"""SelfSim-v0 step throughput: N separate envs vs the vector form that batches the environment role.

Both run the same model (default size, untrained, so every imagined result runs to
--result-tokens), the same N tasks and the same agent calls; prints seconds per step of all N
sub-envs and the ratio.

    python benchmarks/selfsim_vector_speed.py --num-envs 8
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch

import rehearsal_gym  # noqa: F401
from rehearsal_gym.core.model import LM, LMConfig
from rehearsal_gym.defaults import default_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed rounds")
    parser.add_argument("--result-tokens", type=int, default=48)
    args = parser.parse_args()
    torch.manual_seed(0)
    lm = LM.new(default_tokenizer(), LMConfig())
    kwargs = dict(base="ToolCall-v0", model=lm, max_result_tokens=args.result_tokens)
    action = 'CALL add {"a": 1, "b": 2}'

    singles = [gym.make("SelfSim-v0", **kwargs) for _ in range(args.num_envs)]
    vec = gym.make_vec("SelfSim-v0", num_envs=args.num_envs, **kwargs)
    separate = batched = 0.0
    for r in range(args.steps):  # each round: fresh episodes, then one timed step of every env
        for i, env in enumerate(singles):
            env.reset(seed=r * args.num_envs + i)
        t0 = time.perf_counter()
        for env in singles:
            env.step(action)
        separate += (time.perf_counter() - t0) / args.steps
        vec.reset(seed=r * args.num_envs)
        t0 = time.perf_counter()
        vec.step((action,) * args.num_envs)
        batched += (time.perf_counter() - t0) / args.steps

    print(f"{args.num_envs} separate SelfSimEnvs: {separate:.3f} s per step of all envs")
    print(f"SelfSimVectorEnv (batched):  {batched:.3f} s per step of all envs")
    print(
        f"speed-up: {separate / batched:.1f}x  ({args.result_tokens} result tokens, {lm.num_parameters():,} params)"
    )


if __name__ == "__main__":
    main()
