"""The policy's language model: a causal LM, its tokenizer and how conversations become ids.

`LM.new` builds the tiny default from a `transformers` Llama config; `LM.load` opens the
default's checkpoints, any local Hugging Face causal-LM directory or a Hub id, on a device and in
a dtype. Conversations are built by concatenating per-turn token ids (`LM.start`, `LM.turn`,
`LM.prompt`); the decoded text is never re-tokenized for training. A model whose tokenizer has a
prefix-consistent chat template is spoken to in it (`core.chat`); any other gets the role tokens
(`core.tokenizer`), added to its vocabulary if it lacks them.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from rehearsal_gym.core.atomic import atomic_directory
from rehearsal_gym.core.chat import ChatCodec, TemplateError
from rehearsal_gym.core.checks import PositiveInt, validate
from rehearsal_gym.core.lora import add_lora, base_state_dict, is_lora, load_adapter
from rehearsal_gym.core.protocol import TOOL_CALL_OPEN, check_call_format
from rehearsal_gym.core.tokenizer import END, PAD, ROLE_TOKENS, Codec, missing_special_tokens

CONVERSATIONS = ("auto", "chat", "roles")
ADAPTER_DIR = "adapter"
"""A LoRA model's adapter, saved beside its base weights."""
SETTINGS_FILE = "rehearsal_gym.json"
"""Written next to a saved model: how its conversations are built and its call format."""

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
    """The device of a model's parameters (its `device` if it holds none, e.g. `AdapterDisabled`; else CPU)."""
    param = next(model.parameters(), None)
    if param is not None:
        return param.device
    device = getattr(model, "device", None)
    return device if isinstance(device, torch.device) else torch.device("cpu")


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


def _conversation_codec(model: torch.nn.Module, tokenizer, conversation: str) -> Codec | ChatCodec:
    if conversation not in CONVERSATIONS:
        raise ValueError(f"conversation must be one of {CONVERSATIONS}, got {conversation!r}")
    if conversation != "roles" and getattr(tokenizer, "chat_template", None):
        try:
            return ChatCodec(tokenizer)
        except TemplateError as e:
            if conversation == "chat":
                raise
            warnings.warn(
                f"the model's chat template cannot give exact per-turn token ids ({e}); using role tokens "
                "instead (new special tokens with untrained embeddings)",
                stacklevel=3,
            )
    elif conversation == "chat":
        raise TemplateError("the tokenizer has no chat template")
    missing = missing_special_tokens(tokenizer)
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing})
        model.resize_token_embeddings(len(tokenizer))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = PAD
    return Codec(tokenizer)


class LM:
    """A causal LM bundled with its tokenizer and how its conversations become token ids.

    conversation: "auto" (the chat template when the tokenizer has a prefix-consistent one, else
    role tokens, with a warning saying why), "chat" (the template, or `TemplateError`) or "roles".
    call_format: how the model writes tool calls ("text": ``CALL name {json}``; "json":
    ``<tool_call>{...}</tool_call>``); None = "json" when the chat template speaks of
    ``<tool_call>``, else "text". Envs take it as ``call_format=``.
    """

    def __init__(
        self, model: torch.nn.Module, tokenizer, *, conversation: str = "auto", call_format: str | None = None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.codec = _conversation_codec(model, tokenizer, conversation)
        self.pad_id, self.end_id = self.codec.pad_id, self.codec.end_id
        self.role_ids = getattr(self.codec, "role_ids", {})
        if call_format is None:
            chat = self.codec.kind == "chat" and TOOL_CALL_OPEN in str(tokenizer.chat_template)
            call_format = "json" if chat else "text"
        self.call_format = check_call_format(call_format)
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
        conversation: str | None = None,
        call_format: str | None = None,
    ) -> LM:
        """Open a causal LM with its tokenizer: a local Hugging Face model directory, or a Hub id
        (``"Qwen/Qwen2.5-0.5B-Instruct"``; downloaded once into the Hugging Face cache where the Hub
        is reachable). `device`: "auto" (CUDA when available), "cpu", "cuda[:N]"; None = CPU.
        `dtype`: "float32" (default), "bfloat16" or "float16". `conversation` and `call_format`
        as in `LM`; None = what the directory's rehearsal_gym.json says (a model saved by `save`),
        else "auto" and the template's format."""
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
        if path.exists() and (path / ADAPTER_DIR).is_dir():
            model = load_adapter(model, str(path / ADAPTER_DIR))
        saved = {}
        if path.exists() and (path / SETTINGS_FILE).is_file():
            saved = json.loads((path / SETTINGS_FILE).read_text())
        conversation = conversation or saved.get("conversation", "auto")
        call_format = call_format or saved.get("call_format")
        lm = cls(model.eval(), tokenizer, conversation=conversation, call_format=call_format)
        return lm.to(torch_device)

    @property
    def is_lora(self) -> bool:
        """Whether the model trains LoRA adapters (`add_lora`)."""
        return is_lora(self.model)

    def add_lora(self, rank: int = 8, **options) -> LM:
        """Train LoRA adapters of `rank` instead of every weight (pip install 'rehearsal-gym[lora]');
        `options`: alpha, dropout, target_modules (`core.lora.add_lora`). Returns self."""
        if self.is_lora:
            raise ValueError("the model already has LoRA adapters")
        self.model = add_lora(self.model, rank, **options)
        return self

    def with_model(self, model: torch.nn.Module) -> LM:
        """An LM with other weights (a copy, a frozen reference) and this one's tokenizer and codec."""
        out = copy.copy(self)
        out.model = model
        return out

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
            if self.is_lora:  # the base under its own names, the adapter beside it
                base = self.model.get_base_model()
                base.save_pretrained(tmp, state_dict=base_state_dict(self.model), safe_serialization=True)
                self.model.save_pretrained(Path(tmp) / ADAPTER_DIR)
            else:
                self.model.save_pretrained(tmp, safe_serialization=True)
            self.tokenizer.save_pretrained(tmp)
            settings = {"conversation": self.codec.kind, "call_format": self.call_format}
            (Path(tmp) / SETTINGS_FILE).write_text(json.dumps(settings) + "\n")

    def encode(self, text: str) -> list[int]:
        """Token ids of untrusted text; role-token strings in it stay plain text."""
        return self.codec.encode(text)

    @property
    def start(self) -> list[int]:
        """Ids that open every conversation (the chat template's system message; none for role tokens)."""
        return self.codec.start

    @property
    def close(self) -> list[int]:
        """Ids that follow the end token of a generated message (e.g. ChatML's newline)."""
        return self.codec.close

    def turn(self, role: str, text: str) -> list[int]:
        """One message of `role` ("task", "agent", "env", "skill", "sim"): its ids, end token included."""
        return self.codec.turn(role, text)

    def prompt(self, role: str) -> list[int]:
        """Ids that open a message the model writes in `role`; sample until `end_id`, then add `close`."""
        return self.codec.prompt(role)

    def head(self, role: str) -> list[int]:
        """Ids before the text in `turn(role, text)`."""
        return self.codec.head(role)

    def with_skill(self, ids: list[int], skill_ids: list[int]) -> list[int]:
        """A conversation's ids with a skill message inserted after the conversation start."""
        n0 = len(self.start)
        return ids[:n0] + skill_ids + ids[n0:]

    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, without the end token or padding."""
        return self.codec.decode(ids)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
