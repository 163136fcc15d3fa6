"""The policy's language model: a causal LM, its tokenizer and the role token ids.

`LM.new` builds the tiny default from a `transformers` Llama config; `LM.load` opens the
default's checkpoints or any local Hugging Face causal-LM directory (adding the role tokens it
lacks). Conversations are built by concatenating per-turn token ids (`LM.turn`); the decoded
text is never re-tokenized for training.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from rehearsal_gym.core.atomic import atomic_directory
from rehearsal_gym.core.checks import PositiveInt, validate
from rehearsal_gym.core.tokenizer import END, PAD, ROLE_TOKENS, Codec, missing_special_tokens


@contextlib.contextmanager
def _quiet_progress():
    """No per-file progress bars from transformers while saving or loading small models."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


@dataclass(frozen=True)
class LMConfig:
    """Size of the default model (sized to train on 2 CPU cores in minutes)."""

    hidden_size: PositiveInt = 96  # width of the residual stream
    num_layers: PositiveInt = 3  # transformer blocks
    num_heads: PositiveInt = 4  # attention heads
    intermediate_size: PositiveInt = 288  # MLP width
    max_len: PositiveInt = 1024  # context length in tokens

    def __post_init__(self) -> None:
        validate(self)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"LMConfig.hidden_size ({self.hidden_size}) must be divisible by num_heads")


class LM:
    """A causal LM bundled with its tokenizer and role token ids."""

    def __init__(self, model: torch.nn.Module, tokenizer) -> None:
        missing = missing_special_tokens(tokenizer)
        if missing:
            tokenizer.add_special_tokens({"additional_special_tokens": missing})
            model.resize_token_embeddings(len(tokenizer))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = PAD
        self.model = model
        self.tokenizer = tokenizer
        self.codec = Codec(tokenizer)
        self.pad_id, self.end_id, self.role_ids = self.codec.pad_id, self.codec.end_id, self.codec.role_ids
        cfg = model.config
        self.max_len = int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", 2048))

    @classmethod
    def new(cls, tokenizer, config: LMConfig | None = None, seed: int = 0) -> LM:
        """A freshly initialised default model for `tokenizer`."""
        config = config or LMConfig()
        torch.manual_seed(seed)
        vocab = tokenizer.get_vocab()
        hf_config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            num_key_value_heads=config.num_heads,
            max_position_embeddings=config.max_len,
            tie_word_embeddings=True,
            pad_token_id=vocab[PAD],
            eos_token_id=vocab[END],
            bos_token_id=vocab[ROLE_TOKENS["task"]],
        )
        return cls(LlamaForCausalLM(hf_config).eval(), tokenizer)

    @classmethod
    def load(cls, path: str | os.PathLike) -> LM:
        """Open a local Hugging Face causal-LM directory (weights and tokenizer)."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
        with _quiet_progress():
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return cls(model.eval(), tokenizer)

    def save(self, path: str | os.PathLike) -> None:
        """Write weights (safetensors), config and tokenizer atomically: all or nothing."""
        with atomic_directory(path) as tmp, _quiet_progress():
            self.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)

    def encode(self, text: str) -> list[int]:
        """Token ids of untrusted text; role-token strings in it stay plain text."""
        return self.codec.encode(text)

    def turn(self, role: str, text: str) -> list[int]:
        """One message: role token, text, end token."""
        return self.codec.turn(role, text)

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, without the end token or padding."""
        return self.codec.decode(ids)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
