"""Trainer callbacks: what plugs into the PPO loop without the loop branching on it.

The hooks follow one round (stable-baselines3's `BaseCallback` is the model):
``draw_tasks`` (who picks the round's tasks) -> ``on_collect_start`` (reset options) -> episodes ->
``on_rollout_end`` (the buffer is built; skills and extra targets attach here) -> each update epoch
-> ``on_epoch_end`` (extra optimizer steps) -> ``on_iteration_end`` (the logged row).
`callbacks_for(config)` gives the ones a `PPOConfig` asks for; a user passes more to `PPOTrainer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rehearsal_gym.core.batching import pad_masked
from rehearsal_gym.core.rollout import Episode
from rehearsal_gym.core.sampling import token_logprobs

from .buffer import Role, RoleSequence, RolloutBuffer, grounding_sequences
from .curriculum import draw_tasks
from .losses import grounding_loss

if TYPE_CHECKING:
    from .config import PPOConfig
    from .ppo import PPOTrainer


class TrainerCallback:
    """Base class: every hook does nothing."""

    def draw_tasks(self, trainer: PPOTrainer, n: int) -> list[int] | None:
        """The round's `n` train task indices, or None to leave the draw to the next callback
        (and, if none draws, uniformly at random)."""
        return None

    def on_collect_start(self, trainer: PPOTrainer, options: list[dict[str, Any]]) -> None:
        """Edit the reset options of the round's episodes (one dict per episode) in place."""

    def on_rollout_end(
        self, trainer: PPOTrainer, episodes: list[Episode], groups: list[int], buffer: RolloutBuffer
    ) -> dict[str, float]:
        """After the round's episodes are in `buffer`; returns scalars for the logged row."""
        return {}

    def on_epoch_end(self, trainer: PPOTrainer, stats: dict[str, list[float]]) -> None:
        """After each update epoch that was not stopped by target_kl; append logged values to `stats`."""

    def on_iteration_end(self, trainer: PPOTrainer, row: dict[str, float]) -> None:
        """Add to (or read) the round's logged row."""


def _agent_sequences(buffer: RolloutBuffer) -> list[RoleSequence]:
    """The agent-role sequences: one per episode, in the round's episode order."""
    return [sq for sq in buffer.seqs if sq.role == Role.AGENT]


class TemplateCurriculumCallback(TrainerCallback):
    """Draws each round's tasks template first, weighted by the template's success variance
    (`agents.curriculum`), and folds the round's outcomes in."""

    def draw_tasks(self, trainer: PPOTrainer, n: int) -> list[int]:
        return draw_tasks(trainer.family, trainer.rng, n, trainer.curriculum.weights())

    def on_rollout_end(self, trainer, episodes, groups, buffer) -> dict[str, float]:
        trainer.curriculum.update([ep.template for ep in episodes], [ep.success for ep in episodes])
        return {}

    def on_iteration_end(self, trainer: PPOTrainer, row: dict[str, float]) -> None:
        curriculum = trainer.curriculum  # each template's share of the next round
        for t, w in zip(curriculum.templates, curriculum.weights(), strict=True):
            row[f"curriculum/{t}"] = float(w)


class OracleSkillHints(TrainerCallback):
    """SEED with a privileged skill source: the env's oracle hint for each task (info["hint"])."""

    def on_rollout_end(self, trainer, episodes, groups, buffer) -> dict[str, float]:
        for sq, opts in zip(_agent_sequences(buffer), trainer.last_options, strict=True):
            sq.skill_ids = trainer.lm.turn("skill", trainer._hint(opts))
        return {}


class SelfEvolvingSkills(TrainerCallback):
    """SEED: the policy analyses its own episodes into a skill library; the library's best skill
    for a task's template is echoed in the reset options and becomes the teacher's hint."""

    def on_collect_start(self, trainer: PPOTrainer, options: list[dict[str, Any]]) -> None:
        for opts in options:  # echoed in info["skill"]
            skill = trainer.library.best(trainer.family.name, trainer._task(opts).template)
            if skill is not None:
                opts["skill"] = skill.hint()

    def on_rollout_end(self, trainer, episodes, groups, buffer) -> dict[str, float]:
        extra = self.analyse(trainer, episodes, groups)
        family = trainer.family.name
        for sq, ep in zip(_agent_sequences(buffer), episodes, strict=True):
            skill = trainer.library.best(family, ep.template)
            sq.skill_ids = trainer.lm.turn("skill", skill.hint()) if skill else None
        extra["charts/library_size"] = float(len(trainer.library))
        return extra

    @staticmethod
    def analyse(trainer: PPOTrainer, episodes: list[Episode], groups: list[int]) -> dict[str, float]:
        """The policy analyses one episode per task group (a success if the group has one); the
        skills go to the library under the task's family and template."""
        from rehearsal_gym.training.analyst import analyse

        chosen: dict[int, int] = {}
        for i, (ep, g) in enumerate(zip(episodes, groups, strict=True)):
            if g not in chosen or (ep.success and not episodes[chosen[g]].success):
                chosen[g] = i
        picked = list(chosen.values())[: trainer.config.skills.analyses_per_iter]
        requests = [trainer._task(trainer.last_options[i]).prompt for i in picked]
        skills = analyse(trainer.lm, requests, [episodes[i] for i in picked])
        for i, skill in zip(picked, skills, strict=True):
            if skill is not None:
                trainer.library.add(trainer.family.name, episodes[i].template, skill, episodes[i].success)
        return {"charts/valid_skills": float(np.mean([s is not None for s in skills])) if skills else 0.0}


