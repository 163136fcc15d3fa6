import json

import gymnasium as gym
import pytest
import safetensors.torch
import torch
from conftest import ScriptedModel
from gymnasium.utils.env_checker import check_env
from rehearsal_gym.envs.base import state_hash

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.rehearsal.imagined import fidelity, result_error
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv


def scripted_lm(tiny_lm, texts):
    """As the `scripted` fixture, for tests that build several."""
    return LM(ScriptedModel(tiny_lm, texts), tiny_lm.tokenizer)


@pytest.mark.parametrize("mode", ["replace", "wrap", "mixed"])
@pytest.mark.parametrize("base", ["ToolCall-v0", "Retail-v0"])
def test_check_env_every_mode(tiny_lm, base, mode):
    env = gym.make("SelfSim-v0", base=base, model=tiny_lm, mode=mode, max_result_tokens=16, bank_tasks=5)
    check_env(env.unwrapped)


def test_replace_mode_never_touches_the_backend(tiny_lm):
    env = SelfSimEnv("Retail-v0", model=scripted_lm(tiny_lm, ["{}"]), mode="replace", bank_tasks=20)
    for i in range(50):
        env.reset(options={"task_index": i})
        if env.unwrapped.task.template == "cancel" and env.unwrapped.task.answer_kind == "any":
            break
    turns = env.oracle_turns()
    real_first = json.loads(json.dumps(env.family.replay(env.task, [])))
    get_order_result = _real_result(env, turns[0])
    cancel_result = _real_result(env, turns[1])
    env.lm = scripted_lm(tiny_lm, [json.dumps(get_order_result), json.dumps(cancel_result)])
    env.reset(options={"task_index": i})
    before = state_hash(env.backend.state())
    rewards = [env.step(t)[1] for t in turns]
    assert state_hash(env.backend.state()) == before == state_hash(real_first)
    assert rewards[-1] == 1.0  # scored by replaying the calls, like the real env


def _real_result(env, turn):
    from rehearsal_gym.core.protocol import parse_turn

    backend = env.family.make_backend(env.task)
    try:
        return backend.call(parse_turn(turn, env.tools))
    finally:
        backend.close()


def test_wrap_mode_reports_both_results_and_fidelity(tiny_lm):
    env = SelfSimEnv("ToolCall-v0", model=scripted_lm(tiny_lm, ['{"result": 4}']), mode="wrap", bank_tasks=20)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('CALL add {"a": 1, "b": 2}')
    assert json.loads(obs) == {"result": 4} and info["imagined"]
    assert info["real_result"] == {"result": 3}
    assert info["fidelity"] == {"exact": 0.0, "field_accuracy": 0.0, "hallucinated_fields": 0.0}
    assert list(info["env_role"].ids) == tiny_lm.encode('{"result": 4}') + [tiny_lm.end_id]


def test_mixed_mode_follows_p_real(tiny_lm):
    for p_real, imagined in ((1.0, False), (0.0, True)):
        env = SelfSimEnv(
            "ToolCall-v0", model=scripted_lm(tiny_lm, ['{"result": 4}']), mode="mixed", p_real=p_real
        )
        env.reset(seed=0)
        info = env.step('CALL add {"a": 1, "b": 2}')[-1]
        assert info["imagined"] is imagined


@pytest.mark.parametrize(
    "text, why",
    [("not json", "invalid JSON"), ("[1, 2]", "not an object"), ('{"weekday": 3}', "real results have")],
)
def test_garbage_environment_role_ends_episode_with_zero(tiny_lm, text, why):
    env = SelfSimEnv("ToolCall-v0", model=scripted_lm(tiny_lm, [text]), bank_tasks=20)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('CALL add {"a": 1, "b": 2}')
    assert terminated and reward == 0.0 and why in info["error"] and obs.startswith("error:")
    assert info["success"] is False


def test_untrained_model_never_crashes_and_is_reproducible(tiny_lm):
    def run(seed):
        env = SelfSimEnv("Finance-v0", model=tiny_lm, max_result_tokens=24, bank_tasks=5)
        env.reset(seed=seed)
        return env.step('CALL get_account {"account_id": "A1"}')[-1]["env_role"].ids

    assert run(3) == run(3)
    assert len({run(s) for s in range(4)}) > 1  # the seed decides: other seeds, other samples


