"""Recall probe: does the model copy the values its turns need, from the request and from tool results?

Most of a tool-using agent's turns copy a value it was shown: an order id from the customer's request
into a call, an order's status from ``get_order``'s result into the answer, a holding's quantity from
``get_account``'s result into ``place_order``. This probe replays oracle transcripts teacher-forced
and asks, for every such value in an agent turn, whether each of its tokens is the model's greedy next
token. Values are split by where they were shown: in the request (the task turn), or only in an
earlier tool result. A model can be perfect at the first and at chance on the second; then its
sampled successes on a task that hinges on a result's value are lucky guesses, and reinforcing them
teaches the value's prior, not the lookup (docs/results.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import torch

from rehearsal_gym.core.model import LM, model_device
from rehearsal_gym.rehearsal.demos import _ENTITY_RE, _WORD_RE, Demo, agent_sequence

SOURCES = ("request", "result")
_VALUE_RE = re.compile(f"{_ENTITY_RE.pattern}|{_WORD_RE.pattern}")


def _leaves(value: Any) -> list[str]:
    """The scalar values of a parsed JSON result, as text (keys excluded)."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    if isinstance(value, bool) or value is None:
        return []
    return [json.dumps(value) if not isinstance(value, str) else value]


def copied_values(demo: Demo) -> list[tuple[int, int, int, str]]:
    """(turn index, start, end, source) of each value an agent turn copies: a match of the entity
    pattern found in the request (source "request"), or a match of the entity or word pattern found
    among the leaf values of an earlier tool result and not in the request (source "result").
    Words of the agent's own phrasing ("Sorry", "Sold") are in neither and are not counted."""
    request = demo.transcript[0][1].split("Request:", 1)[-1]
    from_request = _values(request)
    shown: set[str] = set()
    out = []
    for j, (role, text) in enumerate(demo.transcript):
        if role == "env":
            try:
                leaves = _leaves(json.loads(text))
            except json.JSONDecodeError:
                continue
            shown |= set(leaves) | {v for leaf in leaves for v in _values(leaf)}
        elif role == "agent":
            for m in _VALUE_RE.finditer(text):
                value = m.group().rstrip(".")
                span = (j, m.start(), m.start() + len(value))
                if _ENTITY_RE.fullmatch(value) and value in from_request:
                    out.append((*span, "request"))
                elif value in shown and value not in from_request:
                    out.append((*span, "result"))
    return out


def _values(text: str) -> set[str]:
    """Entity and word matches of `text`, a sentence's full stop dropped ("A241." -> "A241")."""
    return {m.rstrip(".") for m in _VALUE_RE.findall(text)}


def _token_spans(lm: LM, text: str) -> list[tuple[int, int]] | None:
    """Character span of each token of `text` (None when the tokens do not decode back to it)."""
    spans, at = [], 0
    for t in lm.encode(text):
        piece = lm.decode([t])
        spans.append((at, at + len(piece)))
        at += len(piece)
    return spans if at == len(text) else None


@torch.no_grad()
def recall_counts(lm: LM, demos: Sequence[Demo]) -> dict[tuple[str, str], list[int]]:
    """{(template, source): [values copied right, values]} over the demos, teacher-forced: a value is
    right when every token overlapping it is the model's greedy next token."""
    was_training = lm.model.training
    lm.model.eval()
    counts: dict[tuple[str, str], list[int]] = {}
    try:
        for demo in demos:
            values = copied_values(demo)
            if not values:
                continue
            ids, _ = agent_sequence(lm, demo)
            x = torch.tensor([ids[: lm.max_len]], device=model_device(lm.model))
            right = lm.model(input_ids=x).logits[0, :-1].argmax(-1) == x[0, 1:]  # right[p-1]: token p
            starts, at = [], len(lm.start)
            for role, text in demo.transcript:  # where each turn's text tokens begin in `ids`
                starts.append(at + len(lm.head(role)))
                at += len(lm.turn(role, text))
            for j, start, end, source in values:
                spans = _token_spans(lm, demo.transcript[j][1])
                if spans is None:
                    continue
                positions = [starts[j] + k for k, (a, b) in enumerate(spans) if a < end and b > start]
                if not positions or positions[-1] >= x.shape[1]:
                    continue
                entry = counts.setdefault((demo.template, source), [0, 0])
                entry[0] += int(all(right[p - 1] for p in positions))
                entry[1] += 1
    finally:
        lm.model.train(was_training)
    return counts