class Grounding(TrainerCallback):
    """EnvACE grounding (wrap mode): after each update epoch, `coef` * the NLL of the real results
    under the environment role, on the round's calls that were imagined and also run for real."""

    def __init__(self, coef: float) -> None:
        self.coef = coef
        self.targets: list[RoleSequence] = []

    def on_rollout_end(self, trainer, episodes, groups, buffer) -> dict[str, float]:
        self.targets = grounding_sequences(episodes, trainer.lm)
        return {}

    def on_epoch_end(self, trainer: PPOTrainer, stats: dict[str, list[float]]) -> None:
        size = trainer.config.ppo.minibatch_size
        for start in range(0, len(self.targets), size):
            stats["grounding_loss"].append(self.step(trainer, self.targets[start : start + size]))

    def on_iteration_end(self, trainer: PPOTrainer, row: dict[str, float]) -> None:
        row["charts/grounding_targets"] = float(len(self.targets))

    @staticmethod
    def batch_loss(trainer: PPOTrainer, batch: list[RoleSequence]) -> torch.Tensor:
        """NLL of the real results in `batch` under the current env role (teacher forcing)."""
        ids, attn, mask = pad_masked([s.ids for s in batch], [s.mask for s in batch], trainer.lm.pad_id)
        ids, attn, mask = ids.to(trainer.lm.device), attn.to(trainer.lm.device), mask.to(trainer.lm.device)
        logits = trainer.lm.model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        return grounding_loss(token_logprobs(logits, ids[:, 1:]), mask[:, 1:])

    def step(self, trainer: PPOTrainer, batch: list[RoleSequence]) -> float:
        """One optimizer step on `coef` * the grounding NLL of `batch`."""
        loss = self.batch_loss(trainer, batch)
        trainer.check_finite(loss, "grounding loss")
        trainer.opt.zero_grad(set_to_none=True)
        (self.coef * loss).backward()
        torch.nn.utils.clip_grad_norm_(trainer.lm.model.parameters(), trainer.config.ppo.max_grad_norm)
        trainer.opt.step()
        return loss.item()


class RehearsalStats(TrainerCallback):
    """Logs what rehearsed rounds report per call: premise redraws, and in wrap mode the imagined
    results' field accuracy against the real tool."""

    def __init__(self, premise: bool, fidelity: bool) -> None:
        self.premise, self.fidelity = premise, fidelity
        self.episodes: list[Episode] = []

    def on_rollout_end(self, trainer, episodes, groups, buffer) -> dict[str, float]:
        self.episodes = episodes
        return {}

    def on_iteration_end(self, trainer: PPOTrainer, row: dict[str, float]) -> None:
        if self.premise:
            row["charts/premise_kept"] = _mean_info(self.episodes, "premise_kept")
            row["charts/premise_redraws"] = _mean_info(self.episodes, "premise_redraws")
        if self.fidelity:
            scores = [
                i["fidelity"]["field_accuracy"] for ep in self.episodes for i in ep.infos if "fidelity" in i
            ]
            row["charts/fidelity"] = float(np.mean(scores)) if scores else float("nan")
        self.episodes = []


def _mean_info(episodes: list[Episode], key: str) -> float:
    """Mean of a per-call info value over the round's episodes; NaN if no call reported it."""
    values = [float(info[key]) for ep in episodes for info in ep.infos if key in info]
    return float(np.mean(values)) if values else float("nan")


def callbacks_for(config: PPOConfig) -> list[TrainerCallback]:
    """The callbacks a config asks for, in the order their hooks run."""
    out: list[TrainerCallback] = []
    rehearsal = config.rehearsal
    if config.task_sampling == "template-variance":
        out.append(TemplateCurriculumCallback())
    if config.skills.skill_hints:
        out.append(OracleSkillHints())
    if config.skills.seed_distill:
        out.append(SelfEvolvingSkills())
    if rehearsal.grounding_coef:
        out.append(Grounding(rehearsal.grounding_coef))
    if rehearsal.rehearse != "off" and (rehearsal.premise_redraws or rehearsal.rehearse == "wrap"):
        out.append(
            RehearsalStats(premise=bool(rehearsal.premise_redraws), fidelity=rehearsal.rehearse == "wrap")
        )
    return out