def test_world_seed_fixes_the_imagined_world(tiny_lm):
    def imagined(world_seed, reset_seed, call='CALL get_account {"account_id": "A1"}'):
        env = SelfSimEnv("Finance-v0", model=tiny_lm, max_result_tokens=24, bank_tasks=5)
        opts = {"task_index": 3} if world_seed is None else {"task_index": 3, "world_seed": world_seed}
        env.reset(seed=reset_seed, options=opts)
        return tuple(env.step(call)[4]["env_role"].ids)  # the sampled result (untrained: noise)

    # the same world seed answers the same call alike, whatever the env's own seed
    assert imagined(7, reset_seed=1) == imagined(7, reset_seed=2)
    worlds = {imagined(w, reset_seed=1) for w in range(6)}
    assert len(worlds) > 1  # other world seeds, other worlds
    assert len({imagined(None, reset_seed=s) for s in range(6)}) > 1  # without one: the env's seed decides


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_world_seed_is_a_clear_error(tiny_lm, bad):
    env = SelfSimEnv("ToolCall-v0", model=tiny_lm, bank_tasks=3)
    with pytest.raises(ValueError, match="world_seed"):
        env.reset(options={"world_seed": bad})


def test_uncertainty_reported_with_several_samples(tiny_lm):
    def uncertainty(lm):
        env = SelfSimEnv("ToolCall-v0", model=lm, n_samples=3, max_result_tokens=8, bank_tasks=5)
        env.reset(seed=0)
        return env.step('CALL add {"a": 1, "b": 2}')[-1]["uncertainty"]

    assert uncertainty(scripted_lm(tiny_lm, ['{"result": 3}'])) == 0.0  # three identical samples
    assert uncertainty(tiny_lm) == 1.0  # untrained: 8 random tokens, never the same twice


