import copy
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rehearsal_gym.core.model import LM, LMConfig
from rehearsal_gym.rehearsal.demos import (
    agent_sequence,
    copy_drills,
    env_role_prompts,
    env_role_sequence,
    record_oracle_episodes,
    result_bank,
)
from rehearsal_gym.training.sft import collate, masked_lm_loss
from rehearsal_gym.training.warmstart import (
    WarmStartConfig,
    drill_accuracy,
    ground_world,
    main_phase_config,
    polish,
    polish_cached_main_phase,
    polish_tasks,
    train_warm_start,
    warm_start_path,
)


def test_masked_lm_loss_hand_computed():
    # vocab 2, uniform logits -> NLL log(2) at every position; mask selects targets 1 and 3.
    logits = torch.zeros(1, 4, 2)
    logits[0, 2] = torch.tensor([0.0, math.log(3.0)])  # predicts token at position 3: p(1) = 3/4
    ids = torch.tensor([[0, 1, 0, 1]])
    mask = torch.tensor([[0, 1, 0, 1]])
    expected = (math.log(2.0) + -math.log(0.75)) / 2
    assert masked_lm_loss(logits, ids, mask).item() == pytest.approx(expected, abs=1e-6)


def test_loss_ignores_unmasked_tokens():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 5)
    ids = torch.randint(0, 5, (2, 6))
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]])
    other = ids.clone()
    other[:, 4:] = (other[:, 4:] + 1) % 5  # change only unmasked targets
    other[1, 2:] = (other[1, 2:] + 1) % 5
    assert masked_lm_loss(logits, ids, mask).item() == pytest.approx(
        masked_lm_loss(logits, other, mask).item()
    )


def test_agent_mask_covers_exactly_the_agent_turns(tiny_lm):
    demo = record_oracle_episodes("Retail-v0", [0])[0]
    ids, mask = agent_sequence(tiny_lm, demo)
    agent_text = [t for role, t in demo.transcript if role == "agent"]
    masked = [i for i, m in zip(ids, mask, strict=True) if m]
    expected = [tok for t in agent_text for tok in tiny_lm.encode(t) + [tiny_lm.end_id]]
    assert masked == expected


def test_env_role_sequence_masks_the_real_result(tiny_lm):
    demos = record_oracle_episodes("Finance-v0", range(5))
    bank = result_bank(demos)
    prompt, result = env_role_prompts(demos[0], bank, np.random.default_rng(0))[0]
    assert prompt.startswith("Act as the tool") and "Call: CALL" in prompt
    ids, mask = env_role_sequence(tiny_lm, prompt, result)
    assert [i for i, m in zip(ids, mask, strict=True) if m] == tiny_lm.encode(result) + [tiny_lm.end_id]


def test_short_warm_start_lowers_loss(tiny_tokenizer):
    config = WarmStartConfig(
        tasks_per_env=8,
        steps=30,
        copy_drills=300,
        drill_steps=10,
        drill_batch_size=8,
        batch_size=4,
        lr=3e-3,
        warmup=5,
        polish_steps=0,
        model=LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64),
    )
    lm = LM.new(tiny_tokenizer, config.model, seed=0)
    before = [p.detach().clone() for p in lm.model.parameters()]
    lm, losses = train_warm_start(config, lm=lm, progress=False, log=lambda s: None)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"steps": 0}, "steps"),
        ({"lr": float("nan")}, "lr"),
        ({"envs": ()}, "envs"),
        ({"env_role_fraction": 1.5}, "env_role_fraction"),
        ({"copy_drills": 0}, "copy_drills"),
        ({"drill_steps": -1}, "drill_steps"),
        ({"polish_steps": -1}, "polish_steps"),
        ({"polish_lr": 0.0}, "polish_lr"),
        ({"polish_tasks_per_env": 0}, "polish_tasks_per_env"),
        ({"polish_env_role_fraction": -0.1}, "polish_env_role_fraction"),
        ({"polish_drill_every": -1}, "polish_drill_every"),
        ({"polish_drill_every": 1.5}, "polish_drill_every"),
        ({"polish_envs": ()}, "polish_envs"),
        ({"polish_envs": ["Retail-v0"]}, "polish_envs"),
        ({"polish_envs": ("Retail-v0", "Nope-v0")}, "polish_envs"),
        ({"envs": ("Retail-v0",), "polish_envs": ("Finance-v0",)}, "polish_envs"),
        ({"polish_env_tasks": (5, 5)}, "polish_env_tasks"),  # three envs
        ({"polish_env_tasks": [5, 5, 5]}, "polish_env_tasks"),
        ({"polish_env_tasks": (5, 0, 5)}, "polish_env_tasks"),
        ({"polish_envs": ("Retail-v0",), "polish_env_tasks": (5, 5)}, "polish_env_tasks"),
    ],
)
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        WarmStartConfig(**kwargs)


