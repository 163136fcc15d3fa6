import copy
import json

import pytest
import torch
from rehearsal_gym.agents.buffer import RoleSequence, RolloutBuffer, grounding_sequences, role_sequences
from rehearsal_gym.agents.callbacks import Grounding
from rehearsal_gym.agents.ppo import NonFiniteLossError, PPOConfig, PPOTrainer

import rehearsal_gym.core.rollout as rollout
from rehearsal_gym.core.model import LM

TINY = dict(iterations=2, tasks_per_iter=2, group_size=2, epochs=1, minibatch_size=4, max_turns=2, lr=1e-3)


def fresh(tiny_lm):
    return LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)


def test_loss_uses_exactly_the_sampled_ids(tiny_lm, monkeypatch):
    """Each agent turn of each episode's sequence is the row the sampler returned for that episode's
    own prompt, with its log-probs: nothing re-tokenised, nothing swapped between episodes."""
    sampled = {}  # prompt ids -> [(sampled ids, log-probs)] in the sampler's row order
    real_sample = rollout.sample

    def recording_sample(model, prompts, **kwargs):
        out = real_sample(model, prompts, **kwargs)
        for prompt, tokens, logprobs in zip(prompts, out.tokens, out.logprobs, strict=True):
            sampled.setdefault(tuple(prompt), []).append((tokens, logprobs))
        return out

    monkeypatch.setattr(rollout, "sample", recording_sample)
    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "max_turns": 3}), fresh(tiny_lm))
    episodes, groups = trainer.collect()
    seqs = role_sequences(episodes, groups, train_env_role=False)
    turns = 0
    for seq in seqs:
        starts = [i for i, m in enumerate(seq.mask) if m and not seq.mask[i - 1]]
        assert starts
        for start in starts:
            # this episode's own prompt (a group's episodes share their first prompt: rows in order)
            tokens, logprobs = sampled[tuple(seq.ids[:start])].pop(0)
            assert seq.ids[start : start + len(tokens)] == tokens
            assert seq.old_logprobs[start : start + len(tokens)] == logprobs
            assert all(seq.mask[start : start + len(tokens)])
            turns += 1
    assert turns == sum(len(ep.actions) for ep in episodes)


def test_update_changes_parameters_and_moves_toward_reward(tiny_lm):
    trainer = PPOTrainer(PPOConfig.from_flat(**TINY), fresh(tiny_lm))
    ids = tiny_lm.turn("task", "What is 1 + 1?") + [tiny_lm.role_ids["agent"]]
    good = ids + tiny_lm.encode("ANSWER 2") + [tiny_lm.end_id]
    bad = ids + tiny_lm.encode("ANSWER 3") + [tiny_lm.end_id]

    def seq(full, reward):
        mask = [0] * len(ids) + [1] * (len(full) - len(ids))
        with torch.no_grad():
            lp = torch.log_softmax(trainer.lm.model(input_ids=torch.tensor([full])).logits[0, :-1], -1)
            old = [0.0] + lp.gather(-1, torch.tensor(full[1:])[:, None]).squeeze(-1).tolist()
        return RoleSequence(full, mask, old, reward, group=0)

    def logp(full):
        with torch.no_grad():
            lp = torch.log_softmax(trainer.lm.model(input_ids=torch.tensor([full])).logits[0, :-1], -1)
            return lp.gather(-1, torch.tensor(full[1:])[:, None]).squeeze(-1)[len(ids) - 1 :].sum().item()

    before = [p.detach().clone() for p in trainer.lm.model.parameters()]
    gap_before = logp(good) - logp(bad)
    for _ in range(5):
        trainer.update([seq(good, 1.0), seq(bad, 0.0)])
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.lm.model.parameters(), strict=True))
    assert logp(good) - logp(bad) > gap_before


