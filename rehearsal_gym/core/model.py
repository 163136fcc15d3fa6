"""The policy's language model: a causal LM, its tokenizer and the role token ids.

`LM.new` builds the tiny default from a `transformers` Llama config; `LM.load` opens the
default's checkpoints, any local Hugging Face causal-LM directory or a Hub id (adding the role
tokens it lacks), on a device and in a dtype. Conversations are built by concatenating per-turn
token ids (`LM.turn`); the decoded text is never re-tokenized for training.
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

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """A torch dtype from its name ("float32", "bfloat16", "float16") or itself; None = float32."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A torch device; "auto" picks CUDA when available, else CPU; None = CPU."""
    if device is None:
        return torch.device("cpu")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        out = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}") from e
    if out.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available here; use 'auto' or 'cpu'")
    return out


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's parameters (CPU for a model without any)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


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
    def load(
        cls,
        name_or_path: str | os.PathLike,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
    ) -> LM:
        """Open a causal LM with its tokenizer: a local Hugging Face model directory, or a Hub id
        (``"Qwen/Qwen2.5-0.5B-Instruct"``; downloaded once into the Hugging Face cache where the Hub
        is reachable). `device`: "auto" (CUDA when available), "cpu", "cuda[:N]"; None = CPU.
        `dtype`: "float32" (default), "bfloat16" or "float16"."""
        torch_dtype, torch_device = resolve_dtype(dtype), resolve_device(device)
        path = Path(name_or_path)
        if path.exists():
            if not (path / "config.json").is_file():
                raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
            source = str(path)
        else:
            source = str(name_or_path)
        try:
            with _quiet_progress():
                tokenizer = AutoTokenizer.from_pretrained(source)
                model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
        except OSError as e:
            if path.exists():
                raise
            raise OSError(
                f"{source!r} is not a local directory, and loading it as a Hugging Face Hub id failed: the "
                "Hub is not reachable from here (or HF_HUB_OFFLINE is set) and the id is not in the local "
                "cache, or no such model exists. Download it where the Hub is reachable "
                f"(`hf download {source}`) or pass a local model directory. ({str(e)[:200]})"
            ) from e
        return cls(model.eval(), tokenizer).to(torch_device)

    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    def to(self, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None) -> LM:
        """Move the model (in place) to a device and/or dtype; returns self."""
        if device is not None:
            self.model.to(resolve_device(device))
        if dtype is not None:
            self.model.to(resolve_dtype(dtype))
        return self

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
