"""Models nobody here wrote: tiny random GPT-2, Qwen2 and Llama checkpoints with tokenizers made
locally (no role tokens of ours; one with a chat template), loaded by path like a Hub download."""

import copy

import gymnasium as gym
import pytest
import torch
from conftest import local_tokenizer
from rehearsal_gym.agents import PPOConfig, PPOTrainer
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import run_episodes
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tokenizer(chat: bool):
    return local_tokenizer(
        [
            'CALL add {"a": 1, "b": 2}',
            "ANSWER 3",
            "Tools: add(a: number, b: number) - a + b",
            "Request: what is 2 plus 2?",
        ],
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] if chat else ["<|endoftext|>"],
        eos="<|endoftext|>",
        template=CHAT_TEMPLATE if chat else None,
    )


def _model(arch: str, vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if arch == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=2048))
    if arch == "qwen2":
        return Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=vocab,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                max_position_embeddings=2048,
            )
        )
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=2048,
        )
    )


@pytest.fixture(
    scope="module", params=[("gpt2", False), ("qwen2", True), ("llama", False)], ids=lambda p: p[0]
)
def foreign_dir(request, tmp_path_factory):
    arch, chat = request.param
    tokenizer = _tokenizer(chat)
    path = tmp_path_factory.mktemp(arch)
    _model(arch, len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_a_foreign_model_loads_acts_imagines_trains_and_round_trips(foreign_dir, tmp_path):
    lm = LM.load(foreign_dir)
    chat = foreign_dir.name.startswith("qwen2")  # the one with a chat template speaks it
    assert lm.codec.kind == ("chat" if chat else "roles") and bool(lm.role_ids) != chat
    assert all(i < lm.model.get_input_embeddings().num_embeddings for i in lm.role_ids.values())
    envs = [
        gym.make(env_id, split="test", max_turns=2) for env_id in ("ToolCall-v0", "Retail-v0", "Finance-v0")
    ]
    eps = run_episodes(lm, envs, [{"task_index": 0}] * 3, max_turn_tokens=12, seed=0)
    assert all(len(ep.ids) == len(ep.agent_mask) and ep.actions for ep in eps)
    sim = SelfSimEnv("ToolCall-v0", model=lm, mode="replace", max_result_tokens=8, bank_tasks=3)
    sim.reset(seed=0)
    _, _, _, _, info = sim.step('CALL add {"a": 1, "b": 2}')
    assert info["imagined"] and len(info["env_role"].ids) >= 1
    trainer = PPOTrainer(
        PPOConfig.from_flat(
            iterations=1, tasks_per_iter=2, group_size=2, max_turns=2, epochs=1, minibatch_size=4
        ),
        lm.with_model(copy.deepcopy(lm.model)),
    )
    assert trainer.train_iteration()["losses/update_fraction"] == 1.0
    lm.save(tmp_path / "saved")
    again = LM.load(tmp_path / "saved")
    ids = torch.tensor([lm.turn("task", "Request: add 1 and 2")])
    assert torch.equal(lm.model(input_ids=ids).logits, again.model(input_ids=ids).logits)
    assert again.role_ids == lm.role_ids and again.codec.kind == lm.codec.kind


def test_bfloat16_on_cpu_samples_and_scores_in_float32(foreign_dir):
    lm = LM.load(foreign_dir, dtype="bfloat16", device="cpu")
    assert next(lm.model.parameters()).dtype == torch.bfloat16 and lm.device == torch.device("cpu")
    eps = run_episodes(
        lm, [gym.make("ToolCall-v0", max_turns=1)], [{"task_index": 0}], max_turn_tokens=8, seed=0
    )
    assert eps[0].logprobs and all(isinstance(x, float) for x in eps[0].logprobs)
    config = PPOConfig.from_flat(
        iterations=1,
        tasks_per_iter=2,
        group_size=2,
        max_turns=2,
        epochs=1,
        minibatch_size=4,
        advantage="gae",
        gradient_checkpointing=True,
    )
    row = PPOTrainer(config, lm).train_iteration()
    assert row["losses/update_fraction"] == 1.0 and next(lm.model.parameters()).dtype == torch.bfloat16
    assert getattr(lm.model, "is_activation_checkpointing", None) or lm.model.is_gradient_checkpointing


def test_a_hub_id_that_cannot_be_reached_says_so(monkeypatch, tmp_path):
    import huggingface_hub.constants

    # read once at import: patched here, else the test waits out the network's retries (about 45 s)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    with pytest.raises(OSError, match="Hugging Face Hub") as err:
        LM.load("someone/no-such-model-here")
    assert "no config.json" not in str(err.value)
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        LM.load(tmp_path)  # an existing directory without a model
    with pytest.raises(ValueError, match="dtype"):
        LM.load(tmp_path, dtype="float8")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            LM.load(tmp_path, device="cuda")


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    tokenizer = _tokenizer(chat=False)
    path = tmp_path_factory.mktemp("gpt2-cli")
    _model("gpt2", len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_selfsim_and_the_cli_take_a_model_path_device_and_dtype(gpt2_dir, tmp_path):
    foreign_dir = gpt2_dir
    import subprocess
    import sys

    env = gym.make(
        "SelfSim-v0",
        base="ToolCall-v0",
        model=str(foreign_dir),
        device="cpu",
        dtype="bfloat16",
        max_result_tokens=8,
        bank_tasks=2,
    )
    assert next(env.unwrapped.lm.model.parameters()).dtype == torch.bfloat16
    env.reset(seed=0)
    assert env.step('CALL add {"a": 1, "b": 2}')[4]["imagined"]
    cmd = [
        sys.executable,
        "-m",
        "rehearsal_gym.cli",
        "eval",
        "--model",
        str(foreign_dir),
        "--device",
        "cpu",
        "--dtype",
        "bfloat16",
        "--envs",
        "ToolCall-v0",
        "--tasks",
        "2",
        "--out",
        str(tmp_path),
        "--quiet",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "ToolCall-v0" in out.stdout, out.stderr[-2000:]
    out = subprocess.run(cmd[:6] + ["--device", "tpu9"], capture_output=True, text=True, timeout=600)
    assert out.returncode != 0 and "device must be" in out.stderr
