"""run_episodes: batched episodes, reproducible under a seed."""

import gymnasium as gym
import torch

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.rollout import run_episodes


def _sampled(lm, seed):
    envs = [gym.make("ToolCall-v0", split="train", max_turns=2) for _ in range(4)]
    try:
        episodes = run_episodes(lm, envs, [{"task_index": i} for i in range(4)], greedy=False, seed=seed)
    finally:
        for env in envs:
            env.close()
    return [ep.ids for ep in episodes]


def test_a_seed_fixes_the_sampled_episodes_whatever_the_global_generator(tiny_lm):
    torch.manual_seed(1)
    first = _sampled(tiny_lm, seed=7)
    torch.manual_seed(2)  # the global generator no longer matters once a seed is given
    assert _sampled(tiny_lm, seed=7) == first
    assert _sampled(tiny_lm, seed=8) != first
