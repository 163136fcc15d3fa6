"""BFCL-v0: the Berkeley Function Calling Leaderboard's multi-turn tasks as a Gymnasium env.

Needs the ``bfcl-eval`` package, installed without its dependencies (it pins old versions of
numpy and many model-provider SDKs that its multi-turn data, API classes and checker do not use):

    pip install --no-deps "bfcl-eval==2026.3.23"

Everything comes from that package; nothing is copied here. A task is one entry of a multi-turn
category (``multi_turn_base`` by default): its user requests come one at a time (the next is
shown when the agent answers the one before), its tools are the function docs of the task's API
classes (file system, messaging, trading, travel, vehicle control, ...), and its backend is those
classes, loaded from the task's initial configuration. The reward is BFCL's own multi-turn
checker (the state and the responses after every request, against the ground-truth calls), so a
success means what it means on the leaderboard. The ground-truth calls are the oracle.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import itertools
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from rehearsal_gym.core.protocol import ToolCall, ToolSpec, format_answer, format_call

from .base import Backend, ToolEnv, ToolError
from .toolbox import ToolboxFamily, ToolTask, tool_result

CATEGORIES = ("multi_turn_base", "multi_turn_miss_param")
DATA_VERSION = "BFCL_v4"
ORACLE_ANSWER = "Done."
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
_checks = itertools.count()


def _bfcl():
    try:
        import bfcl_eval
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
    except ImportError as e:
        raise ImportError('BFCL-v0 needs bfcl-eval: pip install --no-deps "bfcl-eval==2026.3.23"') from e
    return bfcl_eval, CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES, multi_turn_checker, multi_turn_utils


def _schema(node: Any) -> Any:
    """BFCL's parameter schema in JSON-schema terms (dict -> object, float -> number, ...)."""
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _schema(v) for k, v in node.items() if k != "type"}
    if "type" in node:
        kind = _TYPES.get(node["type"], node["type"])
        if kind is not None:
            out["type"] = kind
    return out


@functools.cache
def _data(category: str) -> tuple[list[dict], dict[str, list[list[str]]], dict[str, list[dict]]]:
    """(entries, ground truth by id, function docs by class) of a category, from the package."""
    bfcl_eval, mapping, *_ = _bfcl()
    root = os.path.join(os.path.dirname(bfcl_eval.__file__), "data")
    with open(os.path.join(root, f"{DATA_VERSION}_{category}.json")) as f:
        entries = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(root, "possible_answer", f"{DATA_VERSION}_{category}.json")) as f:
        truth = {e["id"]: e["ground_truth"] for e in map(json.loads, f) if e}
    docs = {}
    for name, module in mapping.items():
        path = os.path.join(root, "multi_turn_func_doc", f"{module.rsplit('.', 1)[1]}.json")
        if os.path.exists(path):
            with open(path) as f:
                docs[name] = [json.loads(line) for line in f if line.strip()]
    return entries, truth, docs


