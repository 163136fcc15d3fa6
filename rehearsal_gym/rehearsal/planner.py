"""Private rehearsal at inference (EnvACE): rehearse candidate actions in imagination, then act.

At each real decision the policy proposes `n` candidates: its greedy turn first, then samples.
Each candidate is rehearsed in a SelfSimEnv branched from the real conversation so far: the
imagined results come from the environment role (the policy's own, or a separate `world` model,
e.g. one grounded with ``rehearsal-gym ground-world``) and the policy continues greedily for up
to `horizon` turns. All candidates of a decision are rehearsed side by side (one batched call per
imagined turn) and in one imagined world: the same call after the same history gets the same
imagined result, so rehearsals differ only by what the candidates do. A rehearsal *passes* when it
reaches an answer with no malformed turn, no refused call and no unusable imagined result. No
verifier or real tool is consulted. Which candidate is executed for real:

- rule="vote" (self-consistency over imagined futures): among the passing rehearsals, the answer
  reached most often wins; the first candidate (greedy first) whose rehearsal reached it is
  executed. A candidate that is itself an answer "rehearses" to that answer, so at the last turn
  the rule is a majority vote over sampled answers.
- rule="first-pass": the first candidate whose rehearsal passes. With an agreeable world the greedy
  candidate nearly always passes, so this rule rarely changes the action (docs/results.md).

The greedy candidate is executed when no rehearsal passes. `RehearsalPlanner.stats` counts the
decisions, how many executed a candidate other than the greedy one, and the sequences generated
(agent turns and imagined results), the cost of rehearsal in model calls.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from rehearsal_gym.core.checks import NonNegativeInt, PositiveFloat, PositiveInt, validate
from rehearsal_gym.core.model import LM
from rehearsal_gym.core.sampling import sample
from rehearsal_gym.rehearsal.roles import ResultBank
from rehearsal_gym.rehearsal.selfsim import SelfSimEnv


@dataclass(frozen=True)
class RehearsalConfig:
    """Budget and rule of private rehearsal."""

    n: NonNegativeInt = 2  # rehearsed candidates per real decision (0 or 1 = act greedily, no rehearsal)
    horizon: PositiveInt = 3  # imagined turns per rehearsal, the candidate included
    rule: Literal["vote", "first-pass"] = "vote"  # which candidate is executed (module docstring)
    temperature: PositiveFloat = 0.7  # sampling temperature of the candidates after the greedy one
    max_turn_tokens: PositiveInt = 96  # agent turn length limit

    def __post_init__(self) -> None:
        validate(self)


def answer_key(text: str) -> str:
    """An answer as the vote compares it: lower case, words and numbers only."""
    return " ".join(re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", text.lower()))


def _context(lm: LM, transcript: list[tuple[str, str]]) -> list[int]:
    ids: list[int] = list(lm.start)
    for role, text in transcript:
        ids += lm.turn(role, text)
    return ids + lm.prompt("agent")


def vote(outcomes: list[str | None]) -> int | None:
    """The index of the candidate to execute under rule="vote": `outcomes[i]` is the answer key
    candidate i's rehearsal reached, or None where it did not pass. None when no rehearsal passed."""
    counts = Counter(o for o in outcomes if o is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(i for i, o in enumerate(outcomes) if o is not None and counts[o] == best)


class RehearsalPlanner:
    """Chooses each real action after rehearsing candidates in branched SelfSimEnvs."""

    def __init__(
        self,
        lm: LM,
        base: str,
        config: RehearsalConfig | None = None,
        bank: ResultBank | None = None,
        seed: int = 0,
        world: LM | None = None,
    ) -> None:
        self.lm, self.config, self.base = lm, config or RehearsalConfig(), base
        self.world = world or lm
        self.bank = bank
        self.sims: list[SelfSimEnv] = []
        self.generator = torch.Generator().manual_seed(seed)
        self.stats = {"decisions": 0, "changed": 0, "rehearsals": 0, "generated": 0}

    @property
    def rehearsals(self) -> int:
        return self.stats["rehearsals"]

    def _sim(self, i: int) -> SelfSimEnv:
        while len(self.sims) <= i:
            sim = SelfSimEnv(self.base, model=self.world, mode="replace", bank=self.bank, max_turns=64)
            self.bank = sim.bank  # one bank of real examples for every branch
            self.sims.append(sim)
        return self.sims[i]

    @property
    def sim(self) -> SelfSimEnv:
        return self._sim(0)

    def _act(self, contexts: list[list[int]], greedy: bool) -> list[str]:
        out = sample(
            self.lm.model,
            contexts,
            max_new_tokens=self.config.max_turn_tokens,
            stop_id=self.lm.end_id,
            pad_id=self.lm.pad_id,
            greedy=greedy,
            temperature=self.config.temperature,
            generator=self.generator,
        )
        self.stats["generated"] += len(contexts)
        return [self.lm.decode(t) for t in out.tokens]

    def _fits(self, context: list[int]) -> bool:
        return len(context) + self.config.max_turn_tokens <= self.lm.max_len

    def rehearse_all(self, task, history: list[tuple[str, str]], candidates: list[str]) -> list[str | None]:
        """Rehearse every candidate side by side in one imagined world; for each, the answer key
        its rehearsal reached, or None where it failed or did not answer within the horizon."""
        self.stats["rehearsals"] += len(candidates)
        world_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator))
        sims = [self._sim(i) for i in range(len(candidates))]
        for sim in sims:
            sim.reset(seed=world_seed, options={"task": task, "history": history, "world_seed": world_seed})
        outcomes: list[str | None] = [None] * len(candidates)
        live, actions = list(range(len(candidates))), list(candidates)
        for turn in range(self.config.horizon):
            self.stats["generated"] += SelfSimEnv.prepare_steps([sims[i] for i in live], actions)
            going = []
            for i, action in zip(live, actions, strict=True):
                _, _, terminated, truncated, info = sims[i].step(action)
                if info.get("error") or "error" in (info.get("result") or {}):
                    continue
                if terminated or truncated:
                    if "answer" in info:
                        outcomes[i] = answer_key(info["answer"])
                    continue
                going.append(i)
            contexts = {i: _context(self.lm, sims[i].transcript) for i in going}
            live = [i for i in going if self._fits(contexts[i])]
            if not live or turn + 1 == self.config.horizon:
                break
            actions = self._act([contexts[i] for i in live], greedy=True)
        return outcomes

    def choose(self, task, transcript: list[tuple[str, str]], history: list[tuple[str, str]]) -> str:
        context = _context(self.lm, transcript)
        if not self._fits(context):
            return "ANSWER (context full)"
        self.stats["decisions"] += 1
        greedy = self._act([context], greedy=True)
        if self.config.n <= 1:  # one candidate leaves nothing to choose between
            return greedy[0]
        candidates = greedy + self._act([context] * (self.config.n - 1), greedy=False)
        outcomes = self.rehearse_all(task, history, candidates)
        if self.config.rule == "vote":
            pick = vote(outcomes)
        else:
            pick = next((i for i, o in enumerate(outcomes) if o is not None), None)
        choice = candidates[pick or 0]
        self.stats["changed"] += choice != greedy[0]
        return choice

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
    lm: LM,
    base: str,
    n_tasks: int,
    config: RehearsalConfig,
    split: str = "test",
    first_task: int = 0,
    world: LM | None = None,
) -> dict[str, Any]:
    """Held-out success of the policy with private rehearsal of budget `config.n`, with the
    decisions it took, how many of them rehearsal changed, and the sequences generated."""
    planner = RehearsalPlanner(lm, base, config, world=world)
    env = gym.make(base, split=split)
    wins = [planner.run_episode(env, {"task_index": first_task + i}) for i in range(n_tasks)]
    return {"env": base, "n": config.n, "success": float(np.mean(wins)), "wins": wins, **planner.stats}
