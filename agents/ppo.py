"""Token-level PPO for a causal-LM policy, with EnvACE's two roles trained on one reward.

The loop reads top to bottom (CleanRL style): collect episodes -> build per-role sequences with the
exact sampled token ids -> advantages -> minibatch epochs of the clipped surrogate, KL to a frozen
reference and entropy -> log -> atomic checkpoint. When the env is SelfSimEnv, the environment
role's tokens (recorded in ``info["env_role"]``) are trained on the same episode reward with their
own group baseline.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors.torch import load_model, save_model

from rehearsal_gym.atomic import atomic_directory, recover
from rehearsal_gym.model import LM
from rehearsal_gym.rollout import Episode, run_episodes
from rehearsal_gym.sampling import token_logprobs
from rehearsal_gym.selfsim import VERIFIERS
from rehearsal_gym.skills import SkillLibrary

from .curriculum import TASK_SAMPLINGS, TemplateCurriculum, draw_tasks
from .losses import (
    REDUCTIONS,
    approx_kl,
    entropy,
    grounding_loss,
    group_advantages,
    kl_to_reference,
    masked_mean,
    opd_loss,
    policy_loss,
    token_gae,
    token_kl,
    value_loss,
    weight_negative,
)

CHECKPOINT_SCHEMA = 2
REHEARSE_MODES = ("off", "replace", "wrap", "mixed")
REHEARSAL_WORLDS = ("policy", "frozen")
ADVANTAGES = ("group", "gae")


@dataclass(frozen=True)
class PPOConfig:
    """Token-level PPO with group baselines (one group per task and role, as EnvACE)."""

    env: str = "ToolCall-v0"  # real env id whose train split gives the tasks
    rehearse: str = "off"  # "off" = real env; else the SelfSimEnv mode ("replace", "wrap", "mixed")
    rehearsal_verifier: str = "real"  # SelfSimEnv verifier: "real" or "consistent" (world the agent saw)
    rehearsal_world: str = "policy"  # who imagines tool results: "policy" (EnvACE: the policy in training) or "frozen" (reference)
    # rehearsed: a task group's episodes share one imagined world (SelfSimEnv world_seed), so the
    # group baseline compares samples answered alike, as real tools answer them
    shared_worlds: bool = True
    # rehearsed: draw an imagined result again (up to n times) when it drops a record the request
    # names that the task's real world holds (SelfSimEnv premise_redraws); 0 = off
    premise_redraws: int = 0
    iterations: int = 20  # collect/update rounds
    tasks_per_iter: int = 8  # distinct train tasks per round
    group_size: int = 4  # episodes per task (the group baseline averages over them)
    # "uniform" over train tasks, or "template-variance": a template curriculum that weights each
    # template by p(1 - p) of its recent train success + curriculum_floor (agents/curriculum.py)
    task_sampling: str = "uniform"
    curriculum_floor: float = 0.02  # template-variance: weight added to every template, so none starves
    epochs: int = 2  # passes over each round's sequences
    minibatch_size: int = 8  # sequences per optimizer step
    lr: float = 2e-5  # AdamW learning rate (a tiny model drifts fast: keep it small)
    # linear learning-rate warm-up over the first iterations (Adam's first steps are its largest)
    warmup_iterations: int = 0
    clip: float = 0.2  # PPO ratio clip
    # stop an iteration's updates once approx KL(sampling policy || policy) on a minibatch exceeds
    # 1.5 * target_kl, before that minibatch's step (stable-baselines3's rule; the round's grounding
    # steps stop too); 0 = off
    target_kl: float = 0.0
    kl_coef: float = 0.01  # KL(policy || frozen reference) coefficient (SEED's reference value)
    # cap on each token's k3 KL term (verl's low_var_kl: 10); without it one token whose probability
    # fell far below the reference's takes a whole step (losses.kl_to_reference); 0 = no cap
    kl_clamp: float = 0.0
    ent_coef: float = 0.0  # entropy bonus
    max_grad_norm: float = 1.0  # gradient clipping
    temperature: float = 1.0  # sampling temperature of both roles
    # sampling temperature of the environment role when it is not trained (frozen world, or
    # train_env_role=False); 0 = `temperature`. A cooler world writes fewer unusable results but
    # shows fewer distinct values (a rare real value may never appear)
    world_temperature: float = 0.0
    # local model directory of the frozen world (rehearsal_world="frozen"); "" = the frozen reference.
    # A world grounded on real results (`rehearsal-gym ground-world`) shows the values the real tool
    # returns as often as it does; the policy still starts from, and is held near, its own reference
    world_model: str = ""
    skill_hints: bool = (
        False  # SEED re-scoring with the env's oracle hint as the skill (info["hint"] channel)
    )
    seed_distill: bool = False  # SEED: the policy analyses its own episodes into a skill library
    analyses_per_iter: int = 8  # episodes analysed per round (one per task group, successes first)
    lambda_opd: float = 0.01  # weight of SEED's on-policy distillation loss
    opd_beta: float = 5.0  # SEED gate sharpness
    train_env_role: bool = True  # EnvACE: also train the environment-role tokens (SelfSim only)
    grounding_coef: float = 0.0  # EnvACE grounding: NLL of the real result for the env role (wrap mode)
    advantage: str = "group"  # "group" (GRPO-style baseline per task and role) or "gae" (value head)
    scale_advantages: bool = False  # group mode: divide by the group's reward std (GRPO)
    loss_reduction: str = "token"  # "token" (token-mean per minibatch) or "sequence" (mean of sequence means)
    group_minibatches: bool = False  # keep each task group's sequences in one minibatch
    negative_weight: float = 1.0  # scale of negative advantages (1 = PPO; 0 = only reinforce successes)
    gamma: float = 1.0  # GAE discount over a role's tokens
    lam: float = 0.95  # GAE lambda
    vf_coef: float = 0.5  # value loss weight (gae only)
    max_turns: int = 6  # env turn limit
    # 0: roll out in this process; N: on N Ray actors (pip install rehearsal-gym[ray])
    rollout_workers: int = 0
    # "" starts a local Ray cluster; else an existing cluster's address ("auto", "ray://h:10001")
    ray_address: str = ""
    rollout_timeout_s: float = 600.0  # a worker silent this long is replaced and its episodes re-run
    seed: int = 0  # task draw, sampling, minibatch order

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"PPOConfig.advantage must be one of {ADVANTAGES}, got {self.advantage!r}")
        if self.loss_reduction not in REDUCTIONS:
            raise ValueError(
                f"PPOConfig.loss_reduction must be one of {REDUCTIONS}, got {self.loss_reduction!r}"
            )
        if self.task_sampling not in TASK_SAMPLINGS:
            raise ValueError(
                f"PPOConfig.task_sampling must be one of {TASK_SAMPLINGS}, got {self.task_sampling!r}"
            )
        if self.rehearse not in REHEARSE_MODES:
            raise ValueError(f"PPOConfig.rehearse must be one of {REHEARSE_MODES}, got {self.rehearse!r}")
        if self.rehearsal_verifier not in VERIFIERS:
            raise ValueError(
                f"PPOConfig.rehearsal_verifier must be one of {VERIFIERS}, got {self.rehearsal_verifier!r}"
            )
        if self.rehearsal_world not in REHEARSAL_WORLDS:
            raise ValueError(
                f"PPOConfig.rehearsal_world must be one of {REHEARSAL_WORLDS}, got {self.rehearsal_world!r}"
            )
        if self.rehearsal_world == "frozen" and self.train_env_role and self.rehearse != "off":
            raise ValueError(
                "PPOConfig.rehearsal_world='frozen' imagines results with the frozen reference, so its "
                "environment-role tokens are not the policy's samples and cannot be trained on-policy: "
                "set train_env_role=False (--no-train-env-role)"
            )
        if self.rehearsal_world == "frozen" and self.rollout_workers and self.rehearse != "off":
            raise ValueError(
                "PPOConfig.rehearsal_world='frozen' runs in-process only (rollout_workers=0): Ray workers "
                "hold the policy's weights, not the reference's"
            )
        if self.world_model:
            if self.rehearsal_world != "frozen" or self.rehearse == "off":
                raise ValueError(
                    "PPOConfig.world_model is the frozen world's model: it needs rehearse != 'off' and "
                    f"rehearsal_world='frozen', got rehearse={self.rehearse!r}, "
                    f"rehearsal_world={self.rehearsal_world!r}"
                )
            if not (Path(self.world_model) / "config.json").is_file():
                raise ValueError(
                    f"PPOConfig.world_model {self.world_model!r} is not a model directory (no config.json)"
                )
        if self.grounding_coef and self.rehearse != "wrap":
            raise ValueError(
                "PPOConfig.grounding_coef needs rehearse='wrap' (the only mode where a call has both an "
                f"imagined and a real result), got rehearse={self.rehearse!r}"
            )
        if self.skill_hints and self.seed_distill:
            raise ValueError(
                "PPOConfig.skill_hints and PPOConfig.seed_distill are exclusive: pick one skill source"
            )
        for name in (
            "iterations",
            "tasks_per_iter",
            "group_size",
            "epochs",
            "minibatch_size",
            "max_turns",
            "analyses_per_iter",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"PPOConfig.{name} must be a positive int, got {getattr(self, name)!r}")
        if not isinstance(self.warmup_iterations, int) or self.warmup_iterations < 0:
            raise ValueError(
                f"PPOConfig.warmup_iterations must be an int >= 0, got {self.warmup_iterations!r}"
            )
        for name in ("rollout_workers", "premise_redraws"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"PPOConfig.{name} must be an int >= 0, got {value!r}")
        for name in ("lr", "clip", "temperature", "max_grad_norm", "rollout_timeout_s", "curriculum_floor"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"PPOConfig.{name} must be a positive finite number, got {value!r}")
        for name in (
            "kl_coef",
            "ent_coef",
            "lambda_opd",
            "opd_beta",
            "vf_coef",
            "negative_weight",
            "grounding_coef",
            "target_kl",
            "kl_clamp",
            "world_temperature",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"PPOConfig.{name} must be a finite number >= 0, got {value!r}")
        if self.world_temperature and self.train_env_role and self.rehearse != "off":
            raise ValueError(
                "PPOConfig.world_temperature samples the environment role at another temperature than "
                "the one its log-probs are trained at: it needs train_env_role=False (--no-train-env-role)"
            )


@dataclass
class RoleSequence:
    """One role's tokens of one episode: ids exactly as sampled, mask of that role's tokens."""

    ids: list[int]
    mask: list[int]
    old_logprobs: list[float]
    reward: float
    group: int  # task index * 2 + role (0 agent, 1 environment)
    advantage: float = 0.0  # group mode: one advantage for all the role's tokens
    token_advantages: list[float] | None = None  # gae mode: per target token (len(ids) - 1)
    returns: list[float] | None = None
    old_values: list[float] | None = None
    skill_ids: list[int] | None = None  # skill turn inserted before the conversation (SEED teacher)


def role_sequences(episodes: list[Episode], groups: list[int], train_env_role: bool) -> list[RoleSequence]:
    """Agent-role sequences and (for SelfSim episodes) environment-role sequences."""
    out = []
    for ep, g in zip(episodes, groups, strict=True):
        out.append(RoleSequence(list(ep.ids), list(ep.agent_mask), list(ep.logprobs), ep.reward, 2 * g))
        if not train_env_role:
            continue
        for info in ep.infos:
            role = info.get("env_role")
            if role and role["ids"]:
                prompt, ids = role["prompt_ids"], role["ids"]
                out.append(
                    RoleSequence(
                        prompt + ids,
                        [0] * len(prompt) + [1] * len(ids),
                        [0.0] * len(prompt) + role["logprobs"],
                        ep.reward,
                        2 * g + 1,
                    )
                )
    return out


def grounding_sequences(episodes: list[Episode], lm: LM) -> list[RoleSequence]:
    """EnvACE grounding targets: for each call that was imagined and also run for real (wrap mode),
    the environment role's prompt followed by the *real* result, masked to the result tokens."""
    from rehearsal_gym.envs.base import result_text

    out = []
    for ep in episodes:
        for info in ep.infos:
            role, real = info.get("env_role"), info.get("real_result")
            if not role or real is None:
                continue
            prompt = list(role["prompt_ids"])
            target = lm.encode(result_text(real)) + [lm.end_id]
            if len(prompt) + len(target) > lm.max_len:
                continue  # never cut silently: an overlong target is skipped
            out.append(RoleSequence(prompt + target, [0] * len(prompt) + [1] * len(target), [], 0.0, -1))
    return out