def test_config_key_changes_with_config():
    assert WarmStartConfig().key() == WarmStartConfig().key()
    assert WarmStartConfig(steps=5).key() != WarmStartConfig().key()
    assert WarmStartConfig(polish_steps=5).key() != WarmStartConfig().key()
    assert WarmStartConfig(polish_steps=0).key() != WarmStartConfig().key()


def test_config_key_without_polish_is_the_key_from_before_polish_existed():
    # the polish fields join the key only when polish is on, so caches of older configs stay valid
    no_polish = WarmStartConfig(polish_steps=0)
    assert WarmStartConfig(polish_steps=0, polish_lr=1e-3, polish_tasks_per_env=7).key() == no_polish.key()
    assert no_polish.key() == "906ff9c55b0e"  # the 8000-step warm start of the README's earlier tables


def test_config_key_without_polish_drills_is_the_key_from_before_they_existed():
    assert WarmStartConfig(polish_drill_every=0).key() == "4c40a984873c"  # the README's polished warm start
    assert WarmStartConfig(polish_drill_every=3).key() != WarmStartConfig(polish_drill_every=0).key()


def test_config_key_of_the_readme_weighted_polish_cli_command():
    # `rehearsal-gym warmstart --reuse-main-phase --polish-steps 6000 --polish-envs ToolCall-v0 Retail-v0
    # Finance-v0 --polish-env-tasks 200 6000 200` names this cache directory in the README
    cfg = WarmStartConfig(
        polish_steps=6000,
        polish_envs=("ToolCall-v0", "Retail-v0", "Finance-v0"),
        polish_env_tasks=(200, 6000, 200),
    )
    assert cfg.key() == "3f4337d899e5"


def test_config_key_without_polish_envs_is_the_key_from_before_they_existed():
    assert WarmStartConfig(polish_envs=None).key() == "4c40a984873c"
    assert WarmStartConfig(polish_envs=("Retail-v0", "Finance-v0")).key() != "4c40a984873c"


def test_polish_envs_restrict_the_polish_demos(tiny_lm):
    small = dict(tasks_per_env=2, batch_size=4, warmup=2, polish_steps=2, polish_tasks_per_env=3)

    def run(**kwargs):
        logs = []
        lm = LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)
        losses = polish(lm, WarmStartConfig(**small, **kwargs), progress=False, log=logs.append)
        return int(logs[0].split()[1]), losses

    retail_only = run(envs=("Retail-v0",))
    # the main phase saw both envs; the polish trains on Retail's fresh demos alone, the same batches
    assert run(envs=("Retail-v0", "Finance-v0"), polish_envs=("Retail-v0",)) == retail_only
    both, _ = run(envs=("Retail-v0", "Finance-v0"))
    assert both > retail_only[0]


def test_config_key_without_polish_env_tasks_is_the_key_from_before_they_existed():
    assert WarmStartConfig(polish_env_tasks=None).key() == "4c40a984873c"
    assert WarmStartConfig(polish_env_tasks=(3000, 3000, 3000)).key() != "4c40a984873c"


def test_polish_env_tasks_set_each_familys_share(tiny_lm):
    small = dict(tasks_per_env=2, batch_size=4, warmup=2, polish_steps=2, polish_tasks_per_env=3)
    envs = ("Retail-v0", "Finance-v0")
    assert polish_tasks(WarmStartConfig(**small, envs=envs)) == (3, 3)
    assert polish_tasks(WarmStartConfig(**small, envs=envs, polish_env_tasks=(4, 1))) == (4, 1)

    def run(**kwargs):
        logs = []
        lm = LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)
        losses = polish(lm, WarmStartConfig(**small, envs=envs, **kwargs), progress=False, log=logs.append)
        return int(logs[0].split()[1]), losses

    # tasks equal to polish_tasks_per_env: the polish of the plain config, batch for batch
    assert run(polish_env_tasks=(3, 3)) == run()
    assert run(polish_env_tasks=(3, 1))[0] < run()[0]


