"""Supervised warm start of the default model on oracle demonstrations of the train splits.

Two losses on one set of weights (EnvACE's two roles): behaviour cloning of the oracle's turns
(agent role) and next-result prediction of real tool results (environment role). The result is
cached on disk keyed by the config, so the main job trains it once.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .defaults import REAL_ENV_IDS, TOKENIZER_VERSION, cache_dir, default_tokenizer
from .demos import (
    agent_sequence,
    copy_drills,
    env_role_prompts,
    env_role_sequence,
    record_oracle_episodes,
    result_bank,
)
from .model import LM, LMConfig


@dataclass(frozen=True)
class WarmStartConfig:
    """Behaviour cloning + next-result prediction on oracle episodes."""

    envs: tuple[str, ...] = REAL_ENV_IDS  # real envs whose train split gives the demonstrations
    tasks_per_env: int = 1500  # oracle episodes per env
    env_role_fraction: float = 1.0  # share of the demos' calls also given as environment-role examples
    env_role_examples: int = 2  # real results in an environment-role prompt (SelfSimEnv's n_examples)
    copy_drills: int = 20000  # short synthetic copy exercises (values from the demos)
    drill_steps: int = 1500  # first steps train on copy drills only (forms the copying circuit)
    drill_batch_size: int = 32  # sequences per drill step (drills are short)
    drill_every: int = 4  # after the drill steps, every n-th step is a drill batch (0 = never)
    steps: int = 8000  # optimizer steps after the drill steps
    batch_size: int = 16  # sequences per step
    lr: float = 3e-3  # peak learning rate (linear warmup, cosine decay to 10%)
    warmup: int = 60  # warmup steps
    weight_decay: float = 0.01  # AdamW weight decay
    seed: int = 0  # model init, data order
    model: LMConfig = field(default_factory=LMConfig)  # size of the default model

    def __post_init__(self) -> None:
        if not 0.0 <= self.env_role_fraction <= 1.0:
            raise ValueError(
                f"WarmStartConfig.env_role_fraction must be in [0, 1], got {self.env_role_fraction!r}"
            )
        for name in ("copy_drills", "drill_steps", "drill_every", "env_role_examples"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"WarmStartConfig.{name} must be an int >= 0, got {getattr(self, name)!r}")
        if (self.drill_steps or self.drill_every) and self.copy_drills < len(self.envs):
            raise ValueError("WarmStartConfig.copy_drills must be >= the number of envs when drills are used")
        for name in ("tasks_per_env", "steps", "batch_size", "drill_batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(
                    f"WarmStartConfig.{name} must be a positive int, got {getattr(self, name)!r}"
                )
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"WarmStartConfig.lr must be a positive finite number, got {self.lr!r}")
        if not self.envs:
            raise ValueError("WarmStartConfig.envs must name at least one env")

    def key(self) -> str:
        """Short hash naming the cached checkpoint of this config (and tokenizer version)."""
        blob = json.dumps([asdict(self), TOKENIZER_VERSION], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


Example = tuple[list[int], list[int]]


def build_examples(lm: LM, config: WarmStartConfig) -> tuple[list[Example], list[Example]]:
    """(ids, loss mask) pairs: episodes of both roles from the train splits' oracle runs, and
    copy drills made from the same demos."""
    rng = np.random.default_rng(config.seed)
    examples, drills = [], []
    for env_id in config.envs:
        demos = record_oracle_episodes(env_id, range(config.tasks_per_env))
        examples += [agent_sequence(lm, d) for d in demos]
        drills += copy_drills(lm, demos, config.copy_drills // len(config.envs), rng)
        bank = result_bank(demos)
        for demo in demos:
            for prompt, result in env_role_prompts(demo, bank, rng, k=config.env_role_examples):
                if rng.random() < config.env_role_fraction:
                    examples.append(env_role_sequence(lm, prompt, result))
    too_long = [len(ids) for ids, _ in examples if len(ids) > lm.max_len]
    if too_long:
        raise ValueError(f"{len(too_long)} demonstrations exceed the context of {lm.max_len} tokens")
    return examples, drills


def masked_lm_loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over positions whose target has mask 1."""
    targets, weights = ids[:, 1:], mask[:, 1:].float()
    nll = F.cross_entropy(
        logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets.reshape(-1), reduction="none"
    )
    return (nll * weights.reshape(-1)).sum() / weights.sum().clamp(min=1.0)


def length_batches(lengths: list[int], batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One epoch of batches of similar length (less padding), in random order."""
    order = rng.permutation(len(lengths))
    pool = 50 * batch_size  # sort within pools of 50 batches: similar lengths, still shuffled
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        batches += [np.array(chunk[i : i + batch_size]) for i in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def _batch(examples, idx, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(examples[i][0]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids)
    for row, i in enumerate(idx):
        seq, m = examples[i]
        ids[row, : len(seq)] = torch.as_tensor(seq)
        attn[row, : len(seq)] = 1
        loss_mask[row, : len(seq)] = torch.as_tensor(m)
    return ids, attn, loss_mask


def train_warm_start(
    config: WarmStartConfig, lm: LM | None = None, progress: bool = True, log: Callable[[str], None] = print
) -> tuple[LM, list[float]]:
    """Train the model on both roles; returns the model and the loss per step."""
    torch.manual_seed(config.seed)
    lm = lm or LM.new(default_tokenizer(), config.model, seed=config.seed)
    t0 = time.time()
    examples, drills = build_examples(lm, config)
    log(
        f"warm start: {len(examples)} episodes and {len(drills)} copy drills built in {time.time() - t0:.1f}s; "
        f"{lm.num_parameters():,} parameters"
    )
    rng = np.random.default_rng(config.seed)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    total = config.drill_steps + config.steps

    def lr_at(step: int) -> float:
        if step < config.warmup:
            return config.lr * (step + 1) / config.warmup
        frac = (step - config.warmup) / max(1, total - config.warmup)
        return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    lm.model.train()
    losses, batches = [], []
    bar = tqdm(range(total), desc="warm start", disable=not progress, mininterval=2)
    for step in bar:
        drill_step = step < config.drill_steps or (config.drill_every and step % config.drill_every == 0)
        if drill_step:  # phase 1: copy drills only; phase 2: one drill batch every `drill_every` steps
            ids, attn, loss_mask = _batch(
                drills, rng.integers(0, len(drills), config.drill_batch_size), lm.pad_id
            )
        else:  # phase 2: episodes of both roles
            if not batches:
                batches = length_batches([len(ids) for ids, _ in examples], config.batch_size, rng)
            ids, attn, loss_mask = _batch(examples, batches.pop(), lm.pad_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss = masked_lm_loss(lm.model(input_ids=ids, attention_mask=attn).logits, ids, loss_mask)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"warm start loss is {loss.item()} at step {step}; lower WarmStartConfig.lr"
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    lm.model.eval()
    return lm, losses


def warm_start_path(config: WarmStartConfig) -> Path:
    return cache_dir() / f"warmstart-{config.key()}"


def load_or_train(config: WarmStartConfig | None = None, progress: bool = True, log=print) -> LM:
    """The cached warm-started model for `config`, training (and caching) it on first use."""
    config = config or WarmStartConfig()
    path = warm_start_path(config)
    if (path / "config.json").is_file():
        log(f"warm start: loading cached {path}")
        return LM.load(path)
    lm, losses = train_warm_start(config, progress=progress, log=log)
    lm.save(path)
    (path / "losses.json").write_text(json.dumps(losses))
    log(f"warm start: saved {path} (final loss {np.mean(losses[-20:]):.3f})")
    return lm
