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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from rehearsal_gym.core.atomic import atomic_directory
from rehearsal_gym.core.checks import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    UnitFloat,
    validate,
)
from rehearsal_gym.core.model import LM, LMConfig, model_device
from rehearsal_gym.core.tokenizer import train_tokenizer
from rehearsal_gym.defaults import cache_dir
from rehearsal_gym.envs import REAL_ENV_IDS
from rehearsal_gym.rehearsal.demos import (
    agent_sequence,
    copy_drills,
    corpus_texts,
    env_role_prompts,
    env_role_sequence,
    record_oracle_episodes,
    result_bank,
)
from rehearsal_gym.training.sft import Batch, Epochs, Example, cosine_lr, random_batch, sft_loop

TOKENIZER_VERSION = "2"
"""Bump when the corpus or tokenizer settings change; cached tokenizers are keyed by it."""


@dataclass(frozen=True)
class WarmStartConfig:
    """Behaviour cloning + next-result prediction on oracle episodes."""

    envs: tuple[str, ...] = REAL_ENV_IDS  # real envs whose train split gives the demonstrations
    tasks_per_env: PositiveInt = 1500  # oracle episodes per env
    env_role_fraction: UnitFloat = 1.0  # share of the demos' calls also given as environment-role examples
    env_role_examples: NonNegativeInt = (
        2  # real results in an environment-role prompt (SelfSimEnv's n_examples)
    )
    copy_drills: NonNegativeInt = 20000  # short synthetic copy exercises (values from the demos)
    drill_steps: NonNegativeInt = 1500  # first steps train on copy drills only (forms the copying circuit)
    drill_batch_size: PositiveInt = 32  # sequences per drill step (drills are short)
    drill_every: NonNegativeInt = 4  # after the drill steps, every n-th step is a drill batch (0 = never)
    steps: PositiveInt = 8000  # optimizer steps after the drill steps
    batch_size: PositiveInt = 16  # sequences per step
    lr: PositiveFloat = 3e-3  # peak learning rate (linear warmup, cosine decay to 10%)
    warmup: NonNegativeInt = 60  # warmup steps
    weight_decay: NonNegativeFloat = 0.01  # AdamW weight decay
    seed: int = 0  # model init, data order
    model: LMConfig = field(default_factory=LMConfig)  # size of the default model
    # polish: after the main phase, steps on both roles of fresh demos (train tasks tasks_per_env..
    # of each env), no drills, at a low learning rate; 0 = no polish
    polish_steps: NonNegativeInt = 3000
    polish_tasks_per_env: PositiveInt = (
        3000  # fresh train tasks per env whose oracle demos the polish trains on
    )
    polish_lr: PositiveFloat = 3e-4  # peak learning rate of the polish (short warmup, cosine decay)
    polish_env_role_fraction: UnitFloat = 0.5  # share of the fresh calls given as environment-role examples
    # envs whose fresh demos the polish trains on (a subset of envs); None = all of envs
    polish_envs: tuple[str, ...] | None = None
    # fresh tasks of each polish env, in the order of polish_envs (or envs): a family's share of the
    # polish; None = polish_tasks_per_env each
    polish_env_tasks: tuple[PositiveInt, ...] | None = None
    # every n-th polish step is a copy-drill batch (drills of the fresh demos); 0 = none
    polish_drill_every: NonNegativeInt = 0

    def __post_init__(self) -> None:
        validate(self)
        if not self.envs:
            raise ValueError("WarmStartConfig.envs must name at least one env")
        if (self.drill_steps or self.drill_every or self.polish_drill_every) and self.copy_drills < len(
            self.envs
        ):
            raise ValueError("WarmStartConfig.copy_drills must be >= the number of envs when drills are used")
        if self.polish_envs is not None:
            if not self.polish_envs:
                raise ValueError(
                    "WarmStartConfig.polish_envs must be None or a non-empty tuple of env ids, got ()"
                )
            unknown = [e for e in self.polish_envs if e not in self.envs]
            if unknown:
                raise ValueError(f"WarmStartConfig.polish_envs must be among envs {self.envs}, got {unknown}")
        n = len(self.polish_envs or self.envs)
        if self.polish_env_tasks is not None and len(self.polish_env_tasks) != n:
            raise ValueError(
                f"WarmStartConfig.polish_env_tasks must be None or a tuple of {n} positive ints "
                f"(one per polish env), got {self.polish_env_tasks!r}"
            )

    def key(self) -> str:
        """Short hash naming the cached checkpoint of this config (and tokenizer version)."""
        fields = asdict(self)
        if not self.polish_steps:  # no polish: the key of configs from before the polish phase existed
            fields = {k: v for k, v in fields.items() if not k.startswith("polish_")}
        if not self.polish_drill_every:  # ... and from before polish drills existed
            fields.pop("polish_drill_every", None)
        if self.polish_envs is None:  # ... and from before polish_envs existed
            fields.pop("polish_envs", None)
        if self.polish_env_tasks is None:  # ... and from before polish_env_tasks existed
            fields.pop("polish_env_tasks", None)
        blob = json.dumps([fields, TOKENIZER_VERSION], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_examples(lm: LM, config: WarmStartConfig) -> tuple[list[Example], list[Example]]:
    """(ids, loss mask) pairs: episodes of both roles from the train splits' oracle runs, and
    copy drills made from the same demos."""
    rng = np.random.default_rng(config.seed)
    examples, drills = [], []
    for env_id in config.envs:
        demos = record_oracle_episodes(env_id, range(config.tasks_per_env))
        # drills draw from rng before the environment-role examples (the order the cached keys were made with)
        drills += copy_drills(lm, demos, config.copy_drills // len(config.envs), rng)
        examples += _both_roles(lm, demos, config.env_role_fraction, config.env_role_examples, rng)
    _check_context(lm, examples)
    return examples, drills


def _both_roles(lm: LM, demos, env_role_fraction: float, k: int, rng: np.random.Generator) -> list[Example]:
    """Every demo as agent-role sequence, and each of its calls, with probability
    `env_role_fraction`, as an environment-role sequence with k real examples of the tool."""
    examples = [agent_sequence(lm, d) for d in demos]
    bank = result_bank(demos)
    for demo in demos:
        for prompt, result in env_role_prompts(demo, bank, rng, k=k):
            if rng.random() < env_role_fraction:
                examples.append(env_role_sequence(lm, prompt, result))
    return examples


def _check_context(lm: LM, examples: list[Example]) -> None:
    too_long = [len(ids) for ids, _ in examples if len(ids) > lm.max_len]
    if too_long:
        raise ValueError(f"{len(too_long)} demonstrations exceed the context of {lm.max_len} tokens")


@torch.no_grad()
def drill_accuracy(lm: LM, drills: list[Example]) -> float:
    """Share of drills whose every answer token is the model's greedy next token (teacher-forced):
    how well the model copies a value from its context."""
    if not drills:
        raise ValueError("drill_accuracy needs at least one drill")
    was_training = lm.model.training
    lm.model.eval()
    solved = 0
    for ids, mask in drills:
        x = torch.tensor([ids], device=model_device(lm.model))
        pred = lm.model(input_ids=x).logits[0, :-1].argmax(-1)
        m = torch.tensor(mask[1:], dtype=torch.bool, device=x.device)
        solved += bool((pred[m] == x[0, 1:][m]).all())
    lm.model.train(was_training)
    return solved / len(drills)


def train_warm_start(
    config: WarmStartConfig, lm: LM | None = None, progress: bool = True, log: Callable[[str], None] = print
) -> tuple[LM, list[float]]:
    """Train the model on both roles; returns the model and the loss per step."""
    torch.manual_seed(config.seed)
    lm = lm or LM.new(build_tokenizer(), config.model, seed=config.seed)
    t0 = time.time()
    examples, drills = build_examples(lm, config)
    log(
        f"warm start: {len(examples)} episodes and {len(drills)} copy drills built in {time.time() - t0:.1f}s; "
        f"{lm.num_parameters():,} parameters"
    )
    rng = np.random.default_rng(config.seed)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    episodes = Epochs(examples, config.batch_size, rng, lm.pad_id)

    def next_batch(step: int) -> Batch:
        # phase 1: copy drills only; phase 2: episodes of both roles, a drill batch every `drill_every` steps
        if step < config.drill_steps or (config.drill_every and step % config.drill_every == 0):
            return random_batch(drills, config.drill_batch_size, rng, lm.pad_id)
        return episodes.next()

    total = config.drill_steps + config.steps
    losses = sft_loop(
        lm,
        opt,
        total,
        next_batch,
        cosine_lr(config.lr, config.warmup, total),
        desc="warm start",
        lr_field="WarmStartConfig.lr",
        progress=progress,
    )
    if config.polish_steps:
        losses += polish(lm, config, progress=progress, log=log)
    lm.model.eval()
    return lm, losses


def polish(
    lm: LM, config: WarmStartConfig, progress: bool = True, log: Callable[[str], None] = print
) -> list[float]:
    """The polish phase on `lm` in place: `config.polish_steps` steps on oracle demos of train
    tasks the main phase did not see (`polish_tasks(config)` of each of `config.polish_envs`,
    default all envs), as agent and (a `polish_env_role_fraction` share of their calls) as
    environment role, no copy drills, at `polish_lr` (short warmup, cosine decay).
    Returns the loss per step.

    Both roles train: a polish on agent-role sequences alone breaks the environment role (most
    imagined results become unusable; docs/results.md)."""
    first = config.tasks_per_env
    t0 = time.time()
    rng = np.random.default_rng(config.seed + 1)
    drill_rng = np.random.default_rng(
        config.seed + 2
    )  # apart, so polish_drill_every=0 leaves rng's draws as they were
    examples, drills = [], []
    envs = config.polish_envs or config.envs
    for env_id, n_tasks in zip(envs, polish_tasks(config), strict=True):
        demos = record_oracle_episodes(env_id, range(first, first + n_tasks))
        examples += _both_roles(lm, demos, config.polish_env_role_fraction, config.env_role_examples, rng)
        if config.polish_drill_every:
            drills += copy_drills(lm, demos, config.copy_drills // len(envs), drill_rng)
    _check_context(lm, examples)
    log(
        f"polish: {len(examples)} sequences of both roles from fresh demos and {len(drills)} copy drills "
        f"built in {time.time() - t0:.1f}s"
    )
    opt = torch.optim.AdamW(lm.model.parameters(), lr=config.polish_lr, weight_decay=config.weight_decay)
    episodes = Epochs(examples, config.batch_size, rng, lm.pad_id)

    def next_batch(step: int) -> Batch:
        if config.polish_drill_every and step % config.polish_drill_every == 0:
            return random_batch(drills, config.drill_batch_size, drill_rng, lm.pad_id)
        return episodes.next()

    return sft_loop(
        lm,
        opt,
        config.polish_steps,
        next_batch,
        cosine_lr(config.polish_lr, min(config.warmup, config.polish_steps), config.polish_steps),
        desc="polish",
        lr_field="WarmStartConfig.polish_lr",
        progress=progress,
    )


def polish_tasks(config: WarmStartConfig) -> tuple[int, ...]:
    """Fresh tasks the polish takes from each of its envs (`polish_envs`, default `envs`)."""
    envs = config.polish_envs or config.envs
    return config.polish_env_tasks or (config.polish_tasks_per_env,) * len(envs)


def main_phase_config(config: WarmStartConfig) -> WarmStartConfig:
    """The config of `config`'s main phase alone (its warm start before the polish)."""
    return replace(config, polish_steps=0)


def warm_start_path(config: WarmStartConfig) -> Path:
    return cache_dir() / f"warmstart-{config.key()}"


def polish_cached_main_phase(
    config: WarmStartConfig, progress: bool = True, log: Callable[[str], None] = print
) -> tuple[LM, list[float]]:
    """`config`'s warm start from its main phase's cache (`main_phase_config(config)`, trained and
    cached first if absent): the polish alone, the same weights as `train_warm_start(config)` (the
    polish draws nothing from torch's generator; tested). Returns the model and the loss per step,
    the main phase's included."""
    if not config.polish_steps:
        raise ValueError("polish_cached_main_phase needs WarmStartConfig.polish_steps > 0")
    main = main_phase_config(config)
    lm = load_or_train(main, progress=progress, log=log)
    losses_file = warm_start_path(main) / "losses.json"
    losses = json.loads(losses_file.read_text()) if losses_file.is_file() else []
    if len(losses) != main.drill_steps + main.steps:  # a cache without its losses: its curve is unknown
        losses = [float("nan")] * (main.drill_steps + main.steps)
    losses += polish(lm, config, progress=progress, log=log)
    return lm, losses


def save_warm_start(lm: LM, losses: list[float], path: Path) -> None:
    """The model (atomically) and its loss per step (losses.json) at `path`."""
    lm.save(path)
    (path / "losses.json").write_text(json.dumps(losses))


def write_manifest(
    path: Path, lm: LM, config: WarmStartConfig, held_out: dict[str, dict], command: str
) -> None:
    """``manifest.json`` beside a saved warm start `lm`: its config and key, the held-out success
    it reached (``{env: {"tasks": n, "success": rate}}``, greedy, test split from task 0) and the
    command that reproduces it."""
    manifest = {
        "warmstart_key": config.key(),
        "warmstart_config": asdict(config),
        "tokenizer_version": TOKENIZER_VERSION,
        "parameters": lm.num_parameters(),
        "held_out": held_out,
        "command": command,
    }
    (Path(path) / "manifest.json").write_text(json.dumps(manifest, indent=2, default=list) + "\n")


def load_or_train(config: WarmStartConfig | None = None, progress: bool = True, log=print) -> LM:
    """The cached warm-started model for `config`, training (and caching) it on first use."""
    config = config or WarmStartConfig()
    path = warm_start_path(config)
    if (path / "config.json").is_file():
        log(f"warm start: loading cached {path}")
        return LM.load(path)
    lm, losses = train_warm_start(config, progress=progress, log=log)
    save_warm_start(lm, losses, path)
    log(f"warm start: saved {path} (final loss {np.mean(losses[-20:]):.3f})")
    return lm


def ground_world(
    lm: LM,
    env_ids: tuple[str, ...] | list[str],
    tasks: range,
    steps: int,
    lr: float = 3e-4,
    batch_size: int = 16,
    k: int = 2,
    seed: int = 0,
    progress: bool = True,
    log: Callable[[str], None] = print,
    skip_overlong: bool = False,
) -> list[float]:
    """Ground the environment role of `lm` in place on real tool results: `steps` steps of
    next-result prediction (the environment role alone, k real examples per prompt, as SelfSimEnv
    shows) on the oracle's calls of train `tasks` of each env, at `lr` (short warmup, cosine decay).
    Returns the loss per step. A sequence longer than the context is an error, or with
    `skip_overlong` left out (the count is logged): never cut.

    EnvACE's grounding loss, applied before rehearsal to a world that stays frozen in it: a world
    that shows a value far less often than the real tool does never lets the agent practise on it.
    """
    if not env_ids:
        raise ValueError("ground_world needs at least one env id")
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"ground_world {name} must be a positive int, got {value!r}")
    if not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"ground_world lr must be a positive finite number, got {lr!r}")
    if len(tasks) < 1:
        raise ValueError("ground_world needs at least one task")
    rng = np.random.default_rng(seed)
    examples: list[Example] = []
    for env_id in env_ids:
        demos = record_oracle_episodes(env_id, tasks)
        bank = result_bank(demos)
        for demo in demos:
            examples += [env_role_sequence(lm, p, r) for p, r in env_role_prompts(demo, bank, rng, k=k)]
    if skip_overlong:
        fitting = [e for e in examples if len(e[0]) <= lm.max_len]
        log(
            f"ground world: {len(examples) - len(fitting)} of {len(examples)} sequences exceed the context; left out"
        )
        examples = fitting
    if not examples:
        raise ValueError(f"the oracle made no tool call that fits on tasks {tasks} of {list(env_ids)}")
    _check_context(lm, examples)
    log(f"ground world: {len(examples)} environment-role sequences of real results")
    opt = torch.optim.AdamW(lm.model.parameters(), lr=lr, weight_decay=0.01)
    results = Epochs(examples, batch_size, rng, lm.pad_id)
    return sft_loop(
        lm,
        opt,
        steps,
        lambda step: results.next(),
        cosine_lr(lr, min(60, steps), steps),
        desc="ground world",
        lr_field="lr",
        progress=progress,
    )


def build_tokenizer(vocab_size: int = 2048, tasks_per_env: int = 300):
    """Train the default tokenizer on oracle episodes of the train splits (cached per settings).

    The warm start trains from this, so that retraining the default starts from nothing shipped."""
    path = cache_dir() / f"tokenizer-v{TOKENIZER_VERSION}-{vocab_size}-{tasks_per_env}"
    if (path / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(path)
    demos = [d for env_id in REAL_ENV_IDS for d in record_oracle_episodes(env_id, range(tasks_per_env))]
    tokenizer = train_tokenizer(corpus_texts(demos), vocab_size=vocab_size)
    with atomic_directory(path) as tmp:
        tokenizer.save_pretrained(tmp)
    return AutoTokenizer.from_pretrained(path)
