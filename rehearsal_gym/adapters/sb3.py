"""stable-baselines3 / sb3-contrib policies that are the package's causal LM.

`LMPolicy` (for ``PPO``/``A2C``) and `MaskableLMPolicy` (for sb3-contrib's ``MaskablePPO``) run
the LM over a `TokenEnv` observation, take the last hidden state as the features, use the LM's
own output head as the action head (logits over the vocabulary) and add a linear value head. So
SB3 trains the very model that `rehearsal_gym` samples from, and the trained weights can be saved
as a Hugging Face directory with ``policy.lm.save(path)``.

    from stable_baselines3 import PPO
    from rehearsal_gym.adapters.sb3 import LMPolicy
    from rehearsal_gym.adapters.token_env import TokenEnv

    env = TokenEnv("ToolCall-v0", lm)
    model = PPO(LMPolicy, env, policy_kwargs={"lm": lm}, learning_rate=1e-5, n_steps=256)

``policy_kwargs["lm"]`` is an `LM`, a local model directory, or None (the embedded default). The
policy forces ``ortho_init=False`` (orthogonal re-initialisation would erase the pretrained
weights), no MLP between features and heads, and one shared feature extractor.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from rehearsal_gym.adapters.token_env import TokenEnv
from rehearsal_gym.defaults import resolve_lm


class LMFeatures(BaseFeaturesExtractor):
    """The LM's last hidden state at the last real token of each observation."""

    def __init__(self, observation_space: gym.spaces.Dict, model: torch.nn.Module) -> None:
        super().__init__(observation_space, features_dim=int(model.config.hidden_size))
        self.model = model

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = observations["input_ids"].long()
        mask = observations["attention_mask"].long()
        lengths = mask.sum(-1).clamp(min=1)
        width = int(lengths.max())  # right-padded: columns past the longest row are all padding
        hidden = self.model.base_model(
            input_ids=ids[:, :width], attention_mask=mask[:, :width]
        ).last_hidden_state
        return hidden[torch.arange(len(ids), device=ids.device), lengths - 1]


class LMHead(torch.nn.Module):
    """The LM's output embedding as the action head, cut to the action space's `n` tokens."""

    def __init__(self, model: torch.nn.Module, n: int) -> None:
        super().__init__()
        self.head = model.get_output_embeddings()
        if self.head.out_features < n:
            raise ValueError(
                f"the model's head has {self.head.out_features} outputs; the action space has {n}"
            )
        self.n = n

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.head(latent)[..., : self.n]


class _LMPolicyMixin:
    def __init__(self, observation_space, action_space, lr_schedule, lm=None, **kwargs: Any) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"LM policies need a Discrete token action space (TokenEnv), got {action_space}")
        if kwargs.pop("ortho_init", False):
            raise ValueError(
                "ortho_init=True would overwrite the pretrained LM weights; LM policies use False"
            )
        for name in ("net_arch", "features_extractor_class", "features_extractor_kwargs"):
            if kwargs.pop(name, None) is not None:
                raise ValueError(f"LM policies set {name} themselves; remove it from policy_kwargs")
        resolved = resolve_lm(lm)
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=[],
            ortho_init=False,
            features_extractor_class=LMFeatures,
            features_extractor_kwargs={"model": resolved.model},
            share_features_extractor=True,
            **kwargs,
        )
        self.lm = resolved
        self.action_net = LMHead(resolved.model, int(action_space.n))
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        for name in ("net_arch", "ortho_init", "features_extractor_class", "features_extractor_kwargs"):
            data.pop(name, None)
        data["lm"] = self.lm
        return data


class LMPolicy(_LMPolicyMixin, ActorCriticPolicy):
    """Actor-critic policy for SB3's PPO/A2C whose actor is the causal LM (see the module docstring)."""


class MaskableLMPolicy(_LMPolicyMixin, MaskableActorCriticPolicy):
    """The same policy for sb3-contrib's MaskablePPO (grammar masks from `TokenEnv.action_masks`)."""


def evaluate_success(
    model,
    env_id: str,
    n_tasks: int,
    *,
    split: str = "test",
    tokenizer: Any = None,
    deterministic: bool = True,
    **token_env_kwargs: Any,
) -> float:
    """Success rate of a trained SB3 model on tasks 0..n_tasks-1 of the real env `env_id`.

    Uses action masks when the model takes them (MaskablePPO) and carries the LSTM state of
    recurrent models (RecurrentPPO)."""
    env = TokenEnv(env_id, tokenizer, env_kwargs={"split": split}, **token_env_kwargs)
    maskable = "action_masks" in model.predict.__code__.co_varnames
    recurrent = "episode_start" in model.predict.__code__.co_varnames and not maskable
    wins = 0
    try:
        for i in range(n_tasks):
            obs, _ = env.reset(options={"task_index": i})
            state, start, done, info = None, np.ones((1,), dtype=bool), False, {}
            while not done:
                kwargs: dict[str, Any] = {"deterministic": deterministic}
                if maskable:
                    kwargs["action_masks"] = env.action_masks()
                if recurrent:
                    kwargs.update(state=state, episode_start=start)
                action, state = model.predict(obs, **kwargs)
                obs, _, terminated, truncated, info = env.step(int(action))
                start, done = np.zeros((1,), dtype=bool), terminated or truncated
            wins += bool(info.get("success"))
    finally:
        env.close()
    return wins / max(n_tasks, 1)
