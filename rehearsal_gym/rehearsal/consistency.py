"""Scoring a rehearsed episode in the world the agent saw ("consistent" verifier).

In a rehearsal the tool results are imagined, so a value the task asks for (a price, a sum, an
order's status) is usually not the real one: the real verifier then fails an agent that did
everything right but copy a number it was never shown. The consistent verifier asks instead what
the oracle would have done had the tools answered as they did for the agent:

0. The facts the oracle decides on (a Retail order's status) are taken from the results the agent
   was shown (`Family.shown_task`), so the oracle takes the decision the shown world calls for (a
   refusal where the shown status forbids the write) and the backends below hold those facts.
1. The oracle's calls are replayed on the backend, giving its results.
2. Walking those calls in order, each one must have been made by the agent (same tool, same
   arguments) after argument values that came from an earlier result are replaced by the value the
   agent was shown in that place. The shown result of that call then maps each real result value
   to the shown one in the same place (objects by field; a record in a list that has a field the
   request names, such as the holding of the symbol to sell, lines up with the shown record of that
   name wherever it stands, or with none; other list members by position, see `align`).
3. The expected answer is the oracle's with that mapping applied (a number or keyword that came
   from a result is replaced by the shown value); the expected state is the re-planned calls
   replayed on the backend.

If the agent did not make one of the re-planned calls, the oracle's expectation with the shown facts
(step 0) stands. A value is only taken as coming from a result when it is not written in the request
(so a number the user gave never follows an imagined result). The mapping is by value, so two
different result fields with the same real value share one mapping; that is the price of needing no
per-task dataflow.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rehearsal_gym.core.protocol import ToolCall

_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")

Trace = Sequence[tuple[ToolCall, Mapping[str, Any]]]


def leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(path, scalar) for every scalar inside nested dicts and lists."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))
    else:
        yield path, value


def align(real: Any, shown: Any, request: str) -> Any:
    """`shown` rearranged so that each place in `real` finds its counterpart at the same path.

    A record (an object in a list) of `real` that has a string field written in the request (the
    holding of the symbol the user names, the item of the product they name) lines up with the
    first shown record that has the same value in that field, wherever it stands, or with none;
    the other records line up by position with shown records no such match claimed. Lists come
    back as {position in real: shown record}, which `leaves` addresses like a list.
    """
    if isinstance(real, Mapping) and isinstance(shown, Mapping):
        return {k: align(v, shown[k], request) for k, v in real.items() if k in shown}
    if not (isinstance(real, list | tuple) and isinstance(shown, list | tuple)):
        return shown
    match = _named_matches(real, shown, request)
    claimed = set(match.values())
    out = {}
    for i, record in enumerate(real):
        j = match.get(i, i if i not in claimed else None)
        if j is not None and j < len(shown):
            out[i] = align(record, shown[j], request)
    return out


def premise_breaks(real: Any, shown: Any, request: str) -> list[str]:
    """The request's values that name a record of `real` with no single counterpart in `shown`:
    none (the holding of the symbol the user asks to sell, missing from an imagined account) or more
    than one (that symbol listed twice). See `align` for how records line up.

    Such a world contradicts the task (the user holds the symbol, once), so there the oracle, and
    with it the consistent verifier, has nothing to re-plan on.
    """
    if isinstance(real, Mapping):
        if not isinstance(shown, Mapping):
            return []
        breaks = []
        for k, v in real.items():
            if k in shown:
                breaks += premise_breaks(v, shown[k], request)
            elif isinstance(v, list | tuple):  # the whole list is missing: every named record is
                breaks += premise_breaks(v, [], request)
        return breaks
    if not (isinstance(real, list | tuple) and isinstance(shown, list | tuple)):
        return []
    breaks = []
    for i, j in _named_matches(real, shown, request).items():
        names = _names(real[i], request)
        twice = [o for o in shown if isinstance(o, Mapping) and any(_same(o.get(f), v) for f, v in names)]
        if j is None or len(twice) > 1:
            breaks += [v for _, v in names]
        else:
            breaks += premise_breaks(real[i], shown[j], request)
    return breaks


def _names(record: Any, request: str) -> list[tuple[Any, str]]:
    """(field, value) of a record's string fields written in the request."""
    if not isinstance(record, Mapping):
        return []
    return [(f, v) for f, v in record.items() if isinstance(v, str) and in_request(v, request)]