def test_target_kl_stops_the_round_once_the_policy_moved(tiny_lm):
    ids = tiny_lm.turn("task", "What is 1 + 1?") + [tiny_lm.role_ids["agent"]]
    full = ids + tiny_lm.encode("ANSWER 2") + [tiny_lm.end_id]
    mask = [0] * len(ids) + [1] * (len(full) - len(ids))

    def seqs(lm):
        with torch.no_grad():
            lp = torch.log_softmax(lm.model(input_ids=torch.tensor([full])).logits[0, :-1], -1)
        old = [0.0] + lp.gather(-1, torch.tensor(full[1:])[:, None]).squeeze(-1).tolist()
        return [RoleSequence(full, mask, old, reward, group=0) for reward in (1.0, 0.0)]

    def run(target_kl):
        trainer = PPOTrainer(
            PPOConfig.from_flat(
                **{**TINY, "epochs": 4, "minibatch_size": 1, "lr": 1e-2, "target_kl": target_kl}
            ),
            fresh(tiny_lm),
        )
        return trainer.update(seqs(trainer.lm))

    free = run(0.0)  # off: every planned step is taken, and the policy moves away from the samples
    assert free["update_fraction"] == 1.0 and free["approx_kl"] > 0
    tight = run(1e-9)  # the first step moves it past any tiny target: the rest of the round is skipped
    assert 0 < tight["update_fraction"] < 1


def test_kl_clamp_keeps_one_far_token_from_taking_the_step(tiny_lm):
    """A policy that made the sampled tokens far less likely than the reference did (as junk tokens
    after a failed call do in long runs): uncapped, k3 explodes; with kl_clamp each token weighs at
    most the cap."""
    ids = tiny_lm.turn("task", "What is 1 + 1?") + [tiny_lm.role_ids["agent"]]
    full = ids + tiny_lm.encode("ANSWER 2") + [tiny_lm.end_id]
    mask = [0] * len(ids) + [1] * (len(full) - len(ids))

    def run(kl_clamp):
        trainer = PPOTrainer(
            PPOConfig.from_flat(**{**TINY, "kl_clamp": kl_clamp, "kl_coef": 1.0}), fresh(tiny_lm)
        )
        with torch.no_grad():  # the policy forgets the answer's tokens; the reference keeps them
            for t in set(full[len(ids) :]):
                trainer.lm.model.get_output_embeddings().weight[t] *= -30.0
            lp = torch.log_softmax(trainer.lm.model(input_ids=torch.tensor([full])).logits[0, :-1], -1)
        old = [0.0] + lp.gather(-1, torch.tensor(full[1:])[:, None]).squeeze(-1).tolist()
        return trainer.update([RoleSequence(full, mask, old, reward, group=0) for reward in (1.0, 0.0)])

    free, capped = run(0.0), run(10.0)
    assert free["approx_kl_ref"] > 100 and free["kl_capped_frac"] == 0.0  # not measured without a cap
    assert 0 < capped["approx_kl_ref"] <= 10.0
    assert 0 < capped["kl_capped_frac"] <= 1.0


@pytest.mark.parametrize("sampling", ["uniform", "template-variance"])
def test_resume_gives_identical_next_iteration(tiny_lm, tmp_path, sampling):
    a = PPOTrainer(PPOConfig.from_flat(**TINY, task_sampling=sampling), fresh(tiny_lm))
    a.train_iteration()
    a.save(tmp_path / "ckpt")
    row_a = a.train_iteration()
    b = PPOTrainer.load(tmp_path / "ckpt")
    row_b = b.train_iteration()
    assert row_a == row_b
    for pa, pb in zip(a.lm.model.parameters(), b.lm.model.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)


def test_nan_guard_keeps_last_checkpoint(tiny_lm, tmp_path):
    trainer = PPOTrainer(PPOConfig.from_flat(**TINY), fresh(tiny_lm))
    trainer.save(tmp_path / "ckpt")
    stamp = (tmp_path / "ckpt" / "trainer_state.json").read_text()
    ids = tiny_lm.turn("task", "x") + [tiny_lm.role_ids["agent"], 5, tiny_lm.end_id]
    bad = [
        RoleSequence(ids, [0] * (len(ids) - 2) + [1, 1], [float("nan")] * len(ids), r, 0) for r in (0.0, 1.0)
    ]
    with pytest.raises(NonFiniteLossError, match="last checkpoint is kept"):
        trainer.update(bad)
    assert (tmp_path / "ckpt" / "trainer_state.json").read_text() == stamp


