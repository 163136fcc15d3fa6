"""The rollout buffer: one round's episodes as per-role token sequences, their advantages, minibatches.

The data path (stable-baselines3's RolloutBuffer, for token sequences):
episodes -> `role_sequences` (the agent's tokens of each episode and, for SelfSim episodes, each
`ImaginedCall` of the environment role, ids and log-probs exactly as sampled) -> `RolloutBuffer`
-> advantages (`group_advantages` or `gae_advantages`: pure functions, values passed in) ->
`RolloutBuffer.minibatches` -> `Minibatch` tensors for the losses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch
from rehearsal_gym.envs.base import result_text

from rehearsal_gym.core.batching import right_pad
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.rollout import Episode

from .losses import group_advantages, token_gae


class Role(IntEnum):
    """Who generated a sequence's trained tokens (EnvACE: one policy, two roles)."""

    AGENT = 0
    ENV = 1


@dataclass
class RoleSequence:
    """One role's tokens of one episode: ids exactly as sampled, mask of that role's tokens."""

    ids: list[int]
    mask: list[int]
    old_logprobs: list[float]
    reward: float
    group: int  # the episode's task group in its round (the group baseline averages within it)
    role: Role = Role.AGENT
    skill_ids: list[int] | None = None  # skill turn inserted before the conversation (SEED teacher)
    world_mask: list[int] | None = None  # real tool-result tokens (agent sequences; ECHO's targets)

    @property
    def key(self) -> tuple[int, Role]:
        """The baseline group: one per task and role, as EnvACE."""
        return self.group, self.role


def role_sequences(
    episodes: Sequence[Episode], groups: Sequence[int], train_env_role: bool
) -> list[RoleSequence]:
    """Each episode's agent-role sequence, in episode order, and (with `train_env_role`) one
    environment-role sequence per imagined call with sampled tokens."""
    out = []
    for ep, g in zip(episodes, groups, strict=True):
        out.append(
            RoleSequence(
                list(ep.ids),
                list(ep.agent_mask),
                list(ep.logprobs),
                ep.reward,
                g,
                world_mask=list(ep.world_mask),
            )
        )
        if not train_env_role:
            continue
        for call in ep.imagined:
            if call.ids:
                prompt = list(call.prompt_ids)
                out.append(
                    RoleSequence(
                        prompt + list(call.ids),
                        [0] * len(prompt) + [1] * len(call.ids),
                        [0.0] * len(prompt) + list(call.logprobs),
                        ep.reward,
                        g,
                        Role.ENV,
                    )
                )
    return out


def grounding_sequences(episodes: Sequence[Episode], lm: LM) -> list[RoleSequence]:
    """EnvACE grounding targets: for each call that was imagined and also run for real (wrap mode),
    the environment role's prompt followed by the *real* result, masked to the result tokens."""
    out = []
    for ep in episodes:
        for call in ep.imagined:
            if call.real_result is None:
                continue
            prompt = list(call.prompt_ids)
            target = lm.encode(result_text(call.real_result)) + [lm.end_id]
            if len(prompt) + len(target) > lm.max_len:
                continue  # never cut silently: an overlong target is skipped
            out.append(
                RoleSequence(prompt + target, [0] * len(prompt) + [1] * len(target), [], 0.0, -1, Role.ENV)
            )
    return out


def sequence_group_advantages(seqs: Sequence[RoleSequence], scale: bool = False) -> list[float]:
    """Each sequence's reward minus the mean reward of its (task, role) group (`losses.group_advantages`)."""
    keys: dict[tuple[int, Role], int] = {}
    ids = [keys.setdefault(s.key, len(keys)) for s in seqs]
    adv = group_advantages(torch.tensor([s.reward for s in seqs]), torch.tensor(ids), scale=scale)
    return adv.tolist()