class ValueHead(torch.nn.Module):
    """Scalar value of each position from the LM's last hidden state (zero-initialised)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


class NonFiniteLossError(FloatingPointError):
    """Raised when a loss is NaN or infinite; the last checkpoint on disk stays the good one."""


class PPOTrainer:
    """Trains `lm` with token-level PPO on `config.env` (real or rehearsed)."""

    def __init__(self, config: PPOConfig, lm: LM) -> None:
        self.config, self.lm = config, lm
        self.ref = copy.deepcopy(lm.model).eval()
        for p in self.ref.parameters():
            p.requires_grad_(False)
        self.value_head = ValueHead(lm.model.config.hidden_size)
        self.opt = torch.optim.AdamW([*lm.model.parameters(), *self.value_head.parameters()], lr=config.lr)
        self.rng = np.random.default_rng(config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.iteration = 0
        self.history: list[dict[str, float]] = []
        self.library = SkillLibrary()
        # the learner's own view of the tasks (family, prompts, oracle hints); never stepped in training
        self.probe = gym.make(config.env, split="train", max_turns=config.max_turns).unwrapped
        self.family = self.probe.family
        self.curriculum = TemplateCurriculum(tuple(self.family.templates), floor=config.curriculum_floor)
        if config.rollout_workers:  # rollouts on Ray actors, each with its own envs and weights
            from .distributed import RayRollouts

            self.envs: list[gym.Env] = []
            self.rollouts = RayRollouts(config, lm)
        else:
            # a frozen world shares the reference module: a resumed trainer loads its weights in place
            world = LM(self.ref, lm.tokenizer) if config.rehearsal_world == "frozen" else lm
            if config.world_model and config.rehearse != "off":
                world = load_world(config.world_model, lm)
            self.envs = make_train_envs(config, world, config.tasks_per_iter * config.group_size)
            self.rollouts = None
        self.last_versions: list[int] = []  # policy version each episode of the last round was sampled with

    def _task(self, options: dict) -> Any:
        return self.family.task("train", options["task_index"])

    def _hint(self, options: dict) -> str:
        """The env's oracle hint for a train task (the info["hint"] channel), computed learner-side."""
        self.probe.reset(options={"task_index": options["task_index"]})
        return self.probe.hint()

    # -- rollout --------------------------------------------------------------------------------
    def collect(self) -> tuple[list[Episode], list[int]]:
        """`group_size` sampled episodes on each of `tasks_per_iter` random train tasks."""
        if self.config.task_sampling == "template-variance":
            weights = self.curriculum.weights()
            tasks = draw_tasks(self.family, self.rng, self.config.tasks_per_iter, weights)
        else:
            tasks = self.rng.integers(0, 2**31 - 1, self.config.tasks_per_iter)
        groups = [i for i in range(len(tasks)) for _ in range(self.config.group_size)]
        options = [{"task_index": int(tasks[g])} for g in groups]
        if self.config.seed_distill:  # the library's skill for each task, echoed in info["skill"]
            for opts in options:
                skill = self.library.best(self.family.name, self._task(opts).template)
                if skill is not None:
                    opts["skill"] = skill.hint()
        self.last_options = options
        self.lm.model.eval()
        seed = int(self.rng.integers(2**31 - 1))
        if self.config.shared_worlds and self.config.rehearse != "off":
            # one imagined world per task group: the group baseline compares samples that were
            # answered alike for the same call (as the real tools would answer them), not samples
            # that met different imagined results
            for opts, g in zip(options, groups, strict=True):
                opts["world_seed"] = int(
                    np.random.SeedSequence([seed, g]).generate_state(1, np.uint64)[0] >> 1
                )
        if self.rollouts is not None:
            self.rollouts.sync(self.iteration, self.lm.model.state_dict())
            episodes, versions = self.rollouts.collect(options, seed)
            if set(versions) != {self.iteration}:  # never train on another policy version's samples
                raise RuntimeError(
                    f"rollouts came from policy versions {sorted(set(versions))}, not {self.iteration}"
                )
        else:
            episodes = run_episodes(
                self.lm,
                self.envs,
                options,
                greedy=False,
                temperature=self.config.temperature,
                generator=self.generator,
                seed=seed,
            )
            versions = [self.iteration] * len(episodes)
        self.last_versions = versions
        return episodes, groups

    # -- update ---------------------------------------------------------------------------------
    def _forward(self, ids: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting each next token and the value at the same positions."""
        out = self.lm.model(input_ids=ids, attention_mask=attn, output_hidden_states=True)
        return out.logits[:, :-1], self.value_head(out.hidden_states[-1][:, :-1])

    def advantages(self, seqs: list[RoleSequence]) -> None:
        """Fill each sequence's per-target advantages (and returns and old values for GAE)."""
        if self.config.advantage == "group":
            adv = group_advantages(
                torch.tensor([s.reward for s in seqs]),
                torch.tensor([s.group for s in seqs]),
                scale=self.config.scale_advantages,
            )
            for s, a in zip(seqs, adv.tolist(), strict=True):
                s.advantage = a
            return
        with torch.no_grad():  # GAE: reward at the role's last token, values from the value head
            for s in seqs:
                ids = torch.tensor([s.ids])
                _, values = self._forward(ids, torch.ones_like(ids))
                mask = torch.tensor([s.mask[1:]])
                rewards = torch.zeros_like(values)
                targets = mask[0].nonzero()
                if len(targets):
                    rewards[0, targets[-1, 0]] = s.reward
                adv, ret = token_gae(rewards, values, mask, self.config.gamma, self.config.lam)
                s.token_advantages, s.returns, s.old_values = (
                    adv[0].tolist(),
                    ret[0].tolist(),
                    values[0].tolist(),
                )

    @torch.no_grad()
    def _teacher_logprobs(self, batch: list[RoleSequence], shape: torch.Size) -> torch.Tensor:
        """SEED teacher: the same sampled tokens scored with the skill turn before the conversation,
        aligned with the student's targets (zeros where a sequence has no skill)."""
        out = torch.zeros(shape)
        for i, sq in enumerate(batch):
            if not sq.skill_ids:
                continue
            ids = torch.tensor([sq.skill_ids + sq.ids])
            logits = self.lm.model(input_ids=ids).logits[:, :-1]
            lp = token_logprobs(logits, ids[:, 1:], self.config.temperature)[0]
            n = len(sq.skill_ids)
            out[i, : len(sq.ids) - 1] = lp[n : n + len(sq.ids) - 1]
        return out

    def update(
        self, seqs: list[RoleSequence], grounding: list[RoleSequence] | None = None
    ) -> dict[str, float]:
        """Minibatch epochs of clipped surrogate + KL (- entropy, + value loss) over the role tokens;
        with `grounding` (and `grounding_coef` > 0) also the NLL of real results for the env role."""
        self.advantages(seqs)
        for group in self.opt.param_groups:  # a pure function of the iteration: resumes exactly
            group["lr"] = self.learning_rate()
        gae = self.config.advantage == "gae"
        stats: dict[str, list[float]] = {
            "policy_loss": [],
            "approx_kl_ref": [],
            "approx_kl": [],
            "clip_frac": [],
            "kl_capped_frac": [],
            "value_loss": [],
            "opd_loss": [],
            "grounding_loss": [],
        }
        self.lm.model.train()
        steps = planned = 0
        stopped = False
        for _ in range(self.config.epochs):
            for batch in self._minibatches(seqs):
                if not any(any(s.mask) for s in batch):
                    continue
                planned += 1
                if stopped:
                    continue
                ids, attn, mask, old, advs = _pad(batch, self.lm.pad_id)
                logits, values = self._forward(ids, attn)
                logp = token_logprobs(logits, ids[:, 1:], self.config.temperature)
                with torch.no_grad():
                    moved = approx_kl(logp, old[:, 1:], mask[:, 1:]).item()
                stats["approx_kl"].append(moved)
                if self.config.target_kl and moved > 1.5 * self.config.target_kl:
                    stopped = True  # the policy left the samples' neighbourhood: no more steps this round
                    continue
                with torch.no_grad():
                    ref_logits = self.ref(input_ids=ids, attention_mask=attn).logits[:, :-1]
                    ref_logp = token_logprobs(ref_logits, ids[:, 1:], self.config.temperature)
                m = mask[:, 1:]
                token_adv = (
                    _pad_targets(batch, "token_advantages", logp.shape)
                    if gae
                    else advs[:, None].expand_as(logp)
                )
                if self.config.negative_weight != 1.0:
                    token_adv = weight_negative(token_adv, self.config.negative_weight)
                pl, clip_frac = policy_loss(
                    logp, old[:, 1:], token_adv, m, self.config.clip, self.config.loss_reduction
                )
                kl = kl_to_reference(logp, ref_logp, m, self.config.kl_clamp)
                if self.config.kl_clamp:
                    over = token_kl(logp.detach(), ref_logp) > self.config.kl_clamp
                    stats["kl_capped_frac"].append(masked_mean(over.float(), m).item())
                loss = pl + self.config.kl_coef * kl
                if any(sq.skill_ids for sq in batch):
                    opd = opd_loss(
                        logp,
                        self._teacher_logprobs(batch, logp.shape),
                        _skill_mask(batch, m),
                        self.config.opd_beta,
                    )
                    loss = loss + self.config.lambda_opd * opd
                    stats["opd_loss"].append(opd.item())
                if gae:
                    vl = value_loss(
                        values,
                        _pad_targets(batch, "old_values", logp.shape),
                        _pad_targets(batch, "returns", logp.shape),
                        m,
                    )
                    loss = loss + self.config.vf_coef * vl
                    stats["value_loss"].append(vl.item())
                if self.config.ent_coef:
                    loss = loss - self.config.ent_coef * entropy(logits, m)
                if not torch.isfinite(loss):
                    raise NonFiniteLossError(
                        f"PPO loss is {loss.item()} at iteration {self.iteration}; the last checkpoint is kept. "
                        "Lower PPOConfig.lr or check the rewards."
                    )
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(
                    [*self.lm.model.parameters(), *self.value_head.parameters()], self.config.max_grad_norm
                )
                self.opt.step()
                stats["policy_loss"].append(pl.item())
                stats["approx_kl_ref"].append(kl.item())
                stats["clip_frac"].append(clip_frac.item())
                steps += 1
            if grounding and self.config.grounding_coef and not stopped:
                for start in range(0, len(grounding), self.config.minibatch_size):
                    stats["grounding_loss"].append(
                        self._grounding_step(grounding[start : start + self.config.minibatch_size])
                    )
        self.lm.model.eval()
        out = {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}
        out["update_fraction"] = steps / planned if planned else 0.0  # < 1 when target_kl stopped it
        return out

    def learning_rate(self) -> float:
        """The learning rate of the current iteration (linear warm-up, then constant)."""
        if self.config.warmup_iterations and self.iteration < self.config.warmup_iterations:
            return self.config.lr * (self.iteration + 1) / (self.config.warmup_iterations + 1)
        return self.config.lr

    def grounding_batch_loss(self, batch: list[RoleSequence]) -> torch.Tensor:
        """NLL of the real results in `batch` under the current env role (teacher forcing)."""
        width = max(len(s.ids) for s in batch)
        ids = torch.full((len(batch), width), self.lm.pad_id, dtype=torch.long)
        attn, mask = torch.zeros_like(ids), torch.zeros_like(ids)
        for i, s in enumerate(batch):
            ids[i, : len(s.ids)], attn[i, : len(s.ids)] = torch.as_tensor(s.ids), 1
            mask[i, : len(s.ids)] = torch.as_tensor(s.mask)
        logits = self.lm.model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        return grounding_loss(token_logprobs(logits, ids[:, 1:]), mask[:, 1:])

    def _grounding_step(self, batch: list[RoleSequence]) -> float:
        """One optimizer step on `grounding_coef` * the grounding NLL."""
        loss = self.grounding_batch_loss(batch)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"grounding loss is {loss.item()} at iteration {self.iteration}; the last checkpoint is kept"
            )
        self.opt.zero_grad(set_to_none=True)
        (self.config.grounding_coef * loss).backward()
        torch.nn.utils.clip_grad_norm_(self.lm.model.parameters(), self.config.max_grad_norm)
        self.opt.step()
        return loss.item()

    def _minibatches(self, seqs: list[RoleSequence]) -> list[list[RoleSequence]]:
        """One epoch's minibatches in a random order. With `group_minibatches`, whole task groups
        are shuffled and packed, so sequences that share a baseline are updated together."""
        size = self.config.minibatch_size
        if not self.config.group_minibatches:
            order = self.rng.permutation(len(seqs))
            return [[seqs[i] for i in order[k : k + size]] for k in range(0, len(seqs), size)]
        by_group: dict[int, list[RoleSequence]] = {}
        for sq in seqs:
            by_group.setdefault(sq.group, []).append(sq)
        keys = list(by_group)
        batches: list[list[RoleSequence]] = [[]]
        for k in self.rng.permutation(len(keys)):
            group = by_group[keys[k]]
            if batches[-1] and len(batches[-1]) + len(group) > size:
                batches.append([])
            batches[-1].extend(group)
        return batches

    def analyse(self, episodes: list[Episode], groups: list[int]) -> dict[str, float]:
        """SEED: the policy analyses one episode per task group (a success if the group has one)
        and the skills go to the library under the task's family and template."""
        from rehearsal_gym.analyst import analyse

        chosen: dict[int, int] = {}
        for i, (ep, g) in enumerate(zip(episodes, groups, strict=True)):
            if g not in chosen or (ep.success and not episodes[chosen[g]].success):
                chosen[g] = i
        picked = list(chosen.values())[: self.config.analyses_per_iter]
        skills = analyse(
            self.lm, [self._task(self.last_options[i]).prompt for i in picked], [episodes[i] for i in picked]
        )
        family = self.family.name
        for i, skill in zip(picked, skills, strict=True):
            if skill is not None:
                self.library.add(family, episodes[i].template, skill, episodes[i].success)
        return {"charts/valid_skills": float(np.mean([s is not None for s in skills])) if skills else 0.0}

    def train_iteration(self) -> dict[str, float]:
        episodes, groups = self.collect()
        if self.config.task_sampling != "uniform":
            self.curriculum.update([ep.template for ep in episodes], [ep.success for ep in episodes])
        seqs = role_sequences(episodes, groups, self.config.train_env_role and self.config.rehearse != "off")
        extra: dict[str, float] = {}
        agent_seqs = [sq for sq in seqs if sq.group % 2 == 0]  # one per episode, in env order
        if self.config.skill_hints:  # privileged: the env's oracle hint (info["hint"] channel)
            for sq, opts in zip(agent_seqs, self.last_options, strict=True):
                sq.skill_ids = self.lm.turn("skill", self._hint(opts))
        if self.config.seed_distill:  # self-evolving: the policy's own best skill for the template
            extra = self.analyse(episodes, groups)
            family = self.family.name
            for sq, ep in zip(agent_seqs, episodes, strict=True):
                skill = self.library.best(family, ep.template)
                sq.skill_ids = self.lm.turn("skill", skill.hint()) if skill else None
            extra["charts/library_size"] = float(len(self.library))
        grounding = grounding_sequences(episodes, self.lm) if self.config.grounding_coef else []
        stats = self.update(seqs, grounding)
        self.iteration += 1
        row = {
            "iteration": self.iteration,
            "charts/success": float(np.mean([ep.success for ep in episodes])),
            "charts/reward": float(np.mean([ep.reward for ep in episodes])),
            "charts/context_overflow": float(np.mean([ep.context_overflow for ep in episodes])),
            "charts/env_role_sequences": float(sum(s.group % 2 for s in seqs)),
            **extra,
            **{f"losses/{k}": v for k, v in stats.items()},
        }
        if self.config.task_sampling != "uniform":  # each template's share of the next round
            for t, w in zip(self.curriculum.templates, self.curriculum.weights(), strict=True):
                row[f"curriculum/{t}"] = float(w)
        if self.config.rehearse != "off" and self.config.premise_redraws:
            row["charts/premise_kept"] = _mean_info(episodes, "premise_kept")
            row["charts/premise_redraws"] = _mean_info(episodes, "premise_redraws")
        if self.config.rehearse == "wrap":  # imagined results checked against the real tool
            row["charts/fidelity"] = _mean_fidelity(episodes)
            row["charts/grounding_targets"] = float(len(grounding))
        self.history.append(row)
        return row

    def close(self) -> None:
        """Stop the Ray rollout workers, if any, and close the envs."""
        if self.rollouts is not None:
            self.rollouts.close()
        for env in self.envs:
            env.close()

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Weights (safetensors), optimizer state, RNG states and history, written atomically."""
        with atomic_directory(path) as tmp:
            self.lm.save(tmp / "model")
            save_model(self.ref, str(tmp / "reference.safetensors"))
            save_model(self.value_head, str(tmp / "value_head.safetensors"))
            torch.save(self.opt.state_dict(), tmp / "optimizer.pt")
            state = {
                "schema": CHECKPOINT_SCHEMA,
                "config": asdict(self.config),
                "iteration": self.iteration,
                "numpy_rng": self.rng.bit_generator.state,
                "torch_generator": self.generator.get_state().tolist(),
                "history": self.history,
                "skill_library": self.library.to_dict(),
                "curriculum": self.curriculum.to_dict(),
            }
            (tmp / "trainer_state.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, path: str | os.PathLike) -> PPOTrainer:
        """Resume exactly: the next iteration gives the same result as without the interruption."""
        path = recover(path)  # a kill between the checkpoint's renames leaves it beside `path`
        state = json.loads((path / "trainer_state.json").read_text())
        if state.get("schema") != CHECKPOINT_SCHEMA:
            raise ValueError(f"checkpoint schema {state.get('schema')} is not {CHECKPOINT_SCHEMA}")
        trainer = cls(PPOConfig(**state["config"]), LM.load(path / "model"))
        load_model(trainer.ref, str(path / "reference.safetensors"))
        load_model(trainer.value_head, str(path / "value_head.safetensors"))
        trainer.opt.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
        trainer.iteration = state["iteration"]
        trainer.rng.bit_generator.state = state["numpy_rng"]
        trainer.generator.set_state(torch.tensor(state["torch_generator"], dtype=torch.uint8))
        trainer.history = state["history"]
        trainer.library = SkillLibrary.from_dict(state["skill_library"])
        if "curriculum" in state:  # checkpoints from before the curriculum sampled uniformly
            trainer.curriculum.load_dict(state["curriculum"])
        return trainer


def load_world(path: str, lm: LM) -> LM:
    """The frozen world model at `path`; it must share `lm`'s tokenizer (the envs pass it token ids)."""
    world = LM.load(path)
    if world.tokenizer.get_vocab() != lm.tokenizer.get_vocab():
        raise ValueError(f"world model {path} has another tokenizer than the policy")
    for p in world.model.parameters():
        p.requires_grad_(False)
    return world


