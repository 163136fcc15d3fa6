"""run_episodes: batched episodes, reproducible under a seed."""

import gymnasium as gym
import torch

import rehearsal_gym  # noqa: F401  (registers the envs)
from rehearsal_gym.core.rollout import run_episodes


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


def test_skill_turns_put_the_reset_skill_before_the_task(tiny_lm):
    envs = [gym.make("Finance-v0", split="test") for _ in range(2)]
    options = [{"task_index": 0, "skill": "Do: get_price then ANSWER"}, {"task_index": 1}]
    plain = run_episodes(tiny_lm, envs, options, seed=0, max_turn_tokens=8)
    skilled = run_episodes(tiny_lm, envs, options, seed=0, max_turn_tokens=8, skill_turns=True)
    skill = tiny_lm.turn("skill", "Do: get_price then ANSWER")
    task = tiny_lm.turn("task", envs[0].reset(options={"task_index": 0})[0])
    assert plain[0].skill == skilled[0].skill == "Do: get_price then ANSWER"
    assert plain[0].ids[: len(task)] == task  # recorded only
    assert skilled[0].ids[: len(skill) + len(task)] == skill + task  # read by the agent
    assert skilled[0].agent_mask[: len(skill)] == [0] * len(skill)
    assert skilled[1].ids == plain[1].ids  # no skill, nothing inserted


def test_a_turn_that_could_overflow_the_context_truncates_the_episode(tiny_tokenizer):
    """Nothing is cut silently: once the next turn could pass the model's context, the episode ends
    with truncated=True and context_overflow=True, and its ids still fit the context."""
    from rehearsal_gym.core.model import LM, LMConfig

    probe = gym.make("ToolCall-v0", split="train", max_turns=4)
    prompt = len(
        LM.new(tiny_tokenizer, LMConfig(hidden_size=8, num_layers=1, num_heads=1, intermediate_size=8)).turn(
            "task", probe.reset(options={"task_index": 0})[0]
        )
    )
    small = LM.new(
        tiny_tokenizer,
        LMConfig(hidden_size=8, num_layers=1, num_heads=1, intermediate_size=8, max_len=prompt + 12),
    )
    (ep,) = run_episodes(small, [probe], [{"task_index": 0}], greedy=False, seed=0, max_turn_tokens=8)
    assert ep.truncated and ep.context_overflow and len(ep.actions) == 1  # one turn fitted, the next not
    assert len(ep.ids) <= small.max_len  # the observation that left no room is not kept