def gae_advantages(
    seqs: Sequence[RoleSequence], values: Sequence[torch.Tensor], gamma: float, lam: float
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-target (advantages, returns) of each sequence by GAE over its role's tokens, from the
    value of each target position (`values[i]`, length len(ids) - 1); the reward is given at the
    role's last token."""
    advs, rets = [], []
    for s, v in zip(seqs, values, strict=True):
        v = v[None]
        mask = torch.tensor([s.mask[1:]])
        rewards = torch.zeros_like(v)
        targets = mask[0].nonzero()
        if len(targets):
            rewards[0, targets[-1, 0]] = s.reward
        adv, ret = token_gae(rewards, v, mask, gamma, lam)
        advs.append(adv[0])
        rets.append(ret[0])
    return advs, rets


@dataclass
class Minibatch:
    """Padded tensors of a minibatch; per-target tensors are (B, T - 1), aligned with the logits."""

    seqs: list[RoleSequence]
    ids: torch.Tensor  # (B, T)
    attention: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T - 1): 1 where the target token is one this role generated
    old_logprobs: torch.Tensor  # (B, T - 1)
    advantages: torch.Tensor  # (B, T - 1)
    returns: torch.Tensor | None = None  # (B, T - 1), gae only
    old_values: torch.Tensor | None = None  # (B, T - 1), gae only

    def world_mask(self) -> torch.Tensor:
        """(B, T - 1): 1 where the target token is part of a real tool result (ECHO's targets)."""
        rows = [s.world_mask or [0] * len(s.ids) for s in self.seqs]
        return right_pad(rows, 0, width=self.ids.shape[1])[:, 1:].to(self.mask.device)

    def to(self, device: torch.device) -> Minibatch:
        """The same minibatch with its tensors on `device` (the model's)."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            if isinstance(getattr(self, f.name), torch.Tensor)
            else getattr(self, f.name)
            for f in dataclasses.fields(self)
        }
        return Minibatch(**moved)

    def skill_mask(self) -> torch.Tensor:
        """The target mask restricted to sequences that have a skill (SEED's teacher scores them)."""
        has = torch.tensor([bool(sq.skill_ids) for sq in self.seqs], device=self.mask.device)[:, None]
        return self.mask * has


class RolloutBuffer:
    """One round's sequences and, once computed, their advantages (group or GAE)."""

    def __init__(self, seqs: Sequence[RoleSequence]) -> None:
        self.seqs = list(seqs)
        self.advantages: list[float] | None = None  # group: one per sequence
        self.token_advantages: list[torch.Tensor] | None = None  # gae: per target of each sequence
        self.returns: list[torch.Tensor] | None = None
        self.values: list[torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    def count(self, role: Role) -> int:
        return sum(s.role == role for s in self.seqs)

    def compute_group_advantages(self, scale: bool = False) -> None:
        self.advantages = sequence_group_advantages(self.seqs, scale)

    def compute_gae(self, values: Sequence[torch.Tensor], gamma: float, lam: float) -> None:
        """GAE from the value head's `values` of each sequence (as SB3 passes `last_values`)."""
        self.values = [v.detach() for v in values]
        self.token_advantages, self.returns = gae_advantages(self.seqs, self.values, gamma, lam)

    def order(self, rng: np.random.Generator, size: int, by_group: bool) -> list[list[int]]:
        """One epoch's minibatches (indices) in a random order. `by_group`: whole (task, role)
        groups are shuffled and packed, so sequences that share a baseline are updated together."""
        if not by_group:
            perm = rng.permutation(len(self.seqs))
            return [list(perm[k : k + size]) for k in range(0, len(self.seqs), size)]
        members: dict[tuple[int, Role], list[int]] = {}
        for i, sq in enumerate(self.seqs):
            members.setdefault(sq.key, []).append(i)
        keys = list(members)
        batches: list[list[int]] = [[]]
        for k in rng.permutation(len(keys)):
            group = members[keys[k]]
            if batches[-1] and len(batches[-1]) + len(group) > size:
                batches.append([])
            batches[-1].extend(group)
        return batches

    def minibatches(
        self, rng: np.random.Generator, size: int, by_group: bool, pad_id: int
    ) -> Iterator[Minibatch]:
        for idx in self.order(rng, size, by_group):
            yield self.collate(idx, pad_id)

    def collate(self, idx: Sequence[int], pad_id: int) -> Minibatch:
        seqs = [self.seqs[i] for i in idx]
        ids = right_pad([s.ids for s in seqs], pad_id)
        width = ids.shape[1] - 1
        attention = right_pad([[1] * len(s.ids) for s in seqs], 0)
        mask = right_pad([s.mask for s in seqs], 0)[:, 1:]
        old = right_pad([s.old_logprobs for s in seqs], 0.0, torch.float32, width=width + 1)[:, 1:]
        if self.token_advantages is not None:
            adv = right_pad([self.token_advantages[i].tolist() for i in idx], 0.0, torch.float32, width=width)
            returns = right_pad([self.returns[i].tolist() for i in idx], 0.0, torch.float32, width=width)
            values = right_pad([self.values[i].tolist() for i in idx], 0.0, torch.float32, width=width)
            return Minibatch(seqs, ids, attention, mask, old, adv, returns, values)
        if self.advantages is None:
            raise RuntimeError("compute the advantages before taking minibatches")
        adv = torch.tensor([self.advantages[i] for i in idx])[:, None].expand(len(idx), width)
        return Minibatch(seqs, ids, attention, mask, old, adv)
