"""The typed data path: imagined calls -> environment-role sequences -> (task, role) baselines."""

import dataclasses
import pickle

import pytest
import torch
from rehearsal_gym.agents.buffer import (
    Role,
    RoleSequence,
    RolloutBuffer,
    gae_advantages,
    role_sequences,
    sequence_group_advantages,
)
from rehearsal_gym.agents.config import PPOConfig

from rehearsal_gym.core.rollout import Episode, ImaginedCall


def _episode(reward, imagined):
    ep = Episode("t", "x", reward=reward)
    ep.extend([1, 2], agent=False)
    ep.extend([3, 4], agent=True, logprobs=[-0.5, -0.25])
    ep.imagined = list(imagined)
    return ep


def test_env_role_sequences_carry_the_imagined_call_exactly():
    call = ImaginedCall((7, 8, 9), (10, 11), (-1.5, -0.125))
    empty = ImaginedCall((7,), (), ())  # nothing sampled: nothing to train
    seqs = role_sequences([_episode(1.0, [call, empty])], [3], train_env_role=True)
    agent, env = seqs
    assert (agent.role, agent.group, agent.ids, agent.mask) == (Role.AGENT, 3, [1, 2, 3, 4], [0, 0, 1, 1])
    assert agent.old_logprobs == [0.0, 0.0, -0.5, -0.25]
    assert (env.role, env.group, env.reward) == (Role.ENV, 3, 1.0)
    assert env.ids == [7, 8, 9, 10, 11] and env.mask == [0, 0, 0, 1, 1]
    assert env.old_logprobs == [0.0, 0.0, 0.0, -1.5, -0.125]
    assert role_sequences([_episode(1.0, [call])], [3], train_env_role=False) == [agent]


def test_agent_and_env_roles_of_a_task_have_separate_baselines():
    # task 0: agent rewards 1, 0; env role rewards 1, 1 (its own group: advantage 0, not +-0.5)
    seqs = [
        RoleSequence([1, 2], [0, 1], [0.0, 0.0], 1.0, 0, Role.AGENT),
        RoleSequence([1, 2], [0, 1], [0.0, 0.0], 0.0, 0, Role.AGENT),
        RoleSequence([1, 2], [0, 1], [0.0, 0.0], 1.0, 0, Role.ENV),
        RoleSequence([1, 2], [0, 1], [0.0, 0.0], 1.0, 0, Role.ENV),
        RoleSequence([1, 2], [0, 1], [0.0, 0.0], 0.0, 1, Role.ENV),
    ]
    assert sequence_group_advantages(seqs) == [0.5, -0.5, 0.0, 0.0, 0.0]


def test_minibatch_targets_are_the_sequences_shifted_by_one():
    seqs = [
        RoleSequence([5, 6, 7], [0, 1, 1], [0.0, -1.0, -2.0], 1.0, 0),
        RoleSequence([5, 6], [0, 1], [0.0, -3.0], 0.0, 0),
    ]
    buffer = RolloutBuffer(seqs)
    buffer.compute_group_advantages()
    mb = buffer.collate([0, 1], pad_id=0)
    assert mb.ids.tolist() == [[5, 6, 7], [5, 6, 0]] and mb.attention.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert mb.mask.tolist() == [[1, 1], [1, 0]]
    assert mb.old_logprobs.tolist() == [[-1.0, -2.0], [-3.0, 0.0]]
    assert mb.advantages.tolist() == [[0.5, 0.5], [-0.5, -0.5]]


def test_gae_advantages_take_the_values_given():
    seq = RoleSequence([1, 2, 3], [0, 1, 1], [0.0, 0.0, 0.0], 1.0, 0)
    adv, ret = gae_advantages([seq], [torch.tensor([0.25, 0.5])], gamma=1.0, lam=1.0)
    # reward 1 at the last target; lam = gamma = 1: advantage = return - value
    torch.testing.assert_close(ret[0], torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(adv[0], torch.tensor([0.75, 0.5]))


def test_rehearsed_round_trains_the_env_role_on_its_sampled_tokens():
    """The shipped default calls tools, so a rehearsed round has imagined calls; each becomes one
    environment-role sequence with exactly the ids and log-probs the world sampled."""
    from rehearsal_gym.agents.ppo import PPOTrainer

    from rehearsal_gym import default_lm

    config = PPOConfig.from_flat(
        iterations=1, tasks_per_iter=2, group_size=2, max_turns=3, rehearse="replace"
    )
    trainer = PPOTrainer(config, default_lm())
    episodes, groups = trainer.collect()
    calls = [(g, c) for ep, g in zip(episodes, groups, strict=True) for c in ep.imagined if c.ids]
    assert calls, "the default model made no tool call"
    env_seqs = [s for s in trainer.buffer(episodes, groups).seqs if s.role == Role.ENV]
    assert len(env_seqs) == len(calls)
    for seq, (g, call) in zip(env_seqs, calls, strict=True):
        n = len(call.prompt_ids)
        assert seq.group == g and seq.ids == [*call.prompt_ids, *call.ids]
        assert seq.old_logprobs[n:] == list(call.logprobs) and sum(seq.mask) == len(call.ids)
    assert pickle.loads(pickle.dumps(episodes))[0].imagined == episodes[0].imagined  # crosses to Ray


def test_config_sections_round_trip():
    config = PPOConfig.from_flat(
        env="Retail-v0", lr=1e-3, rehearse="wrap", grounding_coef=0.5, rollout_workers=0
    )
    assert config.ppo.lr == 1e-3 and config.rehearsal.grounding_coef == 0.5
    assert PPOConfig.from_dict(dataclasses.asdict(config)) == config
    assert PPOConfig.from_dict(config.flat()) == config  # a schema-2 checkpoint's flat config
    assert PPOConfig.from_flat(**config.flat()) == config
    with pytest.raises(ValueError, match="no option lrr"):
        PPOConfig.from_flat(lrr=1.0)
    with pytest.raises(ValueError, match=r"PPOConfig.ppo.epochs must be a positive int, got 0"):
        PPOConfig.from_flat(epochs=0)
    with pytest.raises(ValueError, match=r"rehearse must be one of"):
        PPOConfig.from_flat(rehearse=True)