def test_rehearsed_training_trains_the_environment_role(tiny_lm):
    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "rehearse": "replace"}), fresh(tiny_lm))
    row = trainer.train_iteration()
    assert row["charts/env_role_sequences"] >= 0
    for env in trainer.envs:
        assert env.mode == "replace"


@pytest.mark.parametrize("rehearse, shared", [("off", True), ("replace", True), ("replace", False)])
def test_shared_worlds_give_each_task_group_one_world_seed(tiny_lm, rehearse, shared):
    config = PPOConfig.from_flat(
        **{**TINY, "tasks_per_iter": 3, "rehearse": rehearse, "shared_worlds": shared}
    )
    trainer = PPOTrainer(config, fresh(tiny_lm))
    _, groups = trainer.collect()
    seeds = [opts.get("world_seed") for opts in trainer.last_options]
    if rehearse == "off" or not shared:  # the real env's world is the task's own; else one per episode
        assert seeds == [None] * len(groups)
        return
    by_group = {}
    for g, s in zip(groups, seeds, strict=True):
        by_group.setdefault(g, set()).add(s)
    assert all(len(v) == 1 for v in by_group.values())  # one world per group
    assert len({next(iter(v)) for v in by_group.values()}) == 3  # a different one per group


def test_frozen_world_imagines_with_the_reference_and_stays_put(tiny_lm, tmp_path):
    config = PPOConfig.from_flat(
        **{**TINY, "rehearse": "replace", "rehearsal_world": "frozen", "train_env_role": False}
    )
    trainer = PPOTrainer(config, fresh(tiny_lm))
    assert all(env.lm.model is trainer.ref for env in trainer.envs)
    world = {k: v.clone() for k, v in trainer.ref.state_dict().items()}
    policy = {k: v.clone() for k, v in trainer.lm.model.state_dict().items()}
    row = trainer.train_iteration()
    assert row["charts/env_role_sequences"] == 0  # only the agent role trains
    assert all(torch.equal(world[k], v) for k, v in trainer.ref.state_dict().items())
    assert any(not torch.equal(policy[k], v) for k, v in trainer.lm.model.state_dict().items())
    trainer.save(tmp_path / "ckpt")
    resumed = PPOTrainer.load(tmp_path / "ckpt")
    assert all(env.lm.model is resumed.ref for env in resumed.envs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rehearse": "dream"}, "rehearse"),
        ({"advantage": "td"}, "advantage"),
        ({"lr": 0}, "lr"),
        ({"group_size": 0}, "group_size"),
        ({"kl_coef": float("nan")}, "kl_coef"),
        ({"loss_reduction": "sum"}, "loss_reduction"),
        ({"warmup_iterations": -1}, "warmup_iterations"),
        ({"target_kl": -0.1}, "target_kl"),
        ({"target_kl": float("nan")}, "target_kl"),
        ({"kl_clamp": -1.0}, "kl_clamp"),
        ({"grounding_coef": 1.0, "rehearse": "replace"}, "grounding_coef"),
        ({"rehearsal_world": "dream"}, "rehearsal_world"),
        ({"task_sampling": "hardest"}, "task_sampling"),
        ({"curriculum_floor": 0.0}, "curriculum_floor"),
        ({"rehearse": "replace", "rehearsal_world": "frozen"}, "train_env_role"),
        (
            {
                "rehearse": "replace",
                "rehearsal_world": "frozen",
                "train_env_role": False,
                "rollout_workers": 2,
            },
            "rollout_workers",
        ),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PPOConfig.from_flat(**kwargs)


def test_grounding_trains_the_env_role_on_real_results(tiny_lm):
    from rehearsal_gym.envs.base import result_text

    config = PPOConfig.from_flat(**{**TINY, "rehearse": "wrap", "grounding_coef": 1.0, "max_turns": 3})
    trainer = PPOTrainer(config, fresh(tiny_lm))
    episodes = []
    for k, env in enumerate(trainer.envs):  # oracle calls: the untrained tiny model rarely makes one
        env.reset(options={"task_index": k})
        ep = rollout.Episode(env.unwrapped.task.task_id, env.unwrapped.task.template)
        for turn in env.unwrapped.oracle_turns():
            *_, terminated, truncated, info = env.step(turn)
            ep.infos.append(info)
            if "env_role" in info:
                ep.imagined.append(info["env_role"])
            if terminated or truncated:
                break
        episodes.append(ep)
    seqs = grounding_sequences(episodes, trainer.lm)
    reals = [info["real_result"] for ep in episodes for info in ep.infos if "env_role" in info]
    assert seqs and len(seqs) == len(reals)
    for sq, real in zip(seqs, reals, strict=True):  # targets are the real results, exactly
        target = [t for t, m in zip(sq.ids, sq.mask, strict=True) if m]
        assert target == trainer.lm.encode(result_text(real)) + [trainer.lm.end_id]

    def nll():
        with torch.no_grad():
            return Grounding.batch_loss(trainer, seqs).item()

    before = nll()
    for _ in range(5):
        Grounding(1.0).step(trainer, seqs[:4])
    assert nll() < before
    row = trainer.train_iteration()
    assert row["charts/grounding_targets"] >= 0 and row["losses/grounding_loss"] >= 0


def test_learning_rate_warms_up_linearly(tiny_lm):
    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "lr": 1e-3, "warmup_iterations": 3}), fresh(tiny_lm))
    rates = []
    for it in range(5):
        trainer.iteration = it
        rates.append(trainer.learning_rate())
    assert rates == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    trainer.iteration = 0
    trainer.train_iteration()
    assert trainer.opt.param_groups[0]["lr"] == pytest.approx(2.5e-4)