def make_train_envs(config: PPOConfig, lm: LM, n: int) -> list[gym.Env]:
    """The `n` train-split envs of a config: the real env, or SelfSimEnv with `lm` as its world model.

    `lm` is the policy in training (EnvACE) or, with `rehearsal_world="frozen"`, the frozen reference.
    """
    if config.rehearse == "off":
        return [gym.make(config.env, split="train", max_turns=config.max_turns) for _ in range(n)]
    from rehearsal_gym.demos import record_oracle_episodes, result_bank
    from rehearsal_gym.selfsim import SelfSimEnv

    bank = result_bank(record_oracle_episodes(config.env, range(40)))
    return [
        SelfSimEnv(
            config.env,
            model=lm,
            mode=config.rehearse,
            bank=bank,
            temperature=config.world_temperature or config.temperature,
            verifier=config.rehearsal_verifier,
            premise_redraws=config.premise_redraws,
            split="train",
            max_turns=config.max_turns,
        )
        for _ in range(n)
    ]


def _mean_info(episodes: list[Episode], key: str) -> float:
    """Mean of a per-call info value over the round's episodes; NaN if no call reported it."""
    values = [float(info[key]) for ep in episodes for info in ep.infos if key in info]
    return float(np.mean(values)) if values else float("nan")


def _mean_fidelity(episodes: list[Episode]) -> float:
    """Mean field accuracy of imagined results checked against the real tool (wrap mode); NaN if none."""
    scores = [
        info["fidelity"]["field_accuracy"] for ep in episodes for info in ep.infos if "fidelity" in info
    ]
    return float(np.mean(scores)) if scores else float("nan")


def _skill_mask(batch: list[RoleSequence], mask: torch.Tensor) -> torch.Tensor:
    """The target mask restricted to sequences that have a skill."""
    has = torch.tensor([bool(sq.skill_ids) for sq in batch])[:, None]
    return mask * has


def _pad_targets(batch: list[RoleSequence], name: str, shape: torch.Size) -> torch.Tensor:
    """Per-target values (length len(ids) - 1) of the batch, zero-padded to `shape`."""
    out = torch.zeros(shape)
    for i, s in enumerate(batch):
        values = getattr(s, name)
        out[i, : len(values)] = torch.as_tensor(values)
    return out


def _pad(batch: list[RoleSequence], pad_id: int):
    width = max(len(s.ids) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    old = torch.zeros((len(batch), width))
    for i, s in enumerate(batch):
        n = len(s.ids)
        ids[i, :n] = torch.as_tensor(s.ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.as_tensor(s.mask)
        old[i, :n] = torch.as_tensor(s.old_logprobs)
    advs = torch.tensor([s.advantage for s in batch])
    return ids, attn, mask, old, advs
