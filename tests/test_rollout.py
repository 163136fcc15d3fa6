"""run_episodes: batched episodes, reproducible under a seed."""

import gymnasium as gym
import pytest
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


def test_kept_kv_caches_give_the_ids_and_logprobs_of_reading_each_conversation_whole(tiny_lm, monkeypatch):
    from rehearsal_gym.core import rollout, sampling

    sessions = []

    class Recorded(sampling.KVSession):
        def __init__(self, **kw):
            super().__init__(**kw)
            sessions.append(self)

    monkeypatch.setattr(rollout, "KVSession", Recorded)

    def run(kv_cache):
        envs = [gym.make(env_id, max_turns=4) for env_id in ("ToolCall-v0", "Retail-v0", "Finance-v0") * 2]
        return run_episodes(
            tiny_lm,
            envs,
            [{"task_index": i} for i in range(6)],
            greedy=False,
            max_turn_tokens=12,
            seed=7,
            kv_cache=kv_cache,
        )

    cached, whole = run(True), run(False)
    assert (
        len(sessions) == 1 and sessions[0].reused >= 3 and sessions[0].rebuilt == 1
    )  # only the first turn read whole
    assert sum(len(ep.actions) for ep in cached) > len(cached)  # turns after the first were continued
    for a, b in zip(cached, whole, strict=True):
        assert a.ids == b.ids and a.agent_mask == b.agent_mask and a.actions == b.actions
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)


def test_a_session_reads_afresh_when_a_prompt_does_not_extend_its_conversation(tiny_lm):
    from rehearsal_gym.core.sampling import KVSession, sample

    kw = dict(max_new_tokens=5, stop_id=None, pad_id=tiny_lm.pad_id, greedy=True)
    a, b = tiny_lm.turn("task", "Request: add 1 and 2"), tiny_lm.turn("task", "Request: what is 7% of 90?")
    session = KVSession(max_width=400)
    first = sample(tiny_lm.model, [a, b], session=session, keys=["a", "b"], **kw)
    assert (
        sample(tiny_lm.model, [a, b], **kw).tokens == first.tokens
    )  # the preallocated one-shot cache agrees
    grown = [a + first.tokens[0] + tiny_lm.turn("env", '{"result": 3}'), b + first.tokens[1] + [5]]
    out = sample(tiny_lm.model, grown[::-1], session=session, keys=["b", "a"], **kw)  # reordered rows
    assert (session.reused, session.rebuilt) == (1, 1)
    assert out.tokens == sample(tiny_lm.model, grown[::-1], **kw).tokens
    sample(tiny_lm.model, [grown[0] + out.tokens[1] + [7]], session=session, keys=["a"], **kw)  # b left
    assert (session.reused, session.rebuilt) == (2, 1)
    sample(tiny_lm.model, [b + [9]], session=session, keys=["a"], **kw)  # not a's conversation
    assert session.rebuilt == 2
    sample(tiny_lm.model, [b + [9] + [4] * 400], session=session, keys=["a"], **kw)  # would outgrow max_width
    assert session.rebuilt == 3
    with pytest.raises(ValueError, match="one key per prompt"):
        sample(tiny_lm.model, [a], session=session, **kw)


def test_the_world_mask_marks_real_tool_results_only(tiny_lm, scripted):
    from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

    agent = scripted(['CALL add {"a": 1, "b": 2}', "CALL nonsense", "ANSWER 3"])
    ep = run_episodes(agent, [gym.make("ToolCall-v0", max_turns=3)], [{"task_index": 0}], max_turn_tokens=24)[
        0
    ]
    marked = [i for i, m in zip(ep.ids, ep.world_mask, strict=True) if m]
    assert len(ep.world_mask) == len(ep.ids)
    assert tiny_lm.decode(marked) == '{"result": 3}' and marked[-1] == tiny_lm.end_id  # not the error
    agent = scripted(['CALL add {"a": 1, "b": 2}', "ANSWER 3"])
    sim = SelfSimEnv("ToolCall-v0", model=scripted(['{"result": 3}']), mode="replace", max_result_tokens=32)
    ep = run_episodes(agent, [sim], [{"task_index": 0}], max_turn_tokens=24)[0]
    assert ep.imagined and not any(ep.world_mask)  # an imagined result is no real tool's output