def test_polish_of_the_cached_main_phase_gives_the_weights_of_a_full_run():
    config = WarmStartConfig(
        tasks_per_env=3,
        steps=6,
        copy_drills=30,
        drill_steps=2,
        drill_batch_size=4,
        batch_size=4,
        warmup=2,
        polish_steps=5,
        polish_tasks_per_env=3,
        polish_lr=3e-3,
        model=LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64),
    )
    full, full_losses = train_warm_start(config, progress=False, log=lambda s: None)
    assert not (warm_start_path(main_phase_config(config)) / "config.json").exists()
    for _ in range(2):  # trains and caches the main phase, then loads it from the cache
        lm, losses = polish_cached_main_phase(config, progress=False, log=lambda s: None)
        assert (warm_start_path(main_phase_config(config)) / "losses.json").is_file()
        assert losses == pytest.approx(full_losses, rel=1e-5)
        for a, b in zip(full.model.parameters(), lm.model.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert not lm.model.training
    with pytest.raises(ValueError, match="polish_steps"):
        polish_cached_main_phase(main_phase_config(config), progress=False)


def test_polish_drills_interleave_copy_drills(tiny_lm):
    lm = LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)
    small = dict(tasks_per_env=2, copy_drills=30, drill_batch_size=4, batch_size=4, warmup=2)
    small.update(polish_steps=6, polish_tasks_per_env=3, envs=("Retail-v0",))
    logs = []
    losses = polish(lm, WarmStartConfig(**small, polish_drill_every=2), progress=False, log=logs.append)
    assert len(losses) == 6 and all(np.isfinite(losses))
    assert "and 30 copy drills" in logs[0]
    # drill steps (0, 2, 4) train on short drills: their batches differ from the demo steps'
    plain = polish(
        LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer), WarmStartConfig(**small), False, logs.append
    )
    assert "and 0 copy drills" in logs[1]
    assert losses[0] != plain[0] and losses[1] != plain[1]


def test_polish_trains_both_roles_on_unseen_tasks(tiny_tokenizer):
    config = WarmStartConfig(
        tasks_per_env=4,
        steps=4,
        copy_drills=30,
        drill_steps=2,
        drill_batch_size=4,
        batch_size=4,
        warmup=2,
        polish_steps=12,
        polish_tasks_per_env=6,
        polish_lr=3e-3,
        model=LMConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64),
    )
    lm = LM.new(tiny_tokenizer, config.model, seed=0)
    logs = []
    lm, losses = train_warm_start(config, lm=lm, progress=False, log=logs.append)
    assert len(losses) == config.drill_steps + config.steps + config.polish_steps
    assert all(np.isfinite(losses))
    line = next(line for line in logs if line.startswith("polish: "))
    assert int(line.split()[1]) > 18  # 18 fresh demos as agent, plus environment-role sequences
    assert not lm.model.training


def test_copy_drills_repeat_their_items(tiny_lm):
    demos = record_oracle_episodes("Retail-v0", range(5))
    kinds = set()
    for ids, mask in copy_drills(tiny_lm, demos, 20, np.random.default_rng(0)):
        text = tiny_lm.tokenizer.decode(ids, skip_special_tokens=True)
        target = tiny_lm.decode([i for i, m in zip(ids, mask, strict=True) if m])
        assert target
        if "Repeat: " in text:
            kinds.add("repeat")
            assert text.split("Repeat: ", 1)[1].startswith(target.replace(" ", ", "))
        else:
            kinds.add("lookup")
            obj = json.loads(text.split("Value of")[0])
            key = text.split("Value of ", 1)[1].split("?")[0]
            assert obj[key] == target
    assert kinds == {"repeat", "lookup"}


@pytest.mark.parametrize("kind", ["repeat", "lookup"])
def test_copy_drills_of_one_kind(tiny_lm, kind):
    demos = record_oracle_episodes("Retail-v0", range(5))
    texts = [
        tiny_lm.tokenizer.decode(ids, skip_special_tokens=True)
        for ids, _ in copy_drills(tiny_lm, demos, 10, np.random.default_rng(0), kinds=(kind,))
    ]
    assert len(texts) == 10 and all(("Value of" in t) == (kind == "lookup") for t in texts)
    with pytest.raises(ValueError, match="kinds"):
        copy_drills(tiny_lm, demos, 2, np.random.default_rng(0), kinds=("spell",))


def test_drill_accuracy_counts_exactly_solved_drills(tiny_lm, shifted_oracle):
    demos = record_oracle_episodes("Retail-v0", range(5))
    drills = copy_drills(tiny_lm, demos, 6, np.random.default_rng(0))
    perfect = SimpleNamespace(model=shifted_oracle(1))  # drill_accuracy needs only .model
    assert drill_accuracy(perfect, drills) == 1.0
    stuck = SimpleNamespace(model=shifted_oracle(0))  # predicts the token it sees: never the answer
    assert drill_accuracy(stuck, drills) == 0.0
    with pytest.raises(ValueError, match="at least one"):
        drill_accuracy(perfect, [])


