"""Shared machinery of the real tool environments.

A *family* supplies a backend that executes tool calls against real state (one per episode), its
tasks, and how a finished episode is scored. The built-in families (function calling, retail,
finance) have a seeded task generator and an oracle that solves every task, and score by
comparing the final state and answer with the oracle's; a user's family (`envs.toolbox`,
`make_tool_env`) scores with the user's reward function and needs no oracle. `ToolEnv` turns a
family into a Gymnasium env (`envs.explain` labels a finished trajectory for skill data).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rehearsal_gym.core.protocol import (
    MAX_TURN_CHARS,
    ParseError,
    ToolCall,
    ToolSpec,
    check_call_format,
    parse_turn,
    reformat,
    tool_list,
)

from .explain import head as _head
from .observations import CHARSET, MAX_OBS_CHARS, ObservationText, Record, result_text, to_observation

SPLITS = ("train", "test")
TEST_FRACTION_PERCENT = 20
MALFORMED_POLICIES = ("error", "penalty", "terminate")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")


class ToolError(Exception):
    """A well-formed call the backend refuses (business rule, missing record). Shown as a result."""


@dataclass(frozen=True)
class Task:
    """One task: the user's request and everything the backend and verifier need.

    answer_kind says how the final answer is checked: "any" (only the state counts),
    "number" (first number within tolerance of the oracle's), "keyword" (must contain answer_key).
    `facts` override facts of the generated world (empty for real tasks; `Family.shown_task` fills
    it with the facts a rehearsed agent was shown, for the consistent verifier).
    """

    task_id: str
    family: str
    template: str
    prompt: str
    world_seed: int
    params: Mapping[str, Any] = field(default_factory=dict)
    answer_kind: str = "any"
    answer_key: str = ""
    rule: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(ABC):
    """Real state behind the tools of one episode. `call` raises ToolError on refused calls."""

    tools: Mapping[str, ToolSpec]

    @abstractmethod
    def call(self, call: ToolCall) -> dict[str, Any]: ...

    @abstractmethod
    def state(self) -> Any:
        """JSON-able snapshot of the state the verifier compares."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (database connections)."""


class Family(ABC):
    """A task family: tasks, a backend factory, and how an episode is scored.

    The defaults are those of the built-in families: tasks drawn by `draw_task` and split by a
    hash, scored against the oracle's goal state and answer (`reference`, `score`).
    """

    name: str
    tools: Mapping[str, ToolSpec]
    templates: tuple[str, ...] = ()
    has_oracle = True
    """Whether `oracle` solves every task (demonstrations, hints, the result bank of SelfSim)."""
    can_replan = True
    """Whether SelfSim's consistent verifier can re-plan the oracle in a rehearsed world."""

    @abstractmethod
    def draw_task(self, rng: np.random.Generator, task_id: str) -> Task:
        """One random task (of any split)."""

    @abstractmethod
    def make_backend(self, task: Task) -> Backend:
        """A fresh backend for the task's world, built from `task.world_seed` (and `task.facts`)."""

    @abstractmethod
    def oracle(self, task: Task) -> list[str]:
        """The expert's turns (calls then an answer) that solve the task."""

    def shown_task(self, task: Task, seen: Sequence[tuple[ToolCall, Mapping[str, Any]]]) -> Task:
        """The task in the world an agent was shown: `task` with the facts its oracle decides on
        (and the answer they imply) taken from `seen`, the agent's calls with the results it was
        shown. Used by the consistent verifier of rehearsals; families whose oracle never branches
        on a result keep the default, which returns `task` unchanged."""
        return task

    def state_matches(self, state: Any, expected: Any) -> bool:
        """Whether the agent's final state reaches the goal state (default: equal hashes)."""
        return state_hash(state) == state_hash(expected)

    def accepts(self, task: Any) -> bool:
        """Whether `task` is one of this family's (for ``reset(options={"task": ...})``)."""
        return isinstance(task, Task) and task.family == self.name

    def reference(self, task: Task) -> tuple[Any, str]:
        """What a finished episode of `task` is scored against, computed once at reset: here the
        oracle's goal state and answer. The answer is reported as ``info["expected_answer"]``."""
        return self.expected_outcome(task)

    def task_tools(self, task: Any) -> Mapping[str, ToolSpec]:
        """The tools of one task (all of the family's, unless a family varies them per task)."""
        return self.tools

    def follow_up(self, task: Any, request: int) -> str | None:
        """The user's `request`-th message (1, 2, ...) once the agent answered the one before, or
        None when the task has no more (the answer then ends the episode and is scored)."""
        return None

    def score_calls(
        self, task: Any, backend: Backend, answer: str, reference: Any, calls: Sequence[Sequence[ToolCall]]
    ) -> float:
        """`score`, for families that judge the calls made for each request (`calls[i]`)."""
        return self.score(task, backend, answer, reference)

    def score(self, task: Task, backend: Backend, answer: str, reference: tuple[Any, str]) -> float:
        """The reward of a finished episode whose final state is `backend`'s: here 1.0 when the goal
        state is reached and the answer passes the task's check, else 0.0."""
        state, expected = reference
        return float(self.state_matches(backend.state(), state) and self.check_answer(task, answer, expected))

    def success(self, value: float) -> bool:
        """Whether an episode's score counts as a success."""
        return value >= 1.0

    # -- shared ---------------------------------------------------------------------------------
    def split_of(self, task: Task) -> str:
        """Train/test split by a hash of the request, so no request text is in both splits."""
        digest = hashlib.sha256(f"{task.template}|{task.prompt}".encode()).digest()
        return "test" if digest[0] * 100 // 256 < TEST_FRACTION_PERCENT else "train"

    def task(self, split: str, index: int) -> Task:
        """The `index`-th task of a split; the same (split, index) always gives the same task."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        rng = np.random.default_rng([int(index), SPLITS.index(split), 7919])
        draws = 1000
        for _ in range(draws):
            task = self.draw_task(rng, f"{self.name}/{split}/{index}")
            if self.split_of(task) == split:
                return task
        raise RuntimeError(f"{self.name}: no {split} task after {draws} draws")

    def replay_backend(self, task: Task, calls: Sequence[ToolCall]) -> Backend:
        """A fresh backend of the task's world after executing `calls` in order (the caller closes it)."""
        backend = self.make_backend(task)
        try:
            for call in calls:
                execute(backend, call)
        except BaseException:
            backend.close()
            raise
        return backend

    def replay(self, task: Task, calls: Sequence[ToolCall]) -> Any:
        """State after executing `calls` in order on a fresh backend of the task's world."""
        backend = self.replay_backend(task, calls)
        try:
            return backend.state()
        finally:
            backend.close()

    def oracle_plan(self, task: Task) -> tuple[list[ToolCall], str]:
        """The oracle's calls and final answer, parsed."""
        calls, answer = [], ""
        for turn in self.oracle(task):
            parsed = parse_turn(turn, self.tools)
            if isinstance(parsed, ParseError):
                raise RuntimeError(f"{self.name} oracle wrote a bad turn {turn!r}: {parsed.message}")
            if isinstance(parsed, ToolCall):
                calls.append(parsed)
            else:
                answer = parsed.text
        return calls, answer

    def oracle_trace(self, task: Task) -> list[tuple[ToolCall, dict[str, Any]]]:
        """The oracle's calls with the real results they get on a fresh backend."""
        backend = self.make_backend(task)
        try:
            return [(call, execute(backend, call)) for call in self.oracle_plan(task)[0]]
        finally:
            backend.close()

    def expected_outcome(self, task: Task) -> tuple[Any, str]:
        """Goal state and answer: the oracle's turns replayed on a fresh backend."""
        calls, answer = self.oracle_plan(task)
        return self.replay(task, calls), answer

    def check_answer(self, task: Task, answer: str, expected: str) -> bool:
        if task.answer_kind == "any":
            return True
        if task.answer_kind == "keyword":
            return task.answer_key.lower() in answer.lower()
        if task.answer_kind == "number":
            got, want = _NUMBER_RE.search(answer), _NUMBER_RE.search(expected)
            if not got or not want:
                return False
            return bool(np.isclose(float(got.group()), float(want.group()), rtol=1e-3, atol=1e-3))
        raise ValueError(f"unknown answer_kind {task.answer_kind!r}")

    def prompt(self, task: Task, call_format: str = "text") -> str:
        """The first observation: available tools (in the call format's convention), then the request."""
        return f"{tool_list(self.task_tools(task), call_format)}\nRequest: {task.prompt}"


def execute(backend: Backend, call: ToolCall) -> dict[str, Any]:
    """Run a parsed call; a refused call becomes an ``{"error": ...}`` result, never an exception.

    The backend gets a copy of the arguments: a tool that keeps or changes them (BFCL's classes
    extend a list they were given) must not rewrite the episode's recorded call."""
    try:
        return backend.call(ToolCall(call.name, copy.deepcopy(call.arguments)))
    except ToolError as e:
        return {"error": str(e)}


def state_hash(state: Any) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()


class ToolEnv(gym.Env[str, str]):
    """A multi-turn tool-use task against a real backend.

    ## Observation
    Text (printable ASCII, at most 4096 chars): at reset, the tool signatures and the user's
    request; after a call, the tool's JSON result; after a malformed turn, ``error: <why>``.
    The agent keeps the conversation; `render()` shows all of it.

    ## Action
    Text in the env's `call_format` (see `rehearsal_gym.core.protocol`): ``"text"`` (default),
    ``CALL <tool> {json arguments}`` or ``ANSWER <text>``; ``"json"``, the instruct-model
    convention, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` or the final answer
    as plain text. Any string is accepted; a malformed one never raises.

    ## Reward
    The family's score of the final answer (`Family.score`): for the built-in families 1.0 when the
    backend state matches the oracle's goal state and the answer passes the task's check, else
    0.0; for a user's env (`make_tool_env`) its reward function. With ``malformed="penalty"`` or
    ``"terminate"`` each malformed turn costs `penalty`.

    ## Episode end
    Terminated by an ANSWER (or a malformed turn under ``"terminate"``); truncated after
    `max_turns` agent turns.

    ## Arguments
    family: the `Family` of the env (the built-in envs set it on their class).
    split: "train" or "test" (disjoint task sets). max_turns: turn limit.
    call_format: "text" or "json": how the agent writes a turn and how the tools are listed
    (signatures, or JSON function schemas); `LM.call_format` is a model's own.
    malformed: "error" | "penalty" | "terminate". penalty: cost of a malformed turn.
    hints: put the oracle's hint (workflow and rule) in the reset info as ``info["hint"]``, a
    standard channel for distillation from privileged information.
    Reset options: ``{"task_index": i}`` for the i-th task of the split, or ``{"task": task}``;
    ``{"skill": text}`` records the skill a trainer uses for the episode in ``info["skill"]``.

    ## Info
    task_id, template, turn, malformed_count; call and result when a tool ran; error after a
    malformed turn; at episode end success and expected_answer. call and result are read-only
    `Record` mappings (``dict(info["result"])`` copies one) that survive deepcopy and pickle.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    family: Family
    eager_backend = True
    """Make the episode's backend at reset (else on first use: SelfSim's replace mode never needs it)."""

    def __init__(
        self,
        split: str = "train",
        max_turns: int = 8,
        malformed: str = "error",
        penalty: float = 0.1,
        render_mode: str | None = None,
        hints: bool = False,
        *,
        family: Family | None = None,
        call_format: str = "text",
    ) -> None:
        if family is not None:
            if not isinstance(family, Family):
                raise TypeError(f"family must be a Family, got {type(family).__name__}")
            self.family = family
        if not isinstance(getattr(self, "family", None), Family):
            raise TypeError(f"{type(self).__name__} has no family: pass family=... (or use make_tool_env)")
        if hints and not self.family.has_oracle:
            raise ValueError(f"hints=True needs an oracle; {self.family.name} has none")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if malformed not in MALFORMED_POLICIES:
            raise ValueError(f"malformed must be one of {MALFORMED_POLICIES}, got {malformed!r}")
        if not np.isfinite(penalty) or penalty < 0:
            raise ValueError(f"penalty must be a finite number >= 0, got {penalty!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None")
        self.split, self.max_turns, self.malformed, self.penalty = split, max_turns, malformed, penalty
        self.render_mode, self.hints = render_mode, bool(hints)
        self.call_format = check_call_format(call_format)
        self.observation_space = ObservationText(MAX_OBS_CHARS, min_length=1, charset=CHARSET)
        self.action_space = spaces.Text(MAX_TURN_CHARS, min_length=0, charset=CHARSET)
        self.task: Task | None = None
        self._backend: Backend | None = None
        self.transcript: list[tuple[str, str]] = []
        self._done = True

    @property
    def tools(self) -> Mapping[str, ToolSpec]:
        return self.family.tools if self.task is None else self.family.task_tools(self.task)

    @property
    def backend(self) -> Backend | None:
        """The live backend of the current episode (made on first use), or None before a reset."""
        if self._backend is None and self.task is not None:
            self._backend = self.family.make_backend(self.task)
        return self._backend

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
            if not self.family.accepts(task):
                raise ValueError(f"options['task'] must be a task of {self.family.name}, got {task!r}")
        else:
            index = options.get("task_index")
            if index is None:
                index = int(self.np_random.integers(0, 2**31 - 1))
            elif not isinstance(index, int | np.integer) or index < 0:
                raise ValueError(f"options['task_index'] must be an int >= 0, got {index!r}")
            task = self.family.task(self.split, int(index))
        self.close()
        self.task = task
        self._reference = self.family.reference(task)
        self._expected_answer = self._reference[1]
        if self.eager_backend:
            self.backend  # noqa: B018 - a toolbox that cannot be made fails here, not mid-episode
        self.turn = 0
        self.malformed_count = 0
        self.calls: list[ToolCall] = []
        self.request_starts = [0]  # index in `calls` where each user request's calls begin
        self._done = False
        prompt = to_observation(self.family.prompt(task, self.call_format))
        self.transcript = [("task", prompt)]
        info = {"task_id": task.task_id, "template": task.template, "turn": 0, "malformed_count": 0}
        if self.hints:
            info["hint"] = self.hint()
        skill = options.get("skill")
        if skill is not None:  # the skill a trainer uses for this episode, echoed for loggers
            if not isinstance(skill, str):
                raise ValueError(f"options['skill'] must be a string, got {type(skill).__name__}")
            info["skill"] = skill
        return prompt, info

    def step(self, action: str):
        if self._done or self.task is None:
            obs = "error: the episode is over; call reset() to start a new one"
            return obs, 0.0, True, False, {"error": "step after episode end"}
        self.turn += 1
        text = action if isinstance(action, str) else repr(action)
        self.transcript.append(("agent", to_observation(text[:MAX_TURN_CHARS])))
        info: dict[str, Any] = {"task_id": self.task.task_id, "template": self.task.template}
        info["turn"] = self.turn  # "call" and "result" only when present: vector envs need stable types
        reward, terminated = 0.0, False
        parsed = parse_turn(action, self.tools, self.call_format)
        if isinstance(parsed, ParseError):
            self.malformed_count += 1
            info["error"] = parsed.message
            obs = f"error: {parsed.message}"
            if self.malformed != "error":
                reward -= self.penalty
            terminated = self.malformed == "terminate"
        elif isinstance(parsed, ToolCall):
            self.calls.append(parsed)
            info["call"] = Record(parsed.to_dict())
            result = self.run_tool(parsed, info)
            if result is None:  # no usable result (a simulated tool wrote garbage): the episode fails
                terminated = True
                obs = f"error: {info['error']}"
            else:
                info["result"] = Record(result)
                obs = result_text(result)
        elif (follow := self.family.follow_up(self.task, len(self.request_starts))) is not None:
            self.request_starts.append(len(self.calls))  # the user's next request (multi-turn tasks)
            obs = f"Request: {follow}"
        else:
            value = float(self.verify(parsed.text))
            success = self.family.success(value)
            reward += value
            terminated = True
            obs = "episode finished: " + ("success" if success else "failure")
            info.update(success=success, answer=parsed.text)
        truncated = not terminated and self.turn >= self.max_turns
        if terminated or truncated:
            self._done = True
            info.setdefault("success", False)
            info["expected_answer"] = self._expected_answer
        info["malformed_count"] = self.malformed_count
        obs = to_observation(obs)
        self.transcript.append(("env", obs))
        return obs, reward, terminated, truncated, info

    def run_tool(self, call: ToolCall, info: dict[str, Any]) -> dict[str, Any] | None:
        """The result of a valid call: here, the real backend's. SelfSimEnv overrides this.

        Returning None (with ``info["error"]`` set) ends the episode as a failure.
        """
        return execute(self.backend, call)

    def final_backend(self) -> Backend:
        """The backend whose state is scored: here the live one (SelfSimEnv replays the calls)."""
        return self.backend

    def verify(self, answer: str) -> float:
        """The score of the episode ending with `answer` (`Family.score_calls` on `final_backend`)."""
        backend = self.final_backend()
        bounds = [*self.request_starts, len(self.calls)]
        calls = [self.calls[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        try:
            return self.family.score_calls(self.task, backend, answer, self._reference, calls)
        finally:
            if backend is not self._backend:
                backend.close()

    def hint(self) -> str:
        """The oracle's hint for the current task: its workflow and the task's rule (skill-shaped)."""
        steps = " -> ".join(_head(t) for t in self.family.oracle(self.task))
        return f"Workflow: {steps}." + (f" Rule: {self.task.rule}" if self.task.rule else "")

    def oracle_turns(self) -> list[str]:
        """The oracle's turns for the current task, in the env's call format (for behaviour cloning)."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        turns = self.family.oracle(self.task)
        if self.call_format == "text":
            return turns
        return [reformat(t, self.tools, self.call_format) for t in turns]

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{role}] {text}" for role, text in self.transcript)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