def test_group_minibatches_keep_groups_whole(tiny_lm):
    config = PPOConfig.from_flat(**{**TINY, "group_minibatches": True, "minibatch_size": 4})
    trainer = PPOTrainer(config, fresh(tiny_lm))
    seqs = [RoleSequence([1, 2], [0, 1], [0.0, 0.0], 0.0, g) for g in (0, 0, 2, 2, 2, 4, 6, 6, 6, 6, 6)]
    batches = [[seqs[i] for i in idx] for idx in RolloutBuffer(seqs).order(trainer.rng, 4, by_group=True)]
    assert sorted(id(s) for b in batches for s in b) == sorted(id(s) for s in seqs)  # each once
    for b in batches:
        groups = {s.group for s in b}
        assert all(sum(s.group == g for s in seqs) == sum(s.group == g for s in b) for g in groups)
        assert len(b) <= 4 or len(groups) == 1  # only a group larger than a minibatch overflows it


def test_sequence_reduction_and_scaled_advantages_train(tiny_lm):
    config = PPOConfig.from_flat(
        **{**TINY, "loss_reduction": "sequence", "scale_advantages": True, "group_minibatches": True}
    )
    row = PPOTrainer(config, fresh(tiny_lm)).train_iteration()
    assert all(map(lambda v: v == v, row.values()))  # finite, no NaN


def test_gae_mode_trains_the_value_head(tiny_lm, tmp_path):
    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "advantage": "gae"}), fresh(tiny_lm))
    ids = tiny_lm.turn("task", "What is 1 + 1?") + [tiny_lm.role_ids["agent"]]
    full = ids + tiny_lm.encode("ANSWER 2") + [tiny_lm.end_id]
    mask = [0] * len(ids) + [1] * (len(full) - len(ids))
    with torch.no_grad():
        lp = torch.log_softmax(trainer.lm.model(input_ids=torch.tensor([full])).logits[0, :-1], -1)
        old = [0.0] + lp.gather(-1, torch.tensor(full[1:])[:, None]).squeeze(-1).tolist()
    before = trainer.value_head.linear.weight.detach().clone()
    stats = trainer.update([RoleSequence(full, mask, old, 1.0, 0)])
    assert stats["value_loss"] > 0
    assert not torch.equal(before, trainer.value_head.linear.weight)
    trainer.save(tmp_path / "ckpt")
    loaded = PPOTrainer.load(tmp_path / "ckpt")
    torch.testing.assert_close(loaded.value_head.linear.weight, trainer.value_head.linear.weight)