@pytest.mark.slow
def test_default_warm_start_reaches_held_out_threshold(tmp_path, monkeypatch):
    """Retraining the default config gets no family more than 10 points below the shipped model's
    manifest (trainings on other machines and library versions differ, by more than that on some
    families). Opt in with -m slow (about an hour on 2 CPU cores)."""
    from rehearsal_gym.core.rollout import evaluate
    from rehearsal_gym.defaults import SHIPPED_DEFAULT

    monkeypatch.setenv("REHEARSAL_GYM_HOME", str(tmp_path))
    manifest = json.loads((SHIPPED_DEFAULT / "manifest.json").read_text())
    assert manifest["warmstart_key"] == WarmStartConfig().key()  # the shipped model is this config's
    lm, _ = train_warm_start(WarmStartConfig(), progress=False, log=lambda s: None)
    for env_id, figure in manifest["held_out"].items():
        assert evaluate(lm, env_id, figure["tasks"])["success"] >= figure["success"] - 0.1, env_id
    # the environment role writes usable results
    from rehearsal_gym.core.rollout import run_episodes
    from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

    envs = [SelfSimEnv("Finance-v0", model=lm, split="train", temperature=0.7) for _ in range(32)]
    episodes = run_episodes(lm, envs, [{"task_index": i} for i in range(32)], seed=0)
    infos = [info for ep in episodes for info in ep.infos if "call" in info]
    unusable = [info for info in infos if "environment role" in str(info.get("error", ""))]
    assert len(unusable) < 0.2 * len(infos)


def test_build_examples_draws_drills_first_so_cached_configs_keep_their_data(tiny_lm):
    # a cached warm start is found by its config's key: the same config must build the same data
    from rehearsal_gym.training.warmstart import build_examples

    config = WarmStartConfig(envs=("Retail-v0",), tasks_per_env=6, copy_drills=10)
    _, drills = build_examples(tiny_lm, config)
    demos = record_oracle_episodes("Retail-v0", range(6))
    assert drills == copy_drills(tiny_lm, demos, 10, np.random.default_rng(config.seed))


def test_ground_world_fits_the_environment_role_to_real_results(tiny_lm):
    """ground_world trains next-result prediction alone: one sequence per oracle call, and the
    environment-role loss on those real results falls."""
    lm = copy.deepcopy(tiny_lm)
    tasks = range(100, 108)
    demos = record_oracle_episodes("ToolCall-v0", tasks)
    bank, rng = result_bank(demos), np.random.default_rng(0)
    held = [env_role_sequence(lm, p, r) for d in demos for p, r in env_role_prompts(d, bank, rng, k=2)]

    def env_role_loss() -> float:
        with torch.no_grad():
            ids, attn, mask = collate(held, range(len(held)), lm.pad_id)
            return masked_lm_loss(lm.model(input_ids=ids, attention_mask=attn).logits, ids, mask).item()

    before, logs = env_role_loss(), []
    losses = ground_world(
        lm, ["ToolCall-v0"], tasks, 40, lr=3e-3, batch_size=4, progress=False, log=logs.append
    )
    assert len(losses) == 40 and all(np.isfinite(losses))
    assert logs == [
        f"ground world: {sum(len(d.call_turns) for d in demos)} environment-role sequences of real results"
    ]
    assert env_role_loss() < before - 0.5
    assert not lm.model.training


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(env_ids=[]), "at least one env"),
        (dict(steps=0), "steps"),
        (dict(batch_size=0), "batch_size"),
        (dict(lr=float("nan")), "lr"),
        (dict(tasks=range(5, 5)), "at least one task"),
    ],
)
def test_ground_world_rejects_bad_arguments(tiny_lm, kwargs, match):
    args = dict(env_ids=["ToolCall-v0"], tasks=range(0, 2), steps=1) | kwargs
    with pytest.raises(ValueError, match=match):
        ground_world(tiny_lm, progress=False, **args)


def test_ground_world_never_cuts_an_overlong_sequence(tiny_tokenizer):
    short = LM.new(
        tiny_tokenizer, LMConfig(hidden_size=8, num_layers=1, num_heads=1, intermediate_size=8, max_len=200)
    )
    with pytest.raises(ValueError, match="exceed the context of 200 tokens"):
        ground_world(short, ["Retail-v0"], range(6), 1, progress=False, log=lambda _: None)
    logs = []
    losses = ground_world(
        short, ["Retail-v0"], range(6), 1, progress=False, log=logs.append, skip_overlong=True
    )
    assert len(losses) == 1 and "exceed the context; left out" in logs[0]
    left_out, total = (int(w) for w in logs[0].split()[2:5:2])
    assert 0 < left_out < total