def _same(a: Any, b: Any) -> bool:
    return value_key(a) is not None and value_key(a) == value_key(b)


def _named_matches(real: Sequence, shown: Sequence, request: str) -> dict[int, int | None]:
    """For each record of `real` with a string field written in the request: the position of the
    first shown record (not yet matched) with the same value in such a field, or None."""
    match: dict[int, int | None] = {}
    for i, record in enumerate(real):
        names = _names(record, request)
        if names:
            match[i] = next(
                (
                    j
                    for j, other in enumerate(shown)
                    if j not in match.values()
                    and isinstance(other, Mapping)
                    and any(_same(other.get(f), v) for f, v in names)
                ),
                None,
            )
    return match


def value_key(value: Any) -> tuple[str, Any] | None:
    """A comparable key for a scalar (numbers by value, strings case-folded); None for others."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return ("number", round(float(value), 6)) if math.isfinite(value) else None
    if isinstance(value, str):
        return ("text", value.strip().casefold())
    return None


def in_request(value: Any, request: str) -> bool:
    """Whether a scalar is written in the request (such a value never comes from a result).

    A string counts where it stands as a whole token run, not inside a longer word or id: "O12"
    is not written in a request that names order "O123", "pen" not in "pending".
    """
    if isinstance(value, str):
        text = value.strip().casefold()
        return bool(text) and re.search(rf"(?<!\w){re.escape(text)}(?!\w)", request.casefold()) is not None
    key = value_key(value)
    if key is None:
        return False
    return any(math.isclose(float(m), key[1], abs_tol=1e-9) for m in _NUMBER_RE.findall(request))


def replan(oracle: Trace, seen: Trace, request: str) -> tuple[list[ToolCall], dict] | None:
    """The oracle's calls re-planned in the world the agent saw, and the real -> shown value map.

    `oracle`: the oracle's calls with their real results; `seen`: the agent's calls with the
    results it was shown. None if the agent did not make one of the re-planned calls.
    """
    mapping: dict[tuple[str, Any], Any] = {}
    calls = []
    for call, real in oracle:
        args = {k: substitute(v, mapping) for k, v in call.arguments.items()}
        planned = ToolCall(call.name, args)
        shown = next((result for made, result in seen if made == planned), None)
        if shown is None:
            return None
        calls.append(planned)
        shown_leaves = dict(leaves(align(real, shown, request)))
        for path, value in leaves(real):
            key = value_key(value)
            if key is None or path not in shown_leaves or in_request(value, request):
                continue
            if key not in mapping:  # the first result a value appears in is its source
                mapping[key] = shown_leaves[path]
    return calls, mapping


def substitute(value: Any, mapping: Mapping[tuple[str, Any], Any]) -> Any:
    """`value` with the real -> shown map applied to it and to the scalars inside it."""
    if isinstance(value, Mapping):
        return {k: substitute(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, mapping) for v in value]
    key = value_key(value)
    shown = mapping.get(key) if key is not None else None
    return value if shown is None or value_key(shown) == key else shown  # same value: keep its spelling


def consistent_answer(answer_kind: str, answer_key: str, expected: str, mapping: Mapping) -> tuple[str, str]:
    """(answer_key, expected answer) with values that came from a result replaced by the shown ones.

    Number answers: the first number of the expected answer. Keyword answers: the keyword.
    """
    if answer_kind == "keyword":
        shown = mapping.get(value_key(answer_key))
        return (str(shown), expected) if shown is not None else (answer_key, expected)
    if answer_kind == "number":
        match = _NUMBER_RE.search(expected)
        if match is not None:
            want = float(match.group())
            close = [
                (abs(real - want), shown)
                for (kind, real), shown in mapping.items()
                if kind == "number" and math.isclose(real, want, rel_tol=1e-3, abs_tol=1e-3)
            ]
            if close:
                return answer_key, str(min(close, key=lambda c: c[0])[1])
    return answer_key, expected