def test_seed_teacher_scores_the_same_tokens_with_the_skill(tiny_lm):
    from rehearsal_gym.core.sampling import score

    trainer = PPOTrainer(PPOConfig.from_flat(**{**TINY, "skill_hints": True}), fresh(tiny_lm))
    ctx = tiny_lm.turn("task", "What is 1 + 1?") + [tiny_lm.role_ids["agent"]]
    action = tiny_lm.encode("ANSWER 2") + [tiny_lm.end_id]
    skill = tiny_lm.turn("skill", "Workflow: add -> ANSWER.")
    seq = RoleSequence(
        ctx + action,
        [0] * len(ctx) + [1] * len(action),
        [0.0] * (len(ctx) + len(action)),
        1.0,
        0,
        skill_ids=skill,
    )
    teacher = trainer._teacher_logprobs([seq], torch.Size([1, len(seq.ids) - 1]))
    with torch.no_grad():
        expected = score(trainer.lm.model, [skill + ctx], [action], pad_id=tiny_lm.pad_id)[0]
    torch.testing.assert_close(teacher[0, len(ctx) - 1 :], expected)


def test_skill_hint_distillation_runs_in_training(tiny_lm):
    trainer = PPOTrainer(
        PPOConfig.from_flat(**{**TINY, "skill_hints": True, "lambda_opd": 0.5}), fresh(tiny_lm)
    )
    row = trainer.train_iteration()
    assert row["losses/opd_loss"] != 0.0


def test_identical_updates_from_scratch_under_one_seed(tiny_lm):
    rows, params = [], []
    for _ in range(2):
        trainer = PPOTrainer(PPOConfig.from_flat(**TINY), fresh(tiny_lm))
        rows.append(trainer.train_iteration())
        params.append([p.detach().clone() for p in trainer.lm.model.parameters()])
    assert rows[0] == rows[1]
    for a, b in zip(*params, strict=True):
        assert torch.equal(a, b)


def test_template_curriculum_sends_the_groups_to_the_template_with_mixed_outcomes(tiny_lm):
    trainer = PPOTrainer(
        PPOConfig.from_flat(**TINY, env="Finance-v0", task_sampling="template-variance"), fresh(tiny_lm)
    )
    solved = [t for t in trainer.family.templates if t != "sell_all"]
    for _ in range(3):  # every other template always solved, sell_all half the time
        trainer.curriculum.update(
            solved * 10 + ["sell_all"] * 10, [True] * 10 * len(solved) + [True, False] * 5
        )
    weights = dict(zip(trainer.family.templates, trainer.curriculum.weights(), strict=True))
    assert weights["sell_all"] > 0.5 and min(weights.values()) > 0
    trainer.config = PPOConfig.from_flat(
        **{**TINY, "tasks_per_iter": 12}, env="Finance-v0", task_sampling="template-variance"
    )
    trainer.envs = trainer.envs * 6
    episodes, _ = trainer.collect()
    templates = [ep.template for ep in episodes]
    assert templates.count("sell_all") > len(templates) / 3  # uniform sampling gives a fifth
    row = trainer.train_iteration()
    assert abs(sum(v for k, v in row.items() if k.startswith("curriculum/")) - 1) < 1e-9


def test_premise_redraws_reach_the_envs_and_the_log(tiny_lm):
    from rehearsal_gym.agents.callbacks import _mean_info

    from rehearsal_gym.core.rollout import Episode

    trainer = PPOTrainer(
        PPOConfig.from_flat(**{**TINY, "rehearse": "replace", "premise_redraws": 2}), fresh(tiny_lm)
    )
    assert all(env.premise_redraws == 2 for env in trainer.envs)
    row = trainer.train_iteration()
    assert {"charts/premise_kept", "charts/premise_redraws"} <= set(row)
    episodes = [Episode("t0", "x"), Episode("t1", "x")]
    episodes[0].infos += [{"premise_kept": True, "premise_redraws": 0}, {}]
    episodes[1].infos += [{"premise_kept": False, "premise_redraws": 2}]
    assert _mean_info(episodes, "premise_kept") == 0.5 and _mean_info(episodes, "premise_redraws") == 1.0
    assert _mean_info(episodes[:0], "premise_kept") != _mean_info(episodes[:0], "premise_kept")  # NaN


