"""Trainer checkpoints: safetensors weights, optimizer and RNG states, history, written atomically.

Schema 3 stores the sectioned `PPOConfig`; schema 2 checkpoints (a flat config) still load.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_model, save_model

from rehearsal_gym.core.atomic import atomic_directory, recover
from rehearsal_gym.core.model import LM
from rehearsal_gym.training.skills import SkillLibrary

from .config import PPOConfig

if TYPE_CHECKING:
    from .ppo import PPOTrainer

CHECKPOINT_SCHEMA = 3
READABLE_SCHEMAS = (2, 3)


def save_trainer(trainer: PPOTrainer, path: str | os.PathLike) -> None:
    with atomic_directory(path) as tmp:
        trainer.lm.save(tmp / "model")
        if not trainer.lm.is_lora:  # a LoRA model's reference is its base, saved with it
            save_model(trainer.ref, str(tmp / "reference.safetensors"))
        save_model(trainer.value_head, str(tmp / "value_head.safetensors"))
        torch.save(trainer.opt.state_dict(), tmp / "optimizer.pt")
        state = {
            "schema": CHECKPOINT_SCHEMA,
            "config": dataclasses.asdict(trainer.config),
            "iteration": trainer.iteration,
            "numpy_rng": trainer.rng.bit_generator.state,
            "torch_generator": trainer.generator.get_state().tolist(),
            "history": trainer.history,
            "skill_library": trainer.library.to_dict(),
            "curriculum": trainer.curriculum.to_dict(),
        }
        (tmp / "trainer_state.json").write_text(json.dumps(state))


def load_trainer(cls: type[PPOTrainer], path: str | os.PathLike) -> PPOTrainer:
    path = recover(path)  # a kill between the checkpoint's renames leaves it beside `path`
    state = json.loads((path / "trainer_state.json").read_text())
    if state.get("schema") not in READABLE_SCHEMAS:
        raise ValueError(f"checkpoint schema {state.get('schema')} is not one of {READABLE_SCHEMAS}")
    trainer = cls(PPOConfig.from_dict(state["config"]), LM.load(path / "model"))
    if not trainer.lm.is_lora:
        load_model(trainer.ref, str(path / "reference.safetensors"))
    load_model(trainer.value_head, str(path / "value_head.safetensors"))
    trainer.opt.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    trainer.iteration = state["iteration"]
    trainer.rng.bit_generator.state = state["numpy_rng"]
    trainer.generator.set_state(torch.tensor(state["torch_generator"], dtype=torch.uint8))
    trainer.history = state["history"]
    trainer.library = SkillLibrary.from_dict(state["skill_library"])
    if "curriculum" in state:  # checkpoints from before the curriculum sampled uniformly
        trainer.curriculum.load_dict(state["curriculum"])
    return trainer
