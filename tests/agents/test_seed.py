import copy

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rehearsal_gym.agents.ppo import PPOConfig, PPOTrainer

from rehearsal_gym.core.model import LM
from rehearsal_gym.training.analyst import AnalystConfig, analyse, analyst_sequence, train_analyst
from rehearsal_gym.training.skills import Skill, SkillLibrary, label_skill, parse_skill

TINY = dict(iterations=2, tasks_per_iter=2, group_size=2, epochs=1, minibatch_size=4, max_turns=2, lr=1e-3)


def fresh(tiny_lm):
    return LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)


def test_skill_json_round_trips_and_junk_is_no_skill():
    skill = Skill("workflow", "Workflow for cancel: find_customer -> cancel_order -> ANSWER.")
    assert parse_skill(skill.to_json()) == skill
    for junk in [
        "",
        "{}",
        '{"kind": "tip", "rule": "x"}',
        '{"kind": "avoid"}',
        '{"kind": "avoid", "rule": ""}',
        '{"kind": "avoid", "rule": "x", "extra": 1}',
        "[1, 2]",
        '{"kind": "avoid", "rule": "' + "x" * 500 + '"}',
    ]:
        assert parse_skill(junk) is None, junk


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parse_skill_never_raises(text):
    result = parse_skill(text)
    assert result is None or result.kind in ("workflow", "avoid")


def test_labels_are_workflows_for_successes_and_avoid_rules_for_failures():
    env = gym.make("Retail-v0", split="train")
    env.reset(options={"task_index": 2})
    base = env.unwrapped
    oracle = base.oracle_turns()
    infos = [env.step(turn)[-1] for turn in oracle]
    good = label_skill(base.task, oracle, oracle, infos)
    assert good.kind == "workflow" and "Workflow" in good.rule
    env.reset(options={"task_index": 2})
    bad_infos = [env.step("ANSWER no idea")[-1]]
    bad = label_skill(base.task, oracle, ["ANSWER no idea"], bad_infos)
    assert bad.kind == "avoid" and bad.rule


def test_library_keeps_the_best_supported_skills():
    lib = SkillLibrary(capacity=2)
    a, b, c = Skill("workflow", "a"), Skill("avoid", "b"), Skill("avoid", "c")
    lib.add("retail", "cancel", b, success=False)
    lib.add("retail", "cancel", a, success=True)  # support 1 + win 1 outranks b
    assert lib.best("retail", "cancel") == a
    lib.add("retail", "cancel", c, success=False)
    lib.add("retail", "cancel", c, success=False)
    lib.add("retail", "cancel", c, success=False)
    assert lib.best("retail", "cancel") == c and len(lib) == 2  # capacity: b was dropped
    assert lib.best("retail", "refund") is None
    assert SkillLibrary.from_dict(lib.to_dict()).to_dict() == lib.to_dict()


def test_analyst_warm_start_learns_the_labels(tiny_lm):
    lm = fresh(tiny_lm)
    config = AnalystConfig(
        envs=("ToolCall-v0",), tasks_per_env=6, samples_per_task=1, steps=40, batch_size=4, lr=3e-3
    )
    losses = train_analyst(lm, config, progress=False, log=lambda *a: None)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5


def test_analyst_replay_draws_oracle_episodes_from_oracle_tasks_per_env(tiny_lm):
    def replayed(**overrides) -> str:
        lines = []
        config = AnalystConfig(
            envs=("ToolCall-v0",), tasks_per_env=6, samples_per_task=1, steps=1, batch_size=4, **overrides
        )
        train_analyst(fresh(tiny_lm), config, progress=False, log=lines.append)
        return lines[0]

    # the replay is capped by the oracle episodes there are: the 6 analysed tasks give 6, 12 tasks 12
    assert replayed(oracle_fraction=2.0, oracle_tasks_per_env=None).endswith(", 6 oracle episodes")
    assert replayed(oracle_fraction=2.0, oracle_tasks_per_env=12).endswith(", 12 oracle episodes")
    with pytest.raises(ValueError, match="oracle_tasks_per_env"):
        AnalystConfig(oracle_tasks_per_env=0)


def test_skill_replay_puts_the_explainers_workflow_before_the_oracle_episode(tiny_lm):
    import numpy as np

    from rehearsal_gym.rehearsal.demos import agent_sequence, record_oracle_episodes
    from rehearsal_gym.training.analyst import analyst_path, oracle_replay

    tasks = range(5)
    plain = [agent_sequence(tiny_lm, d) for d in record_oracle_episodes("Finance-v0", tasks)]
    assert oracle_replay(tiny_lm, "Finance-v0", tasks, 0.0, np.random.default_rng(0)) == plain
    hinted = oracle_replay(tiny_lm, "Finance-v0", tasks, 1.0, np.random.default_rng(0))
    skill_id = tiny_lm.role_ids["skill"]
    for (ids, mask), (plain_ids, plain_mask) in zip(hinted, plain, strict=True):
        n = len(ids) - len(plain_ids)
        assert ids[0] == skill_id and ids[n:] == plain_ids and mask == [0] * n + plain_mask
        assert tiny_lm.decode(ids[1 : n - 1]).startswith("Do: ")  # a successful oracle: its workflow
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="skill_replay_fraction"):
            AnalystConfig(skill_replay_fraction=bad)
    # configs without the field keep their cache keys (and their cached analysts)
    assert analyst_path(tiny_lm, AnalystConfig()) == analyst_path(
        tiny_lm, AnalystConfig(skill_replay_fraction=0)
    )
    assert analyst_path(tiny_lm, AnalystConfig()) != analyst_path(
        tiny_lm, AnalystConfig(skill_replay_fraction=0.5)
    )


def test_analyse_returns_a_skill_or_none_per_episode(tiny_lm):
    trainer = PPOTrainer(PPOConfig.from_flat(**TINY), fresh(tiny_lm))
    episodes, _ = trainer.collect()
    skills = analyse(trainer.lm, ["request"] * len(episodes), episodes, max_tokens=16)
    assert len(skills) == len(episodes) and all(s is None or isinstance(s, Skill) for s in skills)
    ids, mask = analyst_sequence(tiny_lm, "r", ["ANSWER 1"], True, Skill("workflow", "w"))
    assert len(ids) == len(mask) and mask[-1] == 1 and mask[0] == 0


def test_seed_distill_uses_the_library_skill_as_teacher_and_reports_it(tiny_lm, tmp_path):
    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "seed_distill": True}), fresh(tiny_lm))
    family = trainer.envs[0].unwrapped.family
    for i in range(50):  # a skill for every template of the family
        trainer.library.add(
            family.name, family.task("train", i).template, Skill("workflow", "use the tools"), True
        )
    episodes, _ = trainer.collect()
    assert all(ep.skill == "Do: use the tools" for ep in episodes)  # info["skill"] channel
    row = trainer.train_iteration()
    assert row["losses/opd_loss"] != 0.0
    assert row["charts/library_size"] == len(trainer.library) >= len(family.templates)
    trainer.save(tmp_path / "ckpt")
    resumed = PPOTrainer.load(tmp_path / "ckpt")
    assert resumed.library.to_dict() == trainer.library.to_dict()
    assert resumed.train_iteration() == trainer.train_iteration()


def test_skill_sources_are_exclusive():
    with pytest.raises(ValueError, match="exclusive"):
        PPOConfig.from_flat(skill_hints=True, seed_distill=True)
