"""Labels of finished trajectories for skill data: why one failed, or which workflow succeeded."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rehearsal_gym.core.protocol import TOOL_CALL_OPEN, usage

if TYPE_CHECKING:
    from .base import Task

_JSON_NAME_RE = re.compile(r'"name"\s*:\s*"([A-Za-z_][A-Za-z0-9_]*)"')


def explain(task: Task, oracle_turns: Sequence[str], actions: Sequence[str], infos: Sequence[Mapping]) -> str:
    """State why a trajectory failed, or which workflow succeeded (labels for skill data).

    `actions` are the agent's turns and `infos` the step infos of the same episode.
    """
    fmt = "json" if any(TOOL_CALL_OPEN in a for a in actions) else "text"
    expected = [head(t) for t in oracle_turns]
    done = [head(a, fmt) for a in actions]
    success = bool(infos and infos[-1].get("success"))
    rule = f" Rule: {task.rule}" if task.rule else ""
    if success:
        return f"Workflow for {task.template}: {' -> '.join(done)}.{rule}"
    for i, info in enumerate(infos):
        if info.get("error"):
            return f"Turn {i + 1} was malformed ({info['error']}). Avoid: {usage(fmt)}{rule}"
    for i, (want, got) in enumerate(zip(expected, done, strict=False)):
        if want != got:
            return f"Turn {i + 1}: did {got} but the task needed {want}.{rule}"
    if len(done) < len(expected):
        return f"Stopped after {' -> '.join(done) or 'nothing'}; still needed {expected[len(done)]}.{rule}"
    last = infos[-1] if infos else {}
    if last.get("answer") is not None:
        return (
            f"Right tools, wrong outcome: answer {last['answer'][:60]!r} vs expected "
            f"{last.get('expected_answer', '')[:60]!r}; check the arguments against the request.{rule}"
        )
    return f"Ran out of turns after {len(done)} turns without an ANSWER.{rule}"


def head(turn: str, call_format: str = "text") -> str:
    """Short name of a turn: the tool name for a call, 'ANSWER' for an answer."""
    if call_format == "json":
        if TOOL_CALL_OPEN not in turn:
            return "ANSWER" if turn.strip() else "(empty)"
        name = _JSON_NAME_RE.search(turn)
        return name.group(1)[:40] if name else "(bad call)"
    parts = turn.strip().split(maxsplit=2)
    if not parts:
        return "(empty)"
    if parts[0] == "CALL" and len(parts) > 1:
        return parts[1]
    return parts[0][:20]
