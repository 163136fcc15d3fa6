"""Private rehearsal at inference (EnvACE): rehearse candidate actions in imagination, then act.

At each real decision the policy proposes candidates (its greedy action first, then samples).
Each candidate is rehearsed in SelfSimEnv, branched from the real conversation so far: the
imagined result comes from the environment role and the policy continues greedily for up to
`horizon` turns. A rehearsal *passes* when it reaches an ANSWER with no malformed turn, no
refused call and no unusable imagined result. The first candidate whose rehearsal passes is
executed for real (the greedy one when none passes). No verifier or real tool is consulted.

Parallel mode rehearses all `n` candidates; sequential mode rehearses one at a time and stops at
the first that passes (each later rehearsal runs only because the earlier ones failed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rehearsal_gym.core.checks import NonNegativeInt, PositiveInt, validate
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.sampling import sample
from rehearsal_gym.rehearsal.roles import ResultBank
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv


@dataclass(frozen=True)
class RehearsalConfig:
    """Budget and shape of private rehearsal."""

    n: NonNegativeInt = 2  # rehearsed candidates per real decision (0 = act greedily, no rehearsal)
    horizon: PositiveInt = 3  # imagined turns per rehearsal, the candidate included
    sequential: bool = False  # stop at the first candidate whose rehearsal passes
    max_turn_tokens: PositiveInt = 96  # agent turn length limit

    def __post_init__(self) -> None:
        validate(self)


def _context(lm: LM, transcript: list[tuple[str, str]]) -> list[int]:
    ids: list[int] = list(lm.start)
    for role, text in transcript:
        ids += lm.turn(role, text)
    return ids + lm.prompt("agent")


def _act(lm: LM, transcript, n: int, greedy: bool, generator, max_tokens: int) -> list[str]:
    ctx = _context(lm, transcript)
    if len(ctx) + max_tokens > lm.max_len:
        return []
    out = sample(
        lm.model,
        [ctx] * n,
        max_new_tokens=max_tokens,
        stop_id=lm.end_id,
        pad_id=lm.pad_id,
        greedy=greedy,
        generator=generator,
    )
    return [lm.decode(t) for t in out.tokens]


class RehearsalPlanner:
    """Chooses each real action after rehearsing candidates in a branched SelfSimEnv."""

    def __init__(
        self,
        lm: LM,
        base: str,
        config: RehearsalConfig | None = None,
        bank: ResultBank | None = None,
        seed: int = 0,
    ) -> None:
        self.lm, self.config = lm, config or RehearsalConfig()
        self.sim = SelfSimEnv(base, model=lm, mode="replace", bank=bank, max_turns=64)
        self.generator = torch.Generator().manual_seed(seed)
        self.rehearsals = 0

    def rehearse(self, task, history: list[tuple[str, str]], candidate: str) -> bool:
        """Does `candidate`, then the greedy policy, reach an answer cleanly in imagination?"""
        self.rehearsals += 1
        self.sim.reset(
            seed=int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator)),
            options={"task": task, "history": history},
        )
        action = candidate
        for _ in range(self.config.horizon):
            _, _, terminated, truncated, info = self.sim.step(action)
            result = info.get("result") or {}
            if info.get("error") or "error" in result:
                return False
            if terminated or truncated:
                return "answer" in info
            nxt = _act(self.lm, self.sim.transcript, 1, True, self.generator, self.config.max_turn_tokens)
            if not nxt:
                return False
            action = nxt[0]
        return False

    def choose(self, task, transcript: list[tuple[str, str]], history: list[tuple[str, str]]) -> str:
        greedy = _act(self.lm, transcript, 1, True, self.generator, self.config.max_turn_tokens)
        if not greedy:
            return "ANSWER (context full)"
        if self.config.n == 0:
            return greedy[0]
        candidates = greedy + _act(
            self.lm, transcript, self.config.n - 1, False, self.generator, self.config.max_turn_tokens
        )
        passed = []
        for candidate in candidates:
            ok = self.rehearse(task, history, candidate)
            passed.append(ok)
            if ok and self.config.sequential:
                break
        return candidates[passed.index(True)] if any(passed) else candidates[0]

    def run_episode(self, env: gym.Env, options: dict[str, Any]) -> bool:
        """Play one real episode, rehearsing before every real action; returns success."""
        env.reset(options=options)
        base = env.unwrapped
        history: list[tuple[str, str]] = []
        while True:
            action = self.choose(base.task, list(base.transcript), history)
            obs, _, terminated, truncated, info = env.step(action)
            history.append((action, obs))
            if terminated or truncated:
                return bool(info.get("success"))


def planner_success(
    lm: LM, base: str, n_tasks: int, config: RehearsalConfig, split: str = "test"
) -> dict[str, Any]:
    """Held-out success of the policy with private rehearsal of budget `config.n`."""
    planner = RehearsalPlanner(lm, base, config)
    env = gym.make(base, split=split)
    wins = [planner.run_episode(env, {"task_index": i}) for i in range(n_tasks)]
    return {"env": base, "n": config.n, "success": float(np.mean(wins)), "rehearsals": planner.rehearsals}
