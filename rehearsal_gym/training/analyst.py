"""SEED's analyst role: the policy turns its own finished episodes into skills.

`analyst_sequence` builds the analyst's token ids (prompt, then the skill JSON after
``<|skill|>``); `train_analyst` is the analyst warm start: the model analyses episodes it sampled
itself on train tasks and learns to write the explainer's label (`skills.label_skill`), mixed
with the oracle's agent-role episodes so that acting is not forgotten; `analyse` samples the
model's own analyses during RL (`agents.ppo` with ``seed_distill``).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Annotated

import gymnasium as gym
import numpy as np
import torch

from rehearsal_gym.core.checks import PositiveFloat, PositiveInt, Range, UnitFloat, base_type, validate
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import Episode, run_episodes
from rehearsal_gym.core.sampling import sample
from rehearsal_gym.envs import REAL_ENV_IDS
from rehearsal_gym.rehearsal.demos import agent_sequence, record_oracle_episodes
from rehearsal_gym.training.sft import Epochs, cosine_lr, sft_loop
from rehearsal_gym.training.skills import Skill, analyst_prompt, label_skill, parse_skill


@dataclass(frozen=True)
class AnalystConfig:
    """Analyst warm start on top of an agent model."""

    envs: tuple[str, ...] = REAL_ENV_IDS
    tasks_per_env: PositiveInt = 160  # train tasks whose sampled episodes are analysed
    samples_per_task: PositiveInt = 2  # sampled episodes per task (temperature 1: successes and failures)
    oracle_fraction: Annotated[float, Range(0, 4)] = (
        1.0  # agent-role oracle episodes mixed in, per analyst example
    )
    # train tasks the oracle episodes are drawn from (None = the analysed tasks): more tasks than
    # analyses makes the agent-role replay mostly new episodes instead of epochs over a few, so the
    # analyst learns its labels without forgetting how to act (docs/results.md, SEED)
    oracle_tasks_per_env: PositiveInt | None = 2000
    # share of the oracle replay shown with the explainer's skill for it as a ``<|skill|>`` turn
    # before the conversation (where SEED's teacher puts it), so the agent learns to read a skill
    # before its skill-conditioned log-probs become a distillation target; 0 = none
    skill_replay_fraction: UnitFloat = 0.0
    steps: PositiveInt = 2000  # optimizer steps of the analyst warm start
    batch_size: PositiveInt = 16  # sequences per step
    lr: PositiveFloat = 1e-3  # peak learning rate (cosine decay to 10%)
    seed: int = 0  # episode sampling, data order

    def __post_init__(self) -> None:
        validate(self)


def analyst_config(text: str) -> AnalystConfig:
    """`AnalystConfig` from ``NAME=VALUE,...`` overrides (``lr=3e-4,oracle_fraction=1.0``; ``none`` for
    ``oracle_tasks_per_env``); ``""`` or ``default`` -> `AnalystConfig()`. Unknown names and bad values
    raise ValueError naming the field. The first default was
    ``oracle_tasks_per_env=none,oracle_fraction=0.5,steps=400``."""
    if text in ("", "default"):
        return AnalystConfig()
    hints = typing.get_type_hints(AnalystConfig, include_extras=True)
    kinds = {f.name: base_type(hints[f.name]) for f in fields(AnalystConfig) if f.name != "envs"}
    kwargs: dict[str, int | float | None] = {}
    for part in filter(None, text.split(",")):
        name, sep, value = part.partition("=")
        if not sep or name not in kinds:
            raise ValueError(
                f"analyst config: expected NAME=VALUE with NAME among {sorted(kinds)}, got {part!r}"
            )
        try:
            kind, nullable = kinds[name]
            if value.lower() == "none" and nullable:
                kwargs[name] = None
            else:
                kwargs[name] = int(value) if kind is int else float(value)
        except ValueError:
            raise ValueError(f"AnalystConfig.{name}: expected a number, got {value!r}") from None
    return AnalystConfig(**kwargs)


def analyst_prompt_ids(lm: LM, request: str, actions: Sequence[str], success: bool) -> list[int]:
    """The analyst's prompt: the episode in a task turn, then the opening of a skill message."""
    return [*lm.start, *lm.turn("task", analyst_prompt(request, actions, success)), *lm.prompt("skill")]


def analyst_sequence(lm: LM, request: str, actions: Sequence[str], success: bool, skill: Skill):
    """(ids, loss mask) of one analysis: the loss covers the skill JSON and the end token."""
    head = analyst_prompt_ids(lm, request, actions, success)
    tail = [*lm.encode(skill.to_json()), lm.end_id]
    return head + tail, [0] * len(head) + [1] * len(tail)


def sampled_analyses(lm: LM, env_id: str, task_indices: Sequence[int], samples: int, seed: int):
    """Analyst examples from the model's own sampled episodes, labelled by the explainer."""
    fmt = {"call_format": lm.call_format} if lm.call_format != "text" else {}  # the model's own
    envs = [gym.make(env_id, split="train", **fmt) for _ in range(min(32, len(task_indices) * samples))]
    jobs = [i for i in task_indices for _ in range(samples)]
    out, wins = [], 0
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(jobs), len(envs)):
        chunk = jobs[start : start + len(envs)]
        eps = run_episodes(
            lm,
            envs[: len(chunk)],
            [{"task_index": i} for i in chunk],
            greedy=False,
            generator=generator,
            seed=seed + start,
        )
        for ep, env in zip(eps, envs, strict=False):
            base = env.unwrapped
            skill = label_skill(base.task, base.oracle_turns(), ep.actions, ep.infos)
            out.append(analyst_sequence(lm, base.task.prompt, ep.actions, ep.success, skill))
            wins += ep.success
    for env in envs:
        env.close()
    return out, wins