def _plain(value: Any) -> Any:
    """A JSON stand-in for a value the API classes return that JSON cannot hold."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def call_string(call: ToolCall) -> str:
    """A call as BFCL writes one (``name(arg='value', n=3)``): Python literals of JSON values."""
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


class BFCLToolbox:
    """One episode's API class instances, loaded from the task's initial configuration."""

    def __init__(self, task: ToolTask) -> None:
        _, mapping, stateless, *_ = _bfcl()
        entry = task.data["entry"]
        self.instances = {}
        for name in entry["involved_classes"]:
            instance = getattr(importlib.import_module(mapping[name]), name)()
            if name not in stateless:
                instance._load_scenario(
                    copy.deepcopy(entry["initial_config"].get(name, {})), long_context=False
                )
            self.instances[name] = instance
        self.methods = {
            m: getattr(inst, m)
            for inst in self.instances.values()
            for m, _ in inspect.getmembers(inst, inspect.ismethod)
            if not m.startswith("_")
        }

    def call(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if name not in self.methods:
            raise ToolError(f"{name} is not available in this task")
        try:
            value = self.methods[name](**arguments)  # `execute` passes a copy of the recorded call
            # MathAPI returns mpmath numbers: shown as JSON numbers, as BFCL's checker prints them
            return tool_result(json.loads(json.dumps(value, default=_plain)))
        except ToolError:
            raise
        except Exception as e:  # the API class refused the call in its own way
            raise ToolError(f"{type(e).__name__}: {str(e)[:300]}") from None

    def close(self) -> None:
        """Nothing to release."""


class BFCLBackend(Backend):
    def __init__(self, task: ToolTask) -> None:
        self.toolbox = BFCLToolbox(task)

    def call(self, call: ToolCall) -> dict[str, Any]:
        return self.toolbox.call(call.name, call.arguments)

    def state(self) -> None:
        return None


class BFCLFamily(ToolboxFamily):
    """BFCL's multi-turn tasks of one category (see the module docstring)."""

    can_replan = False

    def __init__(self, category: str = "multi_turn_base") -> None:
        if category not in CATEGORIES:
            raise ValueError(f"category must be one of {CATEGORIES}, got {category!r}")
        entries, truth, docs = _data(category)
        self.category, self.truth, self.docs = category, truth, docs
        tasks = [
            ToolTask(
                e["question"][0][0]["content"],
                {"entry": e},
                id=e["id"],
                template="+".join(sorted(e["involved_classes"])),
            )
            for e in entries
        ]
        tools: dict[str, ToolSpec] = {}
        for name in docs:
            tools.update({k: v for k, v in self._class_tools(name).items() if k not in tools})
        super().__init__(
            BFCLToolbox,
            tasks,
            lambda *_: 0.0,
            tools=tools,
            name=f"bfcl/{category}",
            oracle=self._oracle_turns,
        )

    @functools.cache  # noqa: B019 - one family per process; the docs never change
    def _class_tools(self, class_name: str) -> dict[str, ToolSpec]:
        out = {}
        for doc in self.docs.get(class_name, []):
            description = doc["description"].split("Tool description: ")[-1].strip()
            out[doc["name"]] = ToolSpec(doc["name"], description.splitlines()[0], _schema(doc["parameters"]))
        return out

    def task_tools(self, task: Any) -> Mapping[str, ToolSpec]:
        if not isinstance(task, ToolTask):
            return self.tools
        entry = task.data["entry"]
        excluded = set(entry.get("excluded_function", []))
        tools = {}
        for name in entry["involved_classes"]:
            tools.update({k: v for k, v in self._class_tools(name).items() if f"{name}.{k}" not in excluded})
        return tools

    def make_backend(self, task: ToolTask) -> BFCLBackend:
        return BFCLBackend(task)

    def follow_up(self, task: Any, request: int) -> str | None:
        turns = task.data["entry"]["question"]
        if request >= len(turns):
            return None
        return " ".join(m["content"] for m in turns[request] if m.get("role") == "user") or "(no message)"

    def ground_truth_calls(self, task: ToolTask) -> list[list[ToolCall]]:
        """The ground-truth calls of each request, as ToolCalls (positional arguments named)."""
        classes = [
            getattr(importlib.import_module(_bfcl()[1][n]), n) for n in task.data["entry"]["involved_classes"]
        ]
        out = []
        for turn in self.truth[task.id]:
            calls = []
            for text in turn:
                node = ast.parse(text, mode="eval").body
                name = node.func.id
                method = next(getattr(c, name) for c in classes if hasattr(c, name))
                args = [ast.literal_eval(a) for a in node.args]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                bound = inspect.signature(method).bind(None, *args, **kwargs)
                calls.append(ToolCall(name, {k: v for k, v in bound.arguments.items() if k != "self"}))
            out.append(calls)
        return out

    def _oracle_turns(self, task: ToolTask) -> list[str]:
        turns = []
        for calls in self.ground_truth_calls(task):
            turns += [format_call(c.name, c.arguments) for c in calls] + [format_answer(ORACLE_ANSWER)]
        return turns

    def reference(self, task: ToolTask) -> tuple[None, str]:
        return None, ""

    def score(self, task: ToolTask, backend: Backend, answer: str, reference: Any) -> float:
        raise NotImplementedError("BFCL scores the calls of every request (score_calls)")

    def score_calls(
        self,
        task: ToolTask,
        backend: Backend,
        answer: str,
        reference: Any,
        calls: Sequence[Sequence[ToolCall]],
    ) -> float:
        """BFCL's multi-turn checker on the episode's calls, request by request: 1.0 if valid."""
        return float(self.check(task, calls)["valid"])

    def check(self, task: ToolTask, calls: Sequence[Sequence[ToolCall]]) -> dict[str, Any]:
        """The checker's verdict (``{"valid": bool, ...}``). Each call is one step of its request;
        requests the episode never reached count as answered with no call."""
        *_, checker, utils = _bfcl()
        truth = self.truth[task.id]
        decoded = [[[call_string(c)] for c in request] for request in calls]
        decoded += [[] for _ in range(len(truth) - len(decoded))]
        # the checker keeps each run's instances in its module's globals, named after the model name:
        # a fresh name per check, removed afterwards
        name = f"rehearsal_gym_{next(_checks)}"
        try:
            return checker.multi_turn_checker(
                decoded[: len(truth)], truth, task.data["entry"], self.category, name
            )
        except Exception as e:  # noqa: BLE001 - a checker failure is a failed episode, never a crash
            return {"valid": False, "error_message": f"checker raised {type(e).__name__}: {e}"}
        finally:
            for key in [k for k in vars(utils) if k.startswith(name)]:
                del vars(utils)[key]


class BFCLEnv(ToolEnv):
    """``gym.make("BFCL-v0", category="multi_turn_base")``; other arguments as `ToolEnv`."""

    def __init__(self, category: str = "multi_turn_base", max_turns: int = 40, **kwargs: Any) -> None:
        super().__init__(family=_family(category), max_turns=max_turns, **kwargs)


@functools.cache
def _family(category: str) -> BFCLFamily:
    return BFCLFamily(category)