def test_world_model_is_the_frozen_world_of_a_rehearsed_run(tiny_lm, tmp_path):
    """--world-model: SelfSimEnv imagines with that model (frozen), the policy starts from its own
    weights and is held near them; a resumed trainer loads the same world again."""
    from rehearsal_gym.core.model import LMConfig

    world = LM.new(
        tiny_lm.tokenizer, LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=7
    )
    world.save(tmp_path / "world")
    frozen = dict(TINY, rehearse="replace", rehearsal_world="frozen", train_env_role=False)
    config = PPOConfig.from_flat(**frozen, world_model=str(tmp_path / "world"))
    trainer = PPOTrainer(config, fresh(tiny_lm))
    env_lm = trainer.envs[0].lm
    assert all(env.lm is env_lm for env in trainer.envs)
    assert env_lm.model is not trainer.ref and env_lm.model is not trainer.lm.model
    for name, p in env_lm.model.named_parameters():
        assert torch.equal(p, world.model.state_dict()[name]) and not p.requires_grad
    trainer.train_iteration()
    assert trainer.history[-1]["iteration"] == 1
    for name, p in env_lm.model.named_parameters():  # the world stays as it was
        assert torch.equal(p, world.model.state_dict()[name])
    trainer.save(tmp_path / "ckpt")
    resumed = PPOTrainer.load(tmp_path / "ckpt")
    assert resumed.config.rehearsal.world_model == str(tmp_path / "world")
    for name, p in resumed.envs[0].lm.model.named_parameters():
        assert torch.equal(p, world.model.state_dict()[name])


def test_world_model_is_validated(tiny_lm, tmp_path):
    from rehearsal_gym.core.model import LMConfig
    from rehearsal_gym.core.tokenizer import train_tokenizer

    frozen = dict(rehearse="replace", rehearsal_world="frozen", train_env_role=False)
    with pytest.raises(ValueError, match="world_model.*not a model directory"):
        PPOConfig.from_flat(**frozen, world_model=str(tmp_path / "missing"))
    tiny_lm.save(tmp_path / "world")
    for other in (dict(), dict(rehearse="replace", train_env_role=False)):  # real env; EnvACE world
        with pytest.raises(ValueError, match="world_model.*rehearsal_world='frozen'"):
            PPOConfig.from_flat(**other, world_model=str(tmp_path / "world"))
    other_tokenizer = train_tokenizer(['CALL add {"a": 1}', "ANSWER 2"] * 50, vocab_size=300)
    LM.new(other_tokenizer, LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)).save(
        tmp_path / "alien"
    )
    with pytest.raises(ValueError, match="another tokenizer"):
        PPOTrainer(PPOConfig.from_flat(**TINY, **frozen, world_model=str(tmp_path / "alien")), fresh(tiny_lm))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_loss_stops_train_naming_the_iteration_and_keeps_the_checkpoint(
    tiny_lm, tmp_path, monkeypatch, bad
):
    import rehearsal_gym.agents.ppo as ppo
    from rehearsal_gym.agents.train import train

    trainers = []  # the trainer train() makes, to read its iteration
    real_init, real_loss = ppo.PPOTrainer.__init__, ppo.policy_loss

    def remember(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        trainers.append(self)

    def loss_that_breaks_in_the_second_round(*args, **kwargs):
        loss, clip_frac = real_loss(*args, **kwargs)
        return (loss + bad if trainers[-1].iteration == 1 else loss), clip_frac

    monkeypatch.setattr(ppo, "policy_loss", loss_that_breaks_in_the_second_round)
    monkeypatch.setattr(ppo.PPOTrainer, "__init__", remember)
    config = PPOConfig.from_flat(**{**TINY, "iterations": 3})
    with pytest.raises(
        NonFiniteLossError, match=r"PPO loss is (nan|inf) at iteration 1; the last checkpoint is kept"
    ):
        train(config, fresh(tiny_lm), tmp_path, eval_tasks=2, progress=False, log=lambda *a: None)
    state = json.loads((tmp_path / "checkpoint" / "trainer_state.json").read_text())
    assert state["iteration"] == 1 and len(state["history"]) == 1  # the first round's, complete
    assert not (tmp_path / "result.json").exists()
    assert PPOTrainer.load(tmp_path / "checkpoint").iteration == 1
