"""The embedded default model: where it is found and how a model argument is resolved.

The package ships the trained default (``rehearsal_gym/assets/default``: weights, tokenizer, config
and ``manifest.json`` with the warm-start config key, the held-out success it reached and the command
that reproduces it). Which default a run uses follows one rule:

1. ``$REHEARSAL_GYM_HOME/default`` when it holds a model (``rehearsal-gym warmstart --install``
   writes one there: a default you retrained yourself wins over the shipped one);
2. else the shipped default.

Nothing here trains silently: ``rehearsal-gym warmstart`` is the one command that trains a model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import AutoTokenizer

if TYPE_CHECKING:
    from rehearsal_gym.core.model import LM

ASSETS = Path(__file__).parent / "assets"
SHIPPED_DEFAULT = ASSETS / "default"
"""The trained default shipped as package data."""


def cache_dir() -> Path:
    """Where retrained models, cached tokenizers and analysts live (``$REHEARSAL_GYM_HOME``,
    default ``~/.cache/rehearsal_gym``)."""
    root = os.environ.get("REHEARSAL_GYM_HOME") or Path.home() / ".cache" / "rehearsal_gym"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def installed_default_dir() -> Path:
    """Where `rehearsal-gym warmstart --install` puts a retrained default (it then takes precedence)."""
    return cache_dir() / "default"


def default_model_dir() -> Path:
    """The directory of the default model, by the rule in this module's docstring."""
    installed = installed_default_dir()
    if (installed / "config.json").is_file():
        return installed
    if not (SHIPPED_DEFAULT / "config.json").is_file():
        raise FileNotFoundError(
            f"the shipped default model is missing from {SHIPPED_DEFAULT}; reinstall rehearsal-gym, or "
            "train one with `rehearsal-gym warmstart --install`"
        )
    return SHIPPED_DEFAULT


def default_manifest() -> dict[str, Any]:
    """The default model's manifest (config key, held-out figures, reproducing command); {} if none."""
    path = default_model_dir() / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def default_lm() -> LM:
    """The embedded default model (trained), by the rule in this module's docstring."""
    from rehearsal_gym.core.model import LM

    return LM.load(default_model_dir())


def resolve_lm(model: LM | str | os.PathLike | None, *, device=None, dtype=None, call_format=None) -> LM:
    """An `LM` from an `LM`, a local model directory or Hugging Face Hub id, or None (the default
    model), on `device` in `dtype` and with `call_format` when given (an `LM` passed in is changed
    in place)."""
    from rehearsal_gym.core.model import LM
    from rehearsal_gym.core.protocol import check_call_format

    if isinstance(model, LM):
        lm = model.to(device, dtype)
    elif model is None:
        lm = default_lm().to(device, dtype)
    elif isinstance(model, str | os.PathLike):
        lm = LM.load(model, device=device, dtype=dtype)
    else:
        raise ValueError(
            f"model must be an LM, a model directory or Hub id, or None, got {type(model).__name__}"
        )
    if call_format is not None:
        lm.call_format = check_call_format(call_format)
    return lm


def default_tokenizer():
    """The default model's tokenizer."""
    return AutoTokenizer.from_pretrained(default_model_dir())
