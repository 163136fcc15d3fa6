"""LoRA through peft: only the adapters train, the reference is the base with the adapter disabled
(no second copy), and a LoRA model saves, loads and resumes."""

import copy

import pytest
import torch
from rehearsal_gym.agents import PPOConfig, PPOTrainer

from rehearsal_gym.core.lora import AdapterDisabled
from rehearsal_gym.core.model import LM

pytest.importorskip("peft")

SMALL = dict(
    iterations=2,
    tasks_per_iter=2,
    group_size=2,
    max_turns=2,
    epochs=1,
    minibatch_size=4,
    lr=1e-2,
    ent_coef=0.5,
)  # the entropy moves the adapters even when every reward is 0


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_lora_trains_only_the_adapters_against_the_base_as_reference(tiny_lm, tmp_path):
    lm = tiny_lm.with_model(copy.deepcopy(tiny_lm.model))
    ids = torch.tensor([lm.turn("task", "Request: add 1 and 2") + lm.prompt("agent")])
    before = _logits(lm.model, ids)
    trainer = PPOTrainer(PPOConfig.from_flat(**SMALL, lora_rank=4), lm)
    assert lm.is_lora and isinstance(trainer.ref, AdapterDisabled)
    assert list(trainer.ref.parameters()) == []  # no second copy of the weights
    trained = {n for n, p in lm.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    base = {n: p.detach().clone() for n, p in lm.model.named_parameters() if not p.requires_grad}
    for _ in range(2):
        assert trainer.train_iteration()["losses/update_fraction"] == 1.0
    assert all(torch.equal(p, base[n]) for n, p in lm.model.named_parameters() if n in base)
    assert not torch.allclose(_logits(lm.model, ids), before)  # the adapters learned something
    assert torch.allclose(_logits(trainer.ref, ids), before, atol=1e-6)  # the reference did not move

    trainer.save(tmp_path / "ckpt")
    resumed = PPOTrainer.load(tmp_path / "ckpt")
    assert resumed.lm.is_lora and resumed.iteration == trainer.iteration
    assert torch.allclose(_logits(resumed.lm.model, ids), _logits(lm.model, ids), atol=1e-6)
    assert torch.allclose(_logits(resumed.ref, ids), before, atol=1e-6)
    assert resumed.train_iteration()["losses/update_fraction"] == 1.0


def test_a_lora_model_saves_and_loads_as_base_plus_adapter(tiny_lm, tmp_path):
    lm = tiny_lm.with_model(copy.deepcopy(tiny_lm.model)).add_lora(rank=2)
    with torch.no_grad():
        for name, p in lm.model.named_parameters():
            if "lora_B" in name:
                p.normal_()  # a non-zero adapter, so that losing it would show
    lm.save(tmp_path / "m")
    assert (tmp_path / "m" / "adapter" / "adapter_config.json").is_file()
    again = LM.load(tmp_path / "m")
    ids = torch.tensor([lm.turn("task", "x")])
    assert again.is_lora and torch.allclose(_logits(again.model, ids), _logits(lm.model, ids), atol=1e-6)
    plain = LM.load(tmp_path / "m")
    with plain.model.disable_adapter():
        assert torch.allclose(_logits(plain.model, ids), _logits(tiny_lm.model, ids), atol=1e-6)
    with pytest.raises(ValueError, match="already has LoRA"):
        again.add_lora()
    with pytest.raises(ValueError, match="rank"):
        tiny_lm.with_model(copy.deepcopy(tiny_lm.model)).add_lora(rank=0)