def train_analyst(
    lm: LM, config: AnalystConfig | None = None, progress: bool = True, log: Callable[[str], None] = print
) -> list[float]:
    """Teach `lm` (in place) to write skills for its own episodes; returns the loss per step."""
    config = config or AnalystConfig()
    rng = np.random.default_rng(config.seed)
    lm.model.eval()
    analyses, oracle, wins = [], [], 0
    for k, env_id in enumerate(config.envs):
        tasks = range(10_000, 10_000 + config.tasks_per_env)  # not the warm start's first tasks
        data, w = sampled_analyses(lm, env_id, tasks, config.samples_per_task, config.seed + 1000 * k)
        analyses += data
        wins += w
        oracle_tasks = range(10_000, 10_000 + (config.oracle_tasks_per_env or config.tasks_per_env))
        oracle += oracle_replay(lm, env_id, oracle_tasks, config.skill_replay_fraction, rng)
    n_oracle = min(len(oracle), int(config.oracle_fraction * len(analyses)))
    examples = analyses + [oracle[int(i)] for i in rng.permutation(len(oracle))[:n_oracle]]
    log(f"analyst warm start: {len(analyses)} analyses ({wins} of successes), {n_oracle} oracle episodes")
    torch.manual_seed(config.seed)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=config.lr)
    batches = Epochs(examples, config.batch_size, rng, lm.pad_id)
    return sft_loop(
        lm,
        opt,
        config.steps,
        lambda step: batches.next(),
        cosine_lr(config.lr, 0, config.steps),  # no warm-up: the model starts trained
        desc="analyst warm start",
        lr_field="AnalystConfig.lr",
        progress=progress,
    )


def oracle_replay(
    lm: LM, env_id: str, task_indices: Sequence[int], skill_fraction: float, rng: np.random.Generator
) -> list[tuple[list[int], list[int]]]:
    """(ids, agent mask) of the oracle's episodes on train tasks; a `skill_fraction` share of them
    (drawn with `rng`) starts with the ``<|skill|>`` turn of the explainer's workflow for the episode,
    as SEED's teacher sees it (the skill turn is not in the loss)."""
    demos = record_oracle_episodes(env_id, task_indices)
    hinted = (
        set(np.flatnonzero(rng.random(len(demos)) < skill_fraction).tolist()) if skill_fraction else set()
    )
    out = []
    env = gym.make(env_id, split="train") if hinted else None
    try:
        for k, (index, demo) in enumerate(zip(task_indices, demos, strict=True)):
            ids, mask = agent_sequence(lm, demo)
            if k in hinted:
                skill = lm.turn("skill", oracle_skill(env, int(index)).hint())
                ids, mask = lm.with_skill(ids, skill), lm.with_skill(mask, [0] * len(skill))
            out.append((ids, mask))
    finally:
        if env is not None:
            env.close()
    return out


def oracle_skill(env: gym.Env, task_index: int) -> Skill:
    """The explainer's workflow skill of the oracle's episode on a task of `env` (its split)."""
    env.reset(options={"task_index": task_index})
    base = env.unwrapped
    turns = base.oracle_turns()
    infos = [env.step(turn)[4] for turn in turns]
    return label_skill(base.task, turns, turns, infos)


@torch.no_grad()
def analyse(
    lm: LM,
    requests: Sequence[str],
    episodes: Sequence[Episode],
    max_tokens: int = 96,
) -> list[Skill | None]:
    """The model's own skill for each finished episode (greedy), None where it wrote no valid skill."""
    prompts = [
        analyst_prompt_ids(lm, r, ep.actions, ep.success) for r, ep in zip(requests, episodes, strict=True)
    ]
    fits = [i for i, p in enumerate(prompts) if len(p) + max_tokens <= lm.max_len]
    out: list[Skill | None] = [None] * len(prompts)
    if not fits:
        return out
    samples = sample(
        lm.model,
        [prompts[i] for i in fits],
        max_new_tokens=max_tokens,
        stop_id=lm.end_id,
        pad_id=lm.pad_id,
        greedy=True,
    )
    for k, i in enumerate(fits):
        if samples.stopped[k]:
            out[i] = parse_skill(lm.decode(samples.tokens[k]))
    return out


def analyst_path(lm: LM, config: AnalystConfig):
    """Cache location of the analyst warm start of these weights under this config."""
    import hashlib
    import json

    from rehearsal_gym.defaults import cache_dir

    key = asdict(config)
    if key["oracle_tasks_per_env"] is None:  # the key of configs from before the field existed
        del key["oracle_tasks_per_env"]
    if not key["skill_replay_fraction"]:  # likewise
        del key["skill_replay_fraction"]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    for name, tensor in sorted(lm.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return cache_dir() / f"analyst-{digest.hexdigest()[:12]}"


def load_or_train_analyst(
    lm: LM, config: AnalystConfig | None = None, progress: bool = True, log=print
) -> LM:
    """`lm` after the analyst warm start, cached per input weights and config."""
    config = config or AnalystConfig()
    path = analyst_path(lm, config)
    if (path / "config.json").is_file():
        log(f"analyst warm start: loading cached {path}")
        return LM.load(path)
    train_analyst(lm, config, progress=progress, log=log)
    lm.save(path)
    return lm
