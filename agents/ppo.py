"""Token-level PPO for a causal-LM policy, with EnvACE's two roles trained on one reward.

One round reads top to bottom (CleanRL's ppo.py): `collect` episodes -> `RolloutBuffer` of per-role
sequences with the exact sampled token ids (agents/buffer.py) -> advantages -> `update`: minibatch
epochs of named loss terms from agents/losses.py, summed, one optimizer step each -> logged row ->
atomic checkpoint (agents/checkpoint.py). When the env is SelfSimEnv, each imagined tool result
(an `ImaginedCall` in `Episode.imagined`) is an environment-role sequence trained on the same
episode reward with its own group baseline. SEED, the curriculum and grounding plug in as
callbacks (agents/callbacks.py).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rehearsal_gym.core.lora import AdapterDisabled
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import Episode, run_episodes
from rehearsal_gym.core.sampling import token_logprobs
from rehearsal_gym.training.skills import SkillLibrary

from .buffer import Minibatch, Role, RoleSequence, RolloutBuffer, role_sequences
from .callbacks import TrainerCallback, callbacks_for
from .checkpoint import load_trainer, save_trainer
from .config import PPOConfig
from .curriculum import TemplateCurriculum
from .losses import (
    approx_kl,
    entropy,
    kl_to_reference,
    masked_mean,
    opd_loss,
    policy_loss,
    token_kl,
    value_loss,
    weight_negative,
    world_model_loss,
)
from .train_envs import load_world, make_train_envs

STATS = (
    "policy_loss",
    "approx_kl_ref",
    "approx_kl",
    "clip_frac",
    "kl_capped_frac",
    "value_loss",
    "opd_loss",
    "grounding_loss",
    "world_loss",
)


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
    """Trains `lm` with token-level PPO on `config.env` (real or rehearsed).

    `callbacks`: more `TrainerCallback`s, run after the ones the config asks for."""

    def __init__(self, config: PPOConfig, lm: LM, callbacks: Sequence[TrainerCallback] = ()) -> None:
        self.config, self.lm = config, lm
        if config.ppo.gradient_checkpointing:
            model = lm.model  # transformers 5 renamed it (the old name warns until it is removed in 6)
            (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        if config.ppo.lora_rank and not lm.is_lora:
            lm.add_lora(config.ppo.lora_rank)
        if lm.is_lora:  # the reference is the base: the same weights with the adapter disabled
            if config.ppo.gradient_checkpointing:
                lm.model.enable_input_require_grads()  # checkpointed blocks need a grad-carrying input
            self.ref = AdapterDisabled(lm.model)
        else:
            self.ref = copy.deepcopy(lm.model).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.value_head = ValueHead(lm.model.config.hidden_size).to(
            lm.device
        )  # float32 on the model's device
        self.opt = torch.optim.AdamW(self._trained_parameters(), lr=config.ppo.lr)
        self.rng = np.random.default_rng(config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.iteration = 0
        self.history: list[dict[str, float]] = []
        self.library = SkillLibrary()
        # the learner's own view of the tasks (family, prompts, oracle hints); never stepped in training
        self.probe = gym.make(config.env, split="train", max_turns=config.max_turns).unwrapped
        self.family = self.probe.family
        if config.task_sampling == "template-variance" and not self.family.templates:
            raise ValueError(
                f"task_sampling='template-variance' needs task templates; {self.family.name} names none"
            )
        if config.skills.skill_hints and not self.family.has_oracle:
            raise ValueError(f"skill_hints uses the oracle's hints; {self.family.name} has no oracle")
        self.curriculum = TemplateCurriculum(
            tuple(self.family.templates or ("",)), floor=config.curriculum_floor
        )
        self.callbacks = [*callbacks_for(config), *callbacks]
        r = config.rehearsal
        if config.rollout.rollout_workers:  # rollouts on Ray actors, each with its own envs and weights
            from .distributed import RayRollouts

            self.envs: list[gym.Env] = []
            self.rollouts = RayRollouts(config, lm)
        else:
            # a frozen world shares the reference module: a resumed trainer loads its weights in place
            world = lm.with_model(self.ref) if r.rehearsal_world == "frozen" else lm
            if r.world_model and r.rehearse != "off":
                world = load_world(r.world_model, lm)
            self.envs = make_train_envs(config, world, config.tasks_per_iter * config.group_size)
            self.rollouts = None
        self.last_options: list[dict[str, Any]] = []
        self.last_versions: list[int] = []  # policy version each episode of the last round was sampled with

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        """The policy's trainable weights (all, or its LoRA adapters) and the value head's."""
        return [p for p in self.lm.model.parameters() if p.requires_grad] + list(self.value_head.parameters())

    def _task(self, options: dict) -> Any:
        return self.family.task("train", options["task_index"])

    def _hint(self, options: dict) -> str:
        """The env's oracle hint for a train task (the info["hint"] channel), computed learner-side."""
        self.probe.reset(options={"task_index": options["task_index"]})
        return self.probe.hint()

    # -- rollout --------------------------------------------------------------------------------
    def collect(self) -> tuple[list[Episode], list[int]]:
        """`group_size` sampled episodes on each of `tasks_per_iter` train tasks."""
        n = self.config.tasks_per_iter
        tasks = next((t for cb in self.callbacks if (t := cb.draw_tasks(self, n)) is not None), None)
        if tasks is None:
            tasks = self.rng.integers(0, 2**31 - 1, n)
        groups = [i for i in range(len(tasks)) for _ in range(self.config.group_size)]
        options = [{"task_index": int(tasks[g])} for g in groups]
        for cb in self.callbacks:
            cb.on_collect_start(self, options)
        self.last_options = options
        self.lm.model.eval()
        seed = int(self.rng.integers(2**31 - 1))
        if self.config.rehearsal.shared_worlds and self.config.rehearsal.rehearse != "off":
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
                temperature=self.config.ppo.temperature,
                generator=self.generator,
                seed=seed,
            )
            versions = [self.iteration] * len(episodes)
        self.last_versions = versions
        return episodes, groups

    def buffer(self, episodes: list[Episode], groups: list[int]) -> RolloutBuffer:
        """The round's sequences: the agent role's and, when it is trained, the environment role's."""
        r = self.config.rehearsal
        return RolloutBuffer(role_sequences(episodes, groups, r.train_env_role and r.rehearse != "off"))

    # -- advantages -----------------------------------------------------------------------------
    def _forward(self, ids: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits predicting each next token and the value at the same positions."""
        ids, attn = ids.to(self.lm.device), attn.to(self.lm.device)
        out = self.lm.model(input_ids=ids, attention_mask=attn, output_hidden_states=True)
        return out.logits[:, :-1], self.value_head(out.hidden_states[-1][:, :-1])

    def compute_advantages(self, buffer: RolloutBuffer) -> None:
        ppo = self.config.ppo
        if ppo.advantage == "group":
            buffer.compute_group_advantages(ppo.scale_advantages)
            return
        with torch.no_grad():  # GAE: the value head's value at each target position of each sequence
            values = []
            for s in buffer.seqs:
                ids = torch.tensor([s.ids])
                values.append(self._forward(ids, torch.ones_like(ids))[1][0].cpu())
        buffer.compute_gae(values, ppo.gamma, ppo.lam)

    # -- update ---------------------------------------------------------------------------------
    @torch.no_grad()
    def _teacher_logprobs(self, batch: list[RoleSequence], shape: torch.Size) -> torch.Tensor:
        """SEED teacher: the same sampled tokens scored with the skill turn before the conversation,
        aligned with the student's targets (zeros where a sequence has no skill)."""
        out = torch.zeros(shape, device=self.lm.device)
        for i, sq in enumerate(batch):
            if not sq.skill_ids:
                continue
            ids = torch.tensor([self.lm.with_skill(sq.ids, sq.skill_ids)], device=self.lm.device)
            logits = self.lm.model(input_ids=ids).logits[:, :-1]
            lp = token_logprobs(logits, ids[:, 1:], self.config.ppo.temperature)[0]
            # student target t (t >= the start's length) is teacher target t + len(skill)
            n0, n, last = len(self.lm.start), len(sq.skill_ids), len(sq.ids) - 1
            out[i, n0:last] = lp[n0 + n : n + last]
        return out

    def check_finite(self, loss: torch.Tensor, what: str) -> None:
        if not torch.isfinite(loss):
            raise NonFiniteLossError(
                f"{what} is {loss.item()} at iteration {self.iteration}; the last checkpoint is kept. "
                "Lower PPOConfig.lr or check the rewards."
            )

    def loss_terms(self, mb: Minibatch, logits: torch.Tensor, values: torch.Tensor, logp: torch.Tensor):
        """The named terms of one minibatch's loss (each weighted), and the scalars to log."""
        ppo, m = self.config.ppo, mb.mask
        with torch.no_grad():
            ref_logits = self.ref(input_ids=mb.ids, attention_mask=mb.attention).logits[:, :-1]
            ref_logp = token_logprobs(ref_logits, mb.ids[:, 1:], ppo.temperature)
        adv = (
            weight_negative(mb.advantages, ppo.negative_weight)
            if ppo.negative_weight != 1.0
            else mb.advantages
        )
        pl, clip_frac = policy_loss(logp, mb.old_logprobs, adv, m, ppo.clip, ppo.loss_reduction)
        kl = kl_to_reference(logp, ref_logp, m, ppo.kl_clamp)
        terms = {"policy": pl, "kl_ref": ppo.kl_coef * kl}
        logs = {"policy_loss": pl.item(), "approx_kl_ref": kl.item(), "clip_frac": clip_frac.item()}
        if ppo.kl_clamp:
            over = token_kl(logp.detach(), ref_logp) > ppo.kl_clamp
            logs["kl_capped_frac"] = masked_mean(over.float(), m).item()
        if any(sq.skill_ids for sq in mb.seqs):
            opd = opd_loss(
                logp,
                self._teacher_logprobs(mb.seqs, logp.shape),
                mb.skill_mask(),
                self.config.skills.opd_beta,
            )
            terms["opd"] = self.config.skills.lambda_opd * opd
            logs["opd_loss"] = opd.item()
        if mb.returns is not None:
            vl = value_loss(values, mb.old_values, mb.returns, m)
            terms["value"] = ppo.vf_coef * vl
            logs["value_loss"] = vl.item()
        if ppo.ent_coef:
            terms["entropy"] = -ppo.ent_coef * entropy(logits, m)
        if self.config.rehearsal.world_loss_coef:  # ECHO: the policy predicts the real tools' outputs
            wl = world_model_loss(logp, mb.world_mask())
            terms["world"] = self.config.rehearsal.world_loss_coef * wl
            logs["world_loss"] = wl.item()
        return terms, logs

    def update(self, buffer: RolloutBuffer | list[RoleSequence]) -> dict[str, float]:
        """Minibatch epochs of clipped surrogate + KL (+ OPD, + value loss, - entropy) over the role
        tokens; callbacks' `on_epoch_end` (grounding) after each epoch not stopped by target_kl."""
        if not isinstance(buffer, RolloutBuffer):
            buffer = RolloutBuffer(buffer)
        ppo = self.config.ppo
        self.compute_advantages(buffer)
        for group in self.opt.param_groups:  # a pure function of the iteration: resumes exactly
            group["lr"] = self.learning_rate()
        stats: dict[str, list[float]] = {k: [] for k in STATS}
        self.lm.model.train()
        steps = planned = 0
        stopped = False
        params = self._trained_parameters()
        for _ in range(ppo.epochs):
            for mb in buffer.minibatches(self.rng, ppo.minibatch_size, ppo.group_minibatches, self.lm.pad_id):
                mb = mb.to(self.lm.device)
                if not any(any(s.mask) for s in mb.seqs):
                    continue
                planned += 1
                if stopped:
                    continue
                logits, values = self._forward(mb.ids, mb.attention)
                logp = token_logprobs(logits, mb.ids[:, 1:], ppo.temperature)
                with torch.no_grad():
                    moved = approx_kl(logp, mb.old_logprobs, mb.mask).item()
                stats["approx_kl"].append(moved)
                if ppo.target_kl and moved > 1.5 * ppo.target_kl:
                    stopped = True  # the policy left the samples' neighbourhood: no more steps this round
                    continue
                terms, logs = self.loss_terms(mb, logits, values, logp)
                loss = sum(terms.values())
                self.check_finite(loss, "PPO loss")
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, ppo.max_grad_norm)
                self.opt.step()
                for k, v in logs.items():
                    stats[k].append(v)
                steps += 1
            if not stopped:
                for cb in self.callbacks:
                    cb.on_epoch_end(self, stats)
        self.lm.model.eval()
        out = {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}
        out["update_fraction"] = steps / planned if planned else 0.0  # < 1 when target_kl stopped it
        return out

    def learning_rate(self) -> float:
        """The learning rate of the current iteration (linear warm-up, then constant)."""
        ppo = self.config.ppo
        if ppo.warmup_iterations and self.iteration < ppo.warmup_iterations:
            return ppo.lr * (self.iteration + 1) / (ppo.warmup_iterations + 1)
        return ppo.lr

    def train_iteration(self) -> dict[str, float]:
        """One round: collect -> buffer -> (callbacks) -> update -> logged row."""
        episodes, groups = self.collect()
        buffer = self.buffer(episodes, groups)
        extra: dict[str, float] = {}
        for cb in self.callbacks:
            extra.update(cb.on_rollout_end(self, episodes, groups, buffer))
        stats = self.update(buffer)
        self.iteration += 1
        row = {
            "iteration": self.iteration,
            "charts/success": float(np.mean([ep.success for ep in episodes])),
            "charts/reward": float(np.mean([ep.reward for ep in episodes])),
            "charts/context_overflow": float(np.mean([ep.context_overflow for ep in episodes])),
            "charts/env_role_sequences": float(buffer.count(Role.ENV)),
            **extra,
            **{f"losses/{k}": v for k, v in stats.items()},
        }
        for cb in self.callbacks:
            cb.on_iteration_end(self, row)
        self.history.append(row)
        return row

    def close(self) -> None:
        """Stop the Ray rollout workers, if any, and close the envs."""
        if self.rollouts is not None:
            self.rollouts.close()
        for env in self.envs:
            env.close()

    def save(self, path) -> None:
        """Weights (safetensors), optimizer state, RNG states and history, written atomically."""
        save_trainer(self, path)

    @classmethod
    def load(cls, path) -> PPOTrainer:
        """Resume exactly: the next iteration gives the same result as without the interruption."""
        return load_trainer(cls, path)
