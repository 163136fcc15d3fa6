"""Rollout cost, measured side by side in one process: what a turn costs late in an episode against
early, and what a rehearsed PPO round costs against a real one.

    python benchmarks/rollout_speed.py                    # both parts
    python benchmarks/rollout_speed.py --part turns       # late vs early turns only
    python benchmarks/rollout_speed.py --part rounds --envs ToolCall-v0
    python benchmarks/rollout_speed.py --part decode      # one decoding step, short vs long cache

turns: 16 ten-turn episodes with `run_episodes` (an env that answers every turn with the same
~100-token observation and ends after 10 turns), the default-size model untrained (its turns run
to --turn-tokens), timed per turn; prints the mean of turns 3-10 over turns 1-2.
rounds: `PPOTrainer.collect` (8 tasks x 4 samples) with the shipped default model, in the real env
and in SelfSim-v0 replace mode (the policy as world), the same tasks; prints the ratio.
decode: one decoding step of the default-size model at batch 16 after 150 and after 1,600 cached
positions, with a preallocated (static) and a growing (dynamic) KV cache: what a late turn's
tokens cost once the conversation is not read again.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from rehearsal_gym.agents import PPOConfig, PPOTrainer

import rehearsal_gym  # noqa: F401 - registers the env ids
from rehearsal_gym.core.model import LM, LMConfig
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.defaults import default_lm, default_tokenizer

OBSERVATION = (
    '{"order_id": "O1042", "status": "shipped", "items": ['
    + ", ".join(f'{{"item_id": "I{i}", "qty": {i}}}' for i in range(6))
    + "]}"
)


class FixedTurnsEnv(gym.Env):
    """Answers every turn with the same observation; ends after `turns` turns."""

    observation_space = action_space = gym.spaces.Text(4096)

    def __init__(self, turns: int = 10, timestamps: list[float] | None = None) -> None:
        self.turns, self.timestamps, self.turn = turns, timestamps, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return OBSERVATION, {}

    def step(self, action):
        self.turn += 1
        if self.timestamps is not None:
            self.timestamps.append(time.perf_counter())
        return OBSERVATION, 0.0, self.turn >= self.turns, False, {}


def turn_cost(episodes: int, turn_tokens: int, device: str = "cpu") -> tuple[float, float, int]:
    """Mean seconds per turn of turns 1-2 and of turns 3-10, and the observation's token count."""
    torch.manual_seed(0)
    lm = LM.new(default_tokenizer(), LMConfig(max_len=4096)).to(device)
    stamps: list[float] = []
    envs = [FixedTurnsEnv(10, stamps if i == 0 else None) for i in range(episodes)]
    run_episodes(lm, envs, [None] * episodes, max_turn_tokens=4, seed=0)  # warm up
    stamps.clear()
    start = time.perf_counter()
    eps = run_episodes(lm, envs, [None] * episodes, greedy=False, max_turn_tokens=turn_tokens, seed=0)
    assert all(len(ep.actions) == 10 for ep in eps), "every episode must run 10 turns"
    per_turn = np.diff([start, *stamps])
    return float(per_turn[:2].mean()), float(per_turn[2:].mean()), len(lm.turn("env", OBSERVATION))


def decode_step_ms(length: int, static: bool, batch: int = 16, steps: int = 24) -> float:
    """Milliseconds per decoding step after `length` cached positions."""
    from transformers import StaticCache

    torch.manual_seed(0)
    lm = LM.new(default_tokenizer(), LMConfig(max_len=4096))
    ids = torch.randint(10, 500, (batch, length))
    mask = torch.ones(batch, length + steps, dtype=torch.long)
    positions = torch.arange(length).expand(batch, length)
    cache = StaticCache(config=lm.model.config, max_cache_len=length + steps) if static else None
    with torch.no_grad():
        out = lm.model(input_ids=ids, attention_mask=mask[:, :length], position_ids=positions, cache=cache)
        t0 = time.perf_counter()
        for s in range(steps):
            out = lm.model(
                input_ids=ids[:, :1],
                attention_mask=mask[:, : length + s + 1],
                position_ids=torch.full((batch, 1), length + s),
                cache=out["cache"],
            )
    return (time.perf_counter() - t0) / steps * 1000


def round_time(env_id: str, rehearse: str, repeats: int, lm: LM | None = None) -> float:
    """Seconds of one collect round (8 tasks x 4 samples) of `lm` (default: the shipped default),
    mean over `repeats` rounds."""
    config = PPOConfig.from_flat(env=env_id, tasks_per_iter=8, group_size=4, rehearse=rehearse, seed=0)
    trainer = PPOTrainer(config, lm or default_lm())
    trainer.collect()  # warm up
    t0 = time.perf_counter()
    for _ in range(repeats):
        trainer.collect()
    trainer.close()
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", choices=["turns", "rounds", "decode", "all"], default="all")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turn-tokens", type=int, default=24)
    parser.add_argument("--envs", nargs="+", default=["ToolCall-v0", "Retail-v0"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    if args.part in ("turns", "all"):
        early, late, obs_tokens = turn_cost(args.episodes, args.turn_tokens)
        print(
            f"turn cost, {args.episodes} ten-turn episodes ({obs_tokens}-token observations, "
            f"{args.turn_tokens}-token turns): turns 1-2 {early * 1000:.0f} ms, turns 3-10 {late * 1000:.0f} ms "
            f"per turn -> late/early {late / early:.2f}x"
        )
    if args.part in ("decode", "all"):
        for kind, static in (("static", True), ("dynamic", False)):
            short, long = decode_step_ms(150, static), decode_step_ms(1600, static)
            print(
                f"decode step, batch 16, {kind} cache: {short:.1f} ms after 150 positions, {long:.1f} ms "
                f"after 1,600 -> {long / short:.2f}x"
            )
    if args.part in ("rounds", "all"):
        for env_id in args.envs:
            real = round_time(env_id, "off", args.repeats)
            rehearsed = round_time(env_id, "replace", args.repeats)
            print(
                f"collect round {env_id} (8 tasks x 4 samples): real {real:.2f} s, SelfSim replace "
                f"{rehearsed:.2f} s -> rehearsed/real {rehearsed / real:.2f}x"
            )


if __name__ == "__main__":
    main()
