"""LoRA adapters through `peft` (the optional extra ``rehearsal-gym[lora]``).

Only the adapters' low-rank matrices train; the base weights stay frozen, so the reference policy
(PPO's KL anchor, a frozen world) is the same model with the adapter disabled, not a second copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _peft():
    try:
        import peft
    except ImportError as e:
        raise ImportError("LoRA needs peft: pip install 'rehearsal-gym[lora]'") from e
    return peft


def is_lora(model: torch.nn.Module) -> bool:
    """Whether `model` is a peft model with adapters."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def add_lora(
    model: torch.nn.Module,
    rank: int = 8,
    alpha: float | None = None,
    dropout: float = 0.0,
    target_modules: Sequence[str] | str | None = None,
) -> torch.nn.Module:
    """`model` with trainable LoRA adapters of `rank` (scale alpha / rank; alpha defaults to
    2 * rank) on `target_modules` (None: peft's default for the architecture, or every linear
    layer where it has none)."""
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"LoRA rank must be a positive int, got {rank!r}")
    peft = _peft()
    if target_modules is None:
        known = peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
        target_modules = None if model.config.model_type in known else "all-linear"
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else 2 * rank,
        lora_dropout=dropout,
        target_modules=list(target_modules) if isinstance(target_modules, list | tuple) else target_modules,
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, config)


def load_adapter(model: torch.nn.Module, path: str) -> torch.nn.Module:
    """The base `model` with the (trainable) adapter saved at `path`."""
    return _peft().PeftModel.from_pretrained(model, path, is_trainable=True)


def base_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base weights of a peft model under their original names (adapters left out)."""
    prefix = "base_model.model."
    out = {}
    for name, tensor in model.state_dict().items():
        if "lora_" in name:
            continue
        name = name.removeprefix(prefix).replace(".base_layer.", ".")
        out[name] = tensor
    return out


class AdapterDisabled(torch.nn.Module):
    """The base model under a LoRA model: calls run it with the adapter disabled, in eval mode.

    Holds no parameters of its own (the policy's are not listed twice, nor frozen by a caller that
    freezes a reference's parameters); `device` and `config` are the policy's.
    """

    def __init__(self, peft_model: torch.nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "policy", peft_model)  # not a submodule

    @property
    def config(self) -> Any:
        return self.policy.config

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        was_training = self.policy.training
        self.policy.eval()
        try:
            with self.policy.disable_adapter():
                return self.policy(*args, **kwargs)
        finally:
            self.policy.train(was_training)
