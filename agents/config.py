"""PPOConfig: what to train on at the top, then one section per concern (each fits on a screen).

Field types carry their checks (`rehearsal_gym.core.checks`); `__post_init__` holds only the rules
between fields. The CLI's ``train`` options are generated from these fields and their comments
(`rehearsal_gym.cli.options`), one flag per field under its own name (``--kl-coef``), so a new
option is one field here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rehearsal_gym.core.checks import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    UnitFloat,
    validate,
)


@dataclass(frozen=True)
class PPOSection:
    """The PPO update: minibatch epochs of the clipped surrogate, KL to a frozen reference, entropy."""

    epochs: PositiveInt = 2  # passes over each round's sequences
    minibatch_size: PositiveInt = 8  # sequences per optimizer step
    lr: PositiveFloat = 2e-5  # AdamW learning rate (a tiny model drifts fast: keep it small)
    # linear learning-rate warm-up over the first iterations (Adam's first steps are its largest)
    warmup_iterations: NonNegativeInt = 0
    clip: PositiveFloat = 0.2  # PPO ratio clip
    # stop an iteration's updates once approx KL(sampling policy || policy) on a minibatch exceeds
    # 1.5 * target_kl, before that minibatch's step (stable-baselines3's rule; the round's grounding
    # steps stop too); 0 = off
    target_kl: NonNegativeFloat = 0.0
    kl_coef: NonNegativeFloat = 0.01  # KL(policy || frozen reference) coefficient (SEED's reference value)
    # cap on each token's k3 KL term (verl's low_var_kl: 10); without it one token whose probability
    # fell far below the reference's takes a whole step (losses.kl_to_reference); 0 = no cap
    kl_clamp: NonNegativeFloat = 0.0
    ent_coef: NonNegativeFloat = 0.0  # entropy bonus
    max_grad_norm: PositiveFloat = 1.0  # gradient clipping
    temperature: PositiveFloat = 1.0  # sampling temperature of both roles
    advantage: Literal["group", "gae"] = (
        "group"  # "group" (GRPO-style baseline per task and role) or "gae" (value head)
    )
    scale_advantages: bool = False  # group mode: divide by the group's reward std (GRPO)
    # "token" (token-mean per minibatch) or "sequence" (mean of sequence means)
    loss_reduction: Literal["token", "sequence"] = "token"
    group_minibatches: bool = False  # keep each task group's sequences in one minibatch
    negative_weight: NonNegativeFloat = (
        1.0  # scale of negative advantages (1 = PPO; 0 = only reinforce successes)
    )
    gamma: NonNegativeFloat = 1.0  # GAE discount over a role's tokens
    lam: NonNegativeFloat = 0.95  # GAE lambda
    vf_coef: NonNegativeFloat = 0.5  # value loss weight (gae only)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass: less memory, slower
    # > 0: train LoRA adapters of this rank, not every weight (pip install 'rehearsal-gym[lora]');
    # the KL reference is then the base model with the adapter disabled, not a second copy
    lora_rank: NonNegativeInt = 0

    def __post_init__(self) -> None:
        validate(self, "PPOConfig.ppo")


@dataclass(frozen=True)
class RehearsalSection:
    """Rehearsed rounds: SelfSimEnv in place of the real env, and who plays the world."""

    # "off" = real env; else the SelfSimEnv mode ("replace", "wrap", "mixed")
    rehearse: Literal["off", "replace", "wrap", "mixed"] = "off"
    # SelfSimEnv verifier: "real" or "consistent" (world the agent saw)
    rehearsal_verifier: Literal["real", "consistent"] = "real"
    # who imagines tool results: "policy" (EnvACE: the policy in training) or "frozen" (reference)
    rehearsal_world: Literal["policy", "frozen"] = "policy"
    # rehearsed: a task group's episodes share one imagined world (SelfSimEnv world_seed), so the
    # group baseline compares samples answered alike, as real tools answer them
    shared_worlds: bool = True
    # rehearsed: draw an imagined result again (up to n times) when it drops a record the request
    # names that the task's real world holds (SelfSimEnv premise_redraws); 0 = off
    premise_redraws: NonNegativeInt = 0
    # sampling temperature of the environment role when it is not trained (frozen world, or
    # train_env_role=False); 0 = `temperature`. A cooler world writes fewer unusable results but
    # shows fewer distinct values (a rare real value may never appear)
    world_temperature: NonNegativeFloat = 0.0
    # local model directory of the frozen world (rehearsal_world="frozen"); "" = the frozen reference.
    # A world grounded on real results (`rehearsal-gym ground-world`) shows the values the real tool
    # returns as often as it does; the policy still starts from, and is held near, its own reference
    world_model: str = ""
    train_env_role: bool = True  # EnvACE: also train the environment-role tokens (SelfSim only)
    grounding_coef: NonNegativeFloat = (
        0.0  # EnvACE grounding: NLL of the real result for the env role (wrap mode)
    )
    # ECHO: weight of the NLL of real tool-result tokens in the agent's own conversations (the same
    # weights and forward pass as the policy loss), real and mixed rounds; 0 = off
    world_loss_coef: NonNegativeFloat = 0.0

    def __post_init__(self) -> None:
        validate(self, "PPOConfig.rehearsal")


@dataclass(frozen=True)
class SkillSection:
    """SEED: skills as a hint before the conversation, distilled into the policy (OPD loss)."""

    skill_hints: bool = (
        False  # SEED re-scoring with the env's oracle hint as the skill (info["hint"] channel)
    )
    seed_distill: bool = False  # SEED: the policy analyses its own episodes into a skill library
    analyses_per_iter: PositiveInt = 8  # episodes analysed per round (one per task group, successes first)
    lambda_opd: NonNegativeFloat = 0.01  # weight of SEED's on-policy distillation loss
    opd_beta: NonNegativeFloat = 5.0  # SEED gate sharpness

    def __post_init__(self) -> None:
        validate(self, "PPOConfig.skills")


@dataclass(frozen=True)
class RolloutSection:
    """Where episodes are sampled."""

    # 0: roll out in this process; N: on N Ray actors (pip install rehearsal-gym[ray])
    rollout_workers: NonNegativeInt = 0
    # "" starts a local Ray cluster; else an existing cluster's address ("auto", "ray://h:10001")
    ray_address: str = ""
    rollout_timeout_s: PositiveFloat = 600.0  # a worker silent this long is replaced and its episodes re-run
    # GPU share of each Ray actor (0.25: four actors per GPU); > 0 puts each worker's model on CUDA
    worker_gpus: UnitFloat = 0.0

    def __post_init__(self) -> None:
        validate(self, "PPOConfig.rollout")


SECTIONS = {
    "ppo": PPOSection,
    "rehearsal": RehearsalSection,
    "skills": SkillSection,
    "rollout": RolloutSection,
}


@dataclass(frozen=True)
class PPOConfig:
    """Token-level PPO with group baselines (one group per task and role, as EnvACE)."""

    env: str = "ToolCall-v0"  # id of a registered tool env whose train split gives the tasks
    iterations: PositiveInt = 20  # collect/update rounds
    tasks_per_iter: PositiveInt = 8  # distinct train tasks per round
    group_size: PositiveInt = 4  # episodes per task (the group baseline averages over them)
    max_turns: PositiveInt = 6  # env turn limit
    # "uniform" over train tasks, or "template-variance": a template curriculum that weights each
    # template by p(1 - p) of its recent train success + curriculum_floor (agents/curriculum.py)
    task_sampling: Literal["uniform", "template-variance"] = "uniform"
    curriculum_floor: PositiveFloat = (
        0.02  # template-variance: weight added to every template, so none starves
    )
    seed: int = 0  # task draw, sampling, minibatch order
    ppo: PPOSection = field(default_factory=PPOSection)
    rehearsal: RehearsalSection = field(default_factory=RehearsalSection)
    skills: SkillSection = field(default_factory=SkillSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)

    def __post_init__(self) -> None:
        validate(self)
        r = self.rehearsal
        rehearsed = r.rehearse != "off"
        if r.rehearsal_world == "frozen" and r.train_env_role and rehearsed:
            raise ValueError(
                "PPOConfig.rehearsal_world='frozen' imagines results with the frozen reference, so its "
                "environment-role tokens are not the policy's samples and cannot be trained on-policy: "
                "set train_env_role=False (--no-train-env-role)"
            )
        if r.rehearsal_world == "frozen" and self.rollout.rollout_workers and rehearsed:
            raise ValueError(
                "PPOConfig.rehearsal_world='frozen' runs in-process only (rollout_workers=0): Ray workers "
                "hold the policy's weights, not the reference's"
            )
        if r.world_model:
            if r.rehearsal_world != "frozen" or not rehearsed:
                raise ValueError(
                    "PPOConfig.world_model is the frozen world's model: it needs rehearse != 'off' and "
                    f"rehearsal_world='frozen', got rehearse={r.rehearse!r}, "
                    f"rehearsal_world={r.rehearsal_world!r}"
                )
            if not (Path(r.world_model) / "config.json").is_file():
                raise ValueError(
                    f"PPOConfig.world_model {r.world_model!r} is not a model directory (no config.json)"
                )
        if r.grounding_coef and r.rehearse != "wrap":
            raise ValueError(
                "PPOConfig.grounding_coef needs rehearse='wrap' (the only mode where a call has both an "
                f"imagined and a real result), got rehearse={r.rehearse!r}"
            )
        if self.skills.skill_hints and self.skills.seed_distill:
            raise ValueError(
                "PPOConfig.skill_hints and PPOConfig.seed_distill are exclusive: pick one skill source"
            )
        if r.world_temperature and r.train_env_role and rehearsed:
            raise ValueError(
                "PPOConfig.world_temperature samples the environment role at another temperature than "
                "the one its log-probs are trained at: it needs train_env_role=False (--no-train-env-role)"
            )

    @classmethod
    def from_flat(cls, **options: Any) -> PPOConfig:
        """A config from flat options, each named as its field in whichever section holds it
        (``PPOConfig.from_flat(lr=1e-3, rehearse="replace")``): the CLI's flags, as keywords."""
        top = {f.name for f in dataclasses.fields(cls)} - set(SECTIONS)
        owner = {f.name: s for s, kind in SECTIONS.items() for f in dataclasses.fields(kind)}
        unknown = sorted(set(options) - top - set(owner))
        if unknown:
            raise ValueError(f"PPOConfig has no option {', '.join(unknown)}")
        sections = {s: {} for s in SECTIONS}
        for name, value in options.items():
            if name in owner:
                sections[owner[name]][name] = value
        return cls(
            **{k: v for k, v in options.items() if k in top},
            **{s: SECTIONS[s](**kw) for s, kw in sections.items()},
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PPOConfig:
        """The inverse of `dataclasses.asdict`; flat dicts (checkpoints of schema 2) are read too."""
        if not any(isinstance(data.get(s), dict) for s in SECTIONS):
            return cls.from_flat(**data)
        return cls(**{k: SECTIONS[k](**v) if k in SECTIONS else v for k, v in data.items()})

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name (the inverse of `from_flat`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in SECTIONS}
        for s in SECTIONS:
            out.update(dataclasses.asdict(getattr(self, s)))
        return out