def test_an_unfinished_environment_role_result_ends_the_episode_with_zero(tiny_lm):
    env = SelfSimEnv("ToolCall-v0", model=scripted_lm(tiny_lm, ['{"result": 12345}']), max_result_tokens=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('CALL add {"a": 1, "b": 2}')
    assert terminated and reward == 0.0 and info["success"] is False
    assert "did not finish its result within 2 tokens" in info["error"] and obs.startswith("error:")
    assert len(info["env_role"].ids) == 2  # what was sampled is still recorded for training


def test_infos_are_picklable_in_every_mode(tiny_lm):
    import pickle

    for mode in ("replace", "wrap", "mixed"):
        env = SelfSimEnv("ToolCall-v0", model=scripted_lm(tiny_lm, ['{"result": 3}']), mode=mode, p_real=0.5)
        env.reset(seed=0)
        for action in ('CALL add {"a": 1, "b": 2}', "CALL nope {}", "ANSWER 3"):
            info = env.step(action)[-1]
            assert pickle.loads(pickle.dumps(info)) == info


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"mode": "dream"}, "mode"),
        ({"p_real": 2.0}, "p_real"),
        ({"n_samples": 0}, "n_samples"),
        ({"base": "CartPole-v1"}, "base"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_bad_config_names_the_field(tiny_lm, kwargs, field):
    with pytest.raises(ValueError, match=field):
        SelfSimEnv(**{"model": tiny_lm, **kwargs})


def test_result_error_and_fidelity():
    shapes = {frozenset({"result"})}
    assert result_error('{"result": 1}', shapes) == ({"result": 1}, None)
    assert result_error('{"error": "no such order"}', shapes) == ({"error": "no such order"}, None)
    assert fidelity({"a": 1, "b": 2, "x": 0}, {"a": 1, "b": 3}) == {
        "exact": 0.0,
        "field_accuracy": 0.5,
        "hallucinated_fields": pytest.approx(1 / 3),
    }


def test_make_with_no_arguments_uses_the_shipped_default_silently(monkeypatch, tmp_path):
    import warnings

    from rehearsal_gym.defaults import SHIPPED_DEFAULT

    monkeypatch.setenv("REHEARSAL_GYM_HOME", str(tmp_path))  # an empty cache
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gym.make("SelfSim-v0", max_result_tokens=8, bank_tasks=3)
    lm = env.unwrapped.lm
    shipped = safetensors.torch.load_file(SHIPPED_DEFAULT / "model.safetensors")
    assert all(torch.equal(lm.model.state_dict()[k], v) for k, v in shipped.items())
    assert list(tmp_path.iterdir()) == []  # nothing trained or cached
    obs, info = env.reset(seed=0)
    assert obs.startswith("Tools:")


def test_vector_env_batches_environment_role(tiny_lm):
    lm = scripted_lm(tiny_lm, ['{"result": 3}'])
    envs = gym.make_vec("SelfSim-v0", num_envs=3, base="ToolCall-v0", model=lm, bank_tasks=10)
    obs, info = envs.reset(seed=0)
    assert len(obs) == 3 and all(o.startswith("Tools:") for o in obs)
    actions = ('CALL add {"a": 1, "b": 2}', "nonsense", 'CALL add {"a": 1, "b": 2}')
    obs, rewards, terminated, truncated, info = envs.step(actions)
    assert lm.model.calls == 1  # one batched generation served both calls
    assert json.loads(obs[0]) == json.loads(obs[2]) == {"result": 3}
    assert (
        obs[1].startswith("error:")
        and info["imagined"][0]
        and info["_imagined"].tolist() == [True, False, True]
    )
    obs, rewards, terminated, truncated, info = envs.step(("ANSWER 3",) * 3)
    assert terminated.all()
    obs, *_ = envs.step(("ANSWER 3",) * 3)  # next-step autoreset
    assert all(o.startswith("Tools:") for o in obs)
    envs.close()


def test_vector_env_is_reproducible(tiny_lm):
    def run():
        envs = gym.make_vec(
            "SelfSim-v0", num_envs=2, base="Finance-v0", model=tiny_lm, max_result_tokens=16, bank_tasks=5
        )
        envs.reset(seed=5)
        return envs.step(('CALL get_account {"account_id": "A1"}',) * 2)[0]

    assert run() == run()


@pytest.mark.parametrize("n_samples", [1, 2])
def test_batched_imagination_equals_unbatched(tiny_lm, scripted, monkeypatch, n_samples):
    """run_episodes batches the environment role of every episode in a turn into one call; the
    episodes are those of stepping each env alone, under the same seed (a scripted agent calls a
    tool, the untrained tiny model imagines the results)."""
    from rehearsal_gym.core import rollout

    def run(batched: bool, calls: list[int]):
        envs = [
            SelfSimEnv(
                "Finance-v0",
                model=tiny_lm,
                max_result_tokens=12,
                bank_tasks=5,
                n_samples=n_samples,
                max_turns=3,
            )
            for _ in range(6)
        ]
        real_sample = SelfSimEnv.sample_role
        monkeypatch.setattr(
            SelfSimEnv,
            "sample_role",
            lambda self, plans: calls.append(len(plans)) or real_sample(self, plans),
        )
        if not batched:
            monkeypatch.setattr(rollout, "prepare_steps", lambda envs, actions: None)
        agent = scripted(['CALL get_account {"account_id": "A1"}'])
        eps = run_episodes(
            agent, envs, [{"task_index": i % 3} for i in range(6)], greedy=False, max_turn_tokens=24, seed=3
        )
        monkeypatch.undo()
        return eps

    batched_calls, single_calls = [], []
    batched, single = run(True, batched_calls), run(False, single_calls)
    assert max(single_calls) == 1 and max(batched_calls) > 1  # one call served several episodes
    assert sum(batched_calls) == sum(single_calls) and len(batched_calls) < len(single_calls)
    imagined = 0
    for a, b in zip(batched, single, strict=True):
        assert a.ids == b.ids and a.actions == b.actions and a.reward == b.reward
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
        for x, y in zip(a.imagined, b.imagined, strict=True):
            assert x.prompt_ids == y.prompt_ids and x.ids == y.ids
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)
            imagined += 1
    assert imagined >= 6


