"""The embedded default: cache location, the tokenizer trained on the envs' own text."""

from __future__ import annotations

import os
from pathlib import Path

from transformers import AutoTokenizer

from .atomic import atomic_directory

TOKENIZER_VERSION = "2"
"""Bump when the corpus or tokenizer settings change; cached tokenizers are keyed by it."""
REAL_ENV_IDS = ("ToolCall-v0", "Retail-v0", "Finance-v0")


def cache_dir() -> Path:
    """Where the default tokenizer and warm-start checkpoints live (``$REHEARSAL_GYM_HOME``)."""
    root = os.environ.get("REHEARSAL_GYM_HOME") or Path.home() / ".cache" / "rehearsal_gym"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_tokenizer(vocab_size: int = 2048, tasks_per_env: int = 300):
    """The default tokenizer, trained once on oracle episodes of the train splits and cached."""
    from .demos import corpus_texts, record_oracle_episodes  # envs are needed only to build it
    from .tokenizer import train_tokenizer

    path = cache_dir() / f"tokenizer-v{TOKENIZER_VERSION}-{vocab_size}-{tasks_per_env}"
    if (path / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(path)
    demos = [d for env_id in REAL_ENV_IDS for d in record_oracle_episodes(env_id, range(tasks_per_env))]
    tokenizer = train_tokenizer(corpus_texts(demos), vocab_size=vocab_size)
    with atomic_directory(path) as tmp:
        tokenizer.save_pretrained(tmp)
    return AutoTokenizer.from_pretrained(path)


def default_lm():
    """The embedded default model and whether it is warm-started.

    The cached warm start of the default `WarmStartConfig` when one exists (``rehearsal-gym
    warmstart`` or ``demo`` makes it), else an untrained default model.
    """
    from .model import LM
    from .warmstart import WarmStartConfig, warm_start_path

    config = WarmStartConfig()
    path = warm_start_path(config)
    if (path / "config.json").is_file():
        return LM.load(path), True
    return LM.new(default_tokenizer(), config.model, seed=config.seed), False
