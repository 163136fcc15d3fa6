"""The envs a trainer rolls out in: the real env's train split, or SelfSimEnv over it.

Shared by the in-process trainer and the Ray workers (`agents.distributed`), so neither imports
the other.
"""

from __future__ import annotations

import gymnasium as gym

from rehearsal_gym.core.model import LM
from rehearsal_gym.rehearsal.demos import seed_bank
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv, base_env

from .config import PPOConfig


def load_world(path: str, lm: LM) -> LM:
    """The frozen world model at `path`; it must share `lm`'s tokenizer (the envs pass it token ids)."""
    world = LM.load(path, device=lm.device, dtype=next(lm.model.parameters()).dtype)
    if world.tokenizer.get_vocab() != lm.tokenizer.get_vocab():
        raise ValueError(f"world model {path} has another tokenizer than the policy")
    for p in world.model.parameters():
        p.requires_grad_(False)
    return world


def make_train_envs(config: PPOConfig, lm: LM, n: int) -> list[gym.Env]:
    """The `n` train-split envs of a config: the real env, or SelfSimEnv with `lm` as its world model.

    `lm` is the policy in training (EnvACE) or, with `rehearsal_world="frozen"`, the frozen reference.
    """
    r = config.rehearsal
    fmt = {"call_format": lm.call_format} if lm.call_format != "text" else {}  # the model's own
    if r.rehearse == "off":
        return [gym.make(config.env, split="train", max_turns=config.max_turns, **fmt) for _ in range(n)]
    bank = seed_bank(base_env(config.env).family, 40)
    return [
        SelfSimEnv(
            config.env,
            model=lm,
            mode=r.rehearse,
            bank=bank,
            temperature=r.world_temperature or config.ppo.temperature,
            verifier=r.rehearsal_verifier,
            premise_redraws=r.premise_redraws,
            split="train",
            max_turns=config.max_turns,
            **fmt,
        )
        for _ in range(n)
    ]