def test_vector_env_steps_as_separate_envs(tiny_lm):
    kwargs = dict(base="Finance-v0", model=tiny_lm, max_result_tokens=16, bank_tasks=5)
    vec = gym.make_vec("SelfSim-v0", num_envs=3, **kwargs)
    singles = [gym.make("SelfSim-v0", **kwargs) for _ in range(3)]
    vec.reset(seed=5)
    for i, env in enumerate(singles):
        env.reset(seed=5 + i)
    action = 'CALL get_account {"account_id": "A1"}'
    obs = vec.step((action,) * 3)[0]
    assert list(obs) == [env.step(action)[0] for env in singles]


def test_record_and_replay_cache(tiny_lm, tmp_path):
    from rehearsal_gym.rehearsal.imagined import ImaginationCache

    cache = ImaginationCache()
    env = SelfSimEnv("ToolCall-v0", model=tiny_lm, max_result_tokens=12, bank_tasks=5, cache=cache)
    env.reset(seed=4)
    first = env.step('CALL add {"a": 1, "b": 2}')[-1]["env_role"].ids
    assert len(cache) == 1
    cache.save(tmp_path / "imagined.jsonl")
    replay = ImaginationCache(tmp_path / "imagined.jsonl")
    other = LM.new(tiny_lm.tokenizer, seed=1)  # different weights: the replay must not sample
    env = SelfSimEnv("ToolCall-v0", model=other, max_result_tokens=12, bank_tasks=5, cache=replay)
    env.reset(seed=4)
    assert env.step('CALL add {"a": 1, "b": 2}')[-1]["env_role"].ids == first and replay.hits == 1
    assert len(env.bank) == len(SelfSimEnv("ToolCall-v0", model=tiny_lm, bank_tasks=5).bank)


def test_branched_rehearsal(tiny_lm):
    from rehearsal_gym.rehearsal.branching import BranchedRehearsalEnv

    texts = ['{"weekday": "Monday"}'] * 10
    env = BranchedRehearsalEnv(
        "ToolCall-v0", model=scripted_lm(tiny_lm, texts), k=1, horizon=2, real_ratio=0.0
    )
    check_env(BranchedRehearsalEnv("ToolCall-v0", model=tiny_lm, max_result_tokens=8, bank_tasks=3))
    env.reset(seed=0)
    first = env.step('CALL weekday {"date": "2024-01-01"}')
    assert not first[-1]["imagined"] and json.loads(first[0]) == {"weekday": "Monday"}  # real
    second = env.step('CALL weekday {"date": "2024-01-02"}')
    assert second[-1]["imagined"] and not second[3]  # imagined, within the horizon
    third = env.step('CALL weekday {"date": "2024-01-03"}')
    assert third[-1]["imagined"] and third[3]  # truncated after `horizon` imagined steps
    real_only = BranchedRehearsalEnv("ToolCall-v0", model=tiny_lm, real_ratio=1.0, bank_tasks=3)
    real_only.reset(seed=0)
    steps = [real_only.step('CALL add {"a": 1, "b": 1}') for _ in range(3)]
    assert [json.loads(s[0]) for s in steps] == [{"result": 2}] * 3  # the real tool's answer each time
    assert all(not s[-1]["imagined"] for s in steps)


def test_measure_fidelity_rows_per_family_and_template(tiny_lm):
    from rehearsal_gym.rehearsal.fidelity import measure_fidelity

    rows = measure_fidelity(tiny_lm, "ToolCall-v0", 6, batch_size=3, temperature=0.5, by_template=True)
    family, templates = rows[0], rows[1:]
    assert family["template"] == "all" and family["tasks"] == 6 and family["world temperature"] == "0.5"
    assert templates and sum(r["tasks"] for r in templates) == 6
    for row in rows:
        for key in ("invalid results", "episodes ended by the world", "exact match", "success in real env"):
            assert 0.0 <= row[key] <= 1.0
        gap = row["success in rehearsal, consistent verifier"] - row["success in real env"]
        assert row["rehearsal gap"] == pytest.approx(gap)
    assert measure_fidelity(tiny_lm, "ToolCall-v0", 3, batch_size=3)[0]["template"] == "all"
