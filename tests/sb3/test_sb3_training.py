import copy
import functools

import pytest
import torch
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from rehearsal_gym.adapters.sb3 import LMPolicy, MaskableLMPolicy, evaluate_success
from rehearsal_gym.adapters.token_env import TokenEnv
from rehearsal_gym.core.model import LM
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

SMALL = dict(n_steps=64, batch_size=32, n_epochs=1, learning_rate=1e-4, seed=0)


def fresh(tiny_lm):
    return LM(copy.deepcopy(tiny_lm.model), tiny_lm.tokenizer)


def make_token_env(env_id, lm, rehearse=False):
    env = (
        SelfSimEnv(env_id, model=lm, mode="replace", max_result_tokens=24, bank_tasks=8)
        if rehearse
        else env_id
    )
    return TokenEnv(env, lm, window=512, max_turn_tokens=32)


def test_ppo_trains_the_lm_itself_on_a_real_env(tiny_lm):
    lm = fresh(tiny_lm)
    before = [p.detach().clone() for p in lm.model.parameters()]
    venv = DummyVecEnv([functools.partial(make_token_env, "ToolCall-v0", lm)] * 2)
    model = PPO(LMPolicy, venv, policy_kwargs={"lm": lm}, **SMALL)
    assert model.policy.features_extractor.model is lm.model
    assert model.policy.action_net.head is lm.model.get_output_embeddings()
    model.learn(256)
    assert model.num_timesteps >= 256
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True))


def test_maskable_ppo_on_selfsim_then_evaluated_on_the_real_env(tiny_lm):
    lm = fresh(tiny_lm)
    venv = DummyVecEnv([functools.partial(make_token_env, "Retail-v0", lm, True)] * 2)
    before = [p.detach().clone() for p in lm.model.parameters()]
    model = MaskablePPO(MaskableLMPolicy, venv, policy_kwargs={"lm": lm}, **SMALL)
    model.learn(256)
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True))
    rate = evaluate_success(model, "Retail-v0", 2, tokenizer=lm, max_turn_tokens=32)
    assert rate in (0.0, 0.5, 1.0)  # two real episodes, each a success or not


def test_recurrent_ppo_on_the_token_wrapper(tiny_lm):
    venv = DummyVecEnv([functools.partial(make_token_env, "Finance-v0", tiny_lm)])
    model = RecurrentPPO(
        "MultiInputLstmPolicy", venv, policy_kwargs={"lstm_hidden_size": 16, "net_arch": [16]}, **SMALL
    )
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(128)
    assert model.num_timesteps >= 128
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))


def test_subproc_vec_env(tiny_lm, tmp_path):
    tiny_lm.save(tmp_path / "lm")
    factory = functools.partial(_token_env_from_dir, str(tmp_path / "lm"))
    venv = SubprocVecEnv([factory] * 2)
    try:
        lm = fresh(tiny_lm)
        before = [p.detach().clone() for p in lm.model.parameters()]
        model = MaskablePPO(MaskableLMPolicy, venv, policy_kwargs={"lm": lm}, **SMALL)
        model.learn(64)
        assert model.num_timesteps >= 64  # steps came back from both worker processes
        assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True))
    finally:
        venv.close()


def _token_env_from_dir(path):
    return TokenEnv("ToolCall-v0", LM.load(path), window=512, max_turn_tokens=32)


@pytest.mark.parametrize("algo, policy", [(PPO, LMPolicy), (MaskablePPO, MaskableLMPolicy)])
def test_save_load_round_trips(tiny_lm, tmp_path, algo, policy):
    lm = fresh(tiny_lm)
    env = make_token_env("ToolCall-v0", lm)
    model = algo(policy, env, policy_kwargs={"lm": lm}, **SMALL)
    model.learn(64)
    model.save(tmp_path / "model.zip")
    loaded = algo.load(tmp_path / "model.zip")
    for name, tensor in model.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[name], tensor)
    obs, _ = env.reset(seed=3)
    obs_t = model.policy.obs_to_tensor(obs)[0]
    with torch.no_grad():
        a = model.policy.get_distribution(obs_t).distribution.logits
        b = loaded.policy.get_distribution(loaded.policy.obs_to_tensor(obs)[0]).distribution.logits
    torch.testing.assert_close(a, b)
    loaded.policy.lm.save(tmp_path / "hf")  # the trained policy is a Hugging Face model directory
    assert (tmp_path / "hf" / "config.json").is_file()


def test_policy_refuses_settings_that_would_break_the_lm(tiny_lm):
    env = make_token_env("ToolCall-v0", tiny_lm)
    with pytest.raises(ValueError, match="ortho_init"):
        PPO(LMPolicy, env, policy_kwargs={"lm": tiny_lm, "ortho_init": True})
    with pytest.raises(ValueError, match="net_arch"):
        PPO(LMPolicy, env, policy_kwargs={"lm": tiny_lm, "net_arch": [64]})
