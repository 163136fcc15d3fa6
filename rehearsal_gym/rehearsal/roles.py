"""Text of the two roles' prompts (EnvACE): the agent's conversation and the environment role.

The environment-role prompt is separate from the agent's: the tool whitelist, the called tool's
schema and arguments, the conversation so far, and a few *real* recorded results of that tool.
Pure text functions; the model turns them into ids.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from rehearsal_gym.core.protocol import ToolCall, ToolSpec, format_call

MAX_HISTORY_TURNS = 4
"""Most recent agent/env messages shown to the environment role (the request is always shown)."""


def request_line(first_observation: str) -> str:
    """The user's request from the first observation (the line after the tool list)."""
    for line in reversed(first_observation.splitlines()):
        if line.startswith("Request:"):
            return line
    return first_observation.splitlines()[-1] if first_observation else ""


def env_role_prompt(
    tools: Mapping[str, ToolSpec],
    call: ToolCall,
    transcript: Sequence[tuple[str, str]],
    examples: Sequence[tuple[str, str]],
) -> str:
    """Prompt asking the model to write the JSON result of `call` as the tool would.

    `transcript` is the conversation so far as (role, text) with the task first; `examples` are
    (call text, real result text) pairs of the same tool.
    """
    spec = tools[call.name]
    lines = [f"Act as the tool {call.name}. Tools: {', '.join(tools)}", f"Schema: {spec.signature()}"]
    lines += [f"Example: {c} => {r}" for c, r in examples]
    if transcript:
        lines.append(request_line(transcript[0][1]))
        lines += [f"{role}: {text}" for role, text in transcript[1:][-MAX_HISTORY_TURNS:]]
    lines.append(f"Call: {format_call(call.name, call.arguments)}")
    return "\n".join(lines)


class ResultBank:
    """Real tool results recorded per tool, used as examples in the environment-role prompt.

    Only real results go in; imagined ones never do.
    """

    def __init__(self, per_tool: int = 64) -> None:
        self.per_tool = per_tool
        self._results: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self._shapes: dict[str, set[frozenset[str]]] = defaultdict(set)

    def add(self, call: ToolCall, result_text: str) -> None:
        """Record a real result of `call` (its JSON text)."""
        self.add_text(call.name, format_call(call.name, call.arguments), result_text)

    def add_text(self, tool: str, call_text: str, result_text: str) -> None:
        bucket = self._results[tool]
        if len(bucket) < self.per_tool:
            bucket.append((call_text, result_text))
        result = json.loads(result_text)
        if set(result) != {"error"}:
            self._shapes[tool].add(frozenset(result))

    def shapes(self, tool: str) -> set[frozenset[str]]:
        """Key sets of the tool's real (non-error) results seen so far."""
        return set(self._shapes.get(tool, ()))

    def examples(
        self, tool: str, k: int, rng: np.random.Generator, exclude: str = ""
    ) -> list[tuple[str, str]]:
        """Up to `k` recorded (call, result) pairs of `tool`, drawn with `rng`, never the `exclude` call."""
        bucket = [e for e in self._results.get(tool, []) if e[0] != exclude]
        if not bucket:
            return []
        idx = rng.choice(len(bucket), size=min(k, len(bucket)), replace=False)
        return [bucket[int(i)] for i in idx]

    def __len__(self) -> int:
        return sum(len(b) for b in self._results.values())

    def save(self, path: str | os.PathLike) -> None:
        """Write the recorded (tool, call, result) triples as JSON lines, atomically."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            for tool, bucket in self._results.items():
                for call, result in bucket:
                    f.write(json.dumps({"tool": tool, "call": call, "result": result}) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, per_tool: int = 64) -> ResultBank:
        """A bank of the JSON lines at `path`: ``{"tool", "call", "result"}`` per line, as `save`
        writes them; `call` is the call's text (``CALL name {json}``) and `result` the tool's JSON
        result. Lines recorded from any source of real interactions work."""
        bank = cls(per_tool)
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    tool, call, result = entry["tool"], entry["call"], entry["result"]
                    if not isinstance(json.loads(result), dict):
                        raise ValueError("result is not a JSON object")
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{n}: not a recorded result ({e})") from None
                bank.add_text(tool, call, result)
        return bank
