"""Bring your own tools: a toolbox class, a list of tasks and a reward become a `ToolEnv`.

    env = make_tool_env(Library, tasks, reward)

`Library` is any class: one instance per episode, made as ``Library(task)``, holds that episode's
state; its public methods with type hints and a docstring (with an ``Args:`` section) are the
tools, their JSON schemas read from the signature and docstring by
`transformers.utils.get_json_schema`. A method's return value is the result: a JSON object, or any
other JSON value wrapped as ``{"result": value}``. Anything a tool does wrong (raises, returns
something that is not JSON, returns a result too large, runs past `tool_timeout`) becomes a refused
call, ``{"error": ...}``, shown to the agent: never an exception in `step`.

Every call of an episode's toolbox (its constructor, its tools, ``close()`` if it has one, and the
reward) runs on one worker thread of that episode, so a toolbox that holds a thread-bound resource
(an ``sqlite3`` connection) works, and a call that hangs can be abandoned: the thread is left to
finish on its own and the episode's later calls are refused.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import inspect
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rehearsal_gym.core.protocol import ToolCall, ToolSpec

from .base import SPLITS, Backend, Family, ToolEnv, ToolError

MAX_RESULT_CHARS = 1_000_000
"""Largest accepted tool result (characters of its JSON); larger ones are refused calls.
Results longer than an observation are shown cut (see `envs.base.to_observation`)."""


@dataclass(frozen=True)
class ToolTask:
    """One task of a user env.

    prompt: the user's request, shown to the agent. data: anything the toolbox and the reward need
    (JSON-able). id: a name for the task (default: a hash of prompt and data). template: a label
    for per-template reporting and the curriculum. answer: a reference answer, if any (reported as
    ``info["expected_answer"]``; the reward decides what counts).
    """

    prompt: str
    data: Mapping[str, Any] = field(default_factory=dict)
    id: str = ""
    template: str = ""
    answer: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(f"ToolTask.prompt must be a non-empty string, got {self.prompt!r}")
        if not isinstance(self.data, Mapping):
            raise ValueError(f"ToolTask.data must be a mapping, got {type(self.data).__name__}")
        try:
            text = json.dumps(dict(self.data), sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"ToolTask.data must be JSON-able: {e}") from None
        if self.answer is not None and not isinstance(self.answer, str):
            raise ValueError(f"ToolTask.answer must be a string or None, got {type(self.answer).__name__}")
        if not self.id:
            digest = hashlib.sha256(f"{self.prompt}|{text}".encode()).hexdigest()[:12]
            object.__setattr__(self, "id", f"task-{digest}")

    # the names the trainer, the reports and the skill analyst read from every task
    @property
    def task_id(self) -> str:
        return self.id

    @property
    def rule(self) -> str:
        return ""


TaskSource = Sequence[ToolTask] | Callable[[np.random.Generator, int], ToolTask]


@functools.cache
def toolbox_tools(toolbox: type) -> dict[str, ToolSpec]:
    """The tools of a toolbox class: its public methods that have a docstring, with JSON schemas
    from `transformers.utils.get_json_schema` (type hints and the docstring's ``Args:`` section)."""
    from transformers.utils import get_json_schema  # ~1 s to import: only when a toolbox is read

    if not isinstance(toolbox, type):
        raise TypeError(f"toolbox must be a class (one instance per episode), got {toolbox!r}")
    tools = {}
    for name, method in inspect.getmembers(toolbox, inspect.isfunction):
        if name.startswith("_") or name == "close" or not inspect.getdoc(method):
            continue
        try:
            schema = get_json_schema(method)["function"]
        except Exception as e:  # transformers' DocstringParsingException / TypeHintParsingException
            raise ValueError(
                f"{toolbox.__name__}.{name} is a public method with a docstring, so it is a tool, but its "
                f"schema cannot be read: {e}. Give every argument a type hint and a line under 'Args:' "
                "in the docstring, or make the method private (a leading underscore)."
            ) from None
        tools[name] = ToolSpec(name, schema.get("description", "").splitlines()[0], schema["parameters"])
    if not tools:
        raise ValueError(
            f"{toolbox.__name__} has no tools: a tool is a public method with type hints and a docstring"
        )
    return tools


def tool_result(value: Any) -> dict[str, Any]:
    """A tool's return value as a JSON-object result, detached from the toolbox's state.

    Raises ToolError when it is not JSON or too large."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError) as e:
        raise ToolError(
            f"the tool returned a {type(value).__name__} that is not JSON ({str(e)[:80]})"
        ) from None
    if len(text) > MAX_RESULT_CHARS:
        raise ToolError(
            f"the tool returned {len(text)} characters of JSON; at most {MAX_RESULT_CHARS} allowed"
        )
    result = json.loads(text)
    if not isinstance(result, dict) or not result:
        return {"result": result}
    return result


class ToolboxBackend(Backend):
    """One episode's toolbox instance, called on its own worker thread with a time limit."""

    def __init__(self, family: ToolboxFamily, task: ToolTask) -> None:
        self.family, self.task = family, task
        self.tools = family.tools
        self.calls = 0  # tool methods called (a count the tests read)
        self.broken: str | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"toolbox-{family.name}")
        try:
            self.toolbox = self._pool.submit(family.toolbox, task).result(timeout=family.tool_timeout)
        except concurrent.futures.TimeoutError:
            self._abandon()
            raise RuntimeError(
                f"{family.name}: {family.toolbox.__name__}(task) did not return within {family.tool_timeout} s"
            ) from None
        except Exception as e:
            self._abandon()
            raise RuntimeError(
                f"{family.name}: {family.toolbox.__name__}(task) raised {type(e).__name__}: {e} "
                f"(task {task.id})"
            ) from e

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on the episode's thread; a timeout raises ToolError and breaks the backend."""
        if self.broken:
            raise ToolError(self.broken)
        future = self._pool.submit(fn, *args, **kwargs)
        try:
            return future.result(timeout=self.family.tool_timeout)
        except concurrent.futures.TimeoutError:
            self.broken = f"the toolbox is unavailable: an earlier call ran past {self.family.tool_timeout} s"
            self._abandon()
            raise ToolError(f"the tool did not return within {self.family.tool_timeout} s") from None

    def call(self, call: ToolCall) -> dict[str, Any]:
        self.calls += 1
        try:
            value = self.run(getattr(self.toolbox, call.name), **call.arguments)
        except ToolError:  # raised by the tool (a refusal in its own words) or by a timeout
            raise
        except (Exception, SystemExit) as e:  # any other failure of the user's tool: the agent sees it
            raise ToolError(f"{type(e).__name__}: {str(e)[:300]}".rstrip(": ")) from None
        return tool_result(value)

    def state(self) -> None:
        """User toolboxes are scored by their reward function, not by a state snapshot."""
        return None

    def _abandon(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if not self.broken and callable(getattr(self.toolbox, "close", None)):
            try:
                self.run(self.toolbox.close)
            except (Exception, SystemExit) as e:
                warnings.warn(
                    f"{self.family.name}: toolbox close() raised {e!r}", RuntimeWarning, stacklevel=2
                )
        self._abandon()


class ToolboxFamily(Family):
    """A `Family` made of a user's toolbox class, tasks and reward (see `make_tool_env`)."""

    has_oracle = False  # set per instance
    can_replan = False

    def __init__(
        self,
        toolbox: type,
        tasks: TaskSource,
        reward: Callable[[ToolTask, Any, str], float | bool],
        *,
        test_tasks: Sequence[ToolTask] | None = None,
        oracle: Callable[[ToolTask], list[str]] | None = None,
        name: str | None = None,
        tool_timeout: float = 10.0,
        success_threshold: float = 1.0,
        tools: Mapping[str, ToolSpec] | None = None,
    ) -> None:
        self.toolbox = toolbox  # a class, or any callable (task) -> toolbox instance with `tools` given
        self.tools = dict(tools) if tools is not None else toolbox_tools(toolbox)
        self.name = name or toolbox.__name__
        if not callable(reward):
            raise TypeError(f"reward must be callable (task, toolbox, answer) -> float, got {reward!r}")
        if oracle is not None and not callable(oracle):
            raise TypeError(f"oracle must be callable (task) -> list of turns, got {oracle!r}")
        if not (isinstance(tool_timeout, int | float) and tool_timeout > 0 and math.isfinite(tool_timeout)):
            raise ValueError(f"tool_timeout must be a positive number of seconds, got {tool_timeout!r}")
        self.reward, self._oracle, self.has_oracle = reward, oracle, oracle is not None
        self.tool_timeout, self.success_threshold = float(tool_timeout), float(success_threshold)
        self._generator = tasks if callable(tasks) else None
        self.splits: dict[str, list[ToolTask]] = {}
        if self._generator is None:
            tasks = list(tasks)
            for t in [*tasks, *(test_tasks or [])]:
                if not isinstance(t, ToolTask):
                    raise TypeError(f"tasks must be ToolTask objects, got {type(t).__name__}")
            if test_tasks is not None:
                self.splits = {"train": tasks, "test": list(test_tasks)}
            else:  # the built-in families' rule: a hash of the request decides the split
                self.splits = {s: [t for t in tasks if self.split_of(t) == s] for s in SPLITS}
            for split, items in self.splits.items():
                if not items:
                    raise ValueError(
                        f"{self.name}: no {split} task ({len(tasks)} tasks given); give more tasks "
                        "or test_tasks=... for the held-out split"
                    )
        elif test_tasks is not None:
            raise ValueError("test_tasks goes with a list of tasks; a generator makes both splits")
        self.templates = tuple(dict.fromkeys(t.template for s in self.splits.values() for t in s))

    def task(self, split: str, index: int) -> ToolTask:
        """Task `index` of a split: of a list, the task at ``index % len(split)``; of a generator,
        ``tasks(rng, index)`` with an rng seeded by (index, split), redrawn until its prompt hashes
        into the split."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if self._generator is None:
            items = self.splits[split]
            return items[int(index) % len(items)]
        rng = np.random.default_rng([int(index), SPLITS.index(split), 7919])
        for _ in range(1000):
            task = self._generator(rng, int(index))
            if not isinstance(task, ToolTask):
                raise TypeError(
                    f"{self.name}: the task generator returned {type(task).__name__}, not a ToolTask"
                )
            if self.split_of(task) == split:
                return task
        raise RuntimeError(f"{self.name}: no {split} task after 1000 draws of the generator")

    def draw_task(self, rng: np.random.Generator, task_id: str) -> ToolTask:
        raise NotImplementedError("ToolboxFamily.task draws tasks")

    def accepts(self, task: Any) -> bool:
        return isinstance(task, ToolTask)

    def make_backend(self, task: ToolTask) -> ToolboxBackend:
        return ToolboxBackend(self, task)

    def oracle(self, task: ToolTask) -> list[str]:
        if self._oracle is None:
            raise NotImplementedError(
                f"{self.name} has no oracle: pass oracle=(task -> list of turns) to make_tool_env for "
                "demonstrations and hints (rehearsal, evaluation and training need none)"
            )
        return list(self._oracle(task))

    def reference(self, task: ToolTask) -> tuple[None, str]:
        return None, task.answer or ""

    def score(self, task: ToolTask, backend: Backend, answer: str, reference: Any) -> float:
        """`reward(task, toolbox, answer)`; a reward that raises, hangs or is not a finite number
        scores 0 with a warning (the agent's answer must never crash the env)."""
        assert isinstance(backend, ToolboxBackend)
        if backend.broken:  # a call of this episode hung; the agent was already told, the episode fails
            return 0.0
        try:
            value = float(backend.run(self.reward, task, backend.toolbox, answer))
        except (Exception, SystemExit) as e:
            warnings.warn(
                f"{self.name}: reward raised {e!r} on task {task.id}; scored 0", RuntimeWarning, stacklevel=2
            )
            return 0.0
        if not math.isfinite(value):
            warnings.warn(
                f"{self.name}: reward returned {value} on task {task.id}; scored 0",
                RuntimeWarning,
                stacklevel=2,
            )
            return 0.0
        return value

    def success(self, value: float) -> bool:
        return value >= self.success_threshold


def make_tool_env(
    toolbox: type,
    tasks: TaskSource,
    reward: Callable[[ToolTask, Any, str], float | bool],
    *,
    test_tasks: Sequence[ToolTask] | None = None,
    oracle: Callable[[ToolTask], list[str]] | None = None,
    max_turns: int = 8,
    name: str | None = None,
    tool_timeout: float = 10.0,
    success_threshold: float = 1.0,
    **env_kwargs: Any,
) -> ToolEnv:
    """A Gymnasium env (a `ToolEnv`) of a user's tools; see the module docstring.

    reward(task, toolbox, answer) -> float | bool scores a finished episode from its toolbox
    instance and the final answer; ``info["success"]`` is ``reward >= success_threshold``.
    tasks: a sequence of `ToolTask` (the train split when `test_tasks` is given, else split by a
    hash of each prompt) or a generator ``(rng, index) -> ToolTask``. oracle(task) -> turns
    (optional) gives expert demonstrations and hints. tool_timeout: seconds a tool call (or the
    constructor, or the reward) may take. Other keyword arguments (split, malformed, penalty,
    render_mode, hints) as `ToolEnv`.

    Register it like any env: ``gym.register("Library-v0", entry_point=functools.partial(
    make_tool_env, Library, tasks, reward))``; ``SelfSimEnv(base="Library-v0")`` then rehearses it.
    """
    family = ToolboxFamily(
        toolbox,
        tasks,
        reward,
        test_tasks=test_tasks,
        oracle=oracle,
        name=name,
        tool_timeout=tool_timeout,
        success_threshold=success_threshold,
    )
    return ToolEnv(family=family, max_turns=max_turns, **env_kwargs)
