"""The imagined results of the environment role: whether one is usable, how close it is to the
real one, and a record/replay cache of them (used by `SelfSimEnv`)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from rehearsal_gym.core.protocol import MAX_JSON_DEPTH, quote
from rehearsal_gym.core.sampling import Samples


def result_error(text: str, shapes: set[frozenset[str]]) -> tuple[dict[str, Any] | None, str | None]:
    """Parse an imagined result; return (result, None) or (None, why it is unusable).

    A result must be a JSON object whose keys are those of some real result of the tool
    (`shapes`), or ``{"error": <string>}`` as a refusing tool writes. Empty `shapes`: any object.
    """
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        return None, f"environment role wrote invalid JSON ({str(e)[:60]}): {quote(text, 60)}"
    if not isinstance(value, dict):
        return None, f"environment role wrote a JSON {type(value).__name__}, not an object: {quote(text, 60)}"
    keys = frozenset(value)
    if keys == {"error"} and isinstance(value["error"], str):
        return value, None
    if shapes and keys not in shapes:
        want = " or ".join(sorted("{" + ", ".join(sorted(s)) + "}" for s in shapes))
        return None, f"environment role wrote keys {sorted(keys)}; real results have {want}"
    if _depth(value) > MAX_JSON_DEPTH:
        return None, "environment role wrote JSON nested too deep"
    return value, None


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def fidelity(imagined: dict[str, Any], real: dict[str, Any]) -> dict[str, float]:
    """Exact match, share of the real result's fields reproduced, and share of imagined fields
    that the real result does not have (hallucinated)."""
    exact = float(json.dumps(imagined, sort_keys=True) == json.dumps(real, sort_keys=True))
    fields = float(np.mean([k in imagined and imagined[k] == v for k, v in real.items()])) if real else exact
    hallucinated = float(np.mean([k not in real for k in imagined])) if imagined else 0.0
    return {"exact": exact, "field_accuracy": fields, "hallucinated_fields": hallucinated}


class ImaginationCache:
    """Record/replay of imagined results, keyed by environment-role prompt ids and seed.

    `save` writes JSON lines; `ImaginationCache(path)` loads them, so a rehearsal can be replayed
    exactly (e.g. to debug a training run) even after the weights changed.
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.hits = 0
        if path is not None:
            with open(path) as f:
                for line in f:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry

    @staticmethod
    def key(prompt_ids: list[int], seed: int) -> str:
        return hashlib.sha256(json.dumps([prompt_ids, seed]).encode()).hexdigest()

    def get(self, key: str) -> Samples | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.hits += 1
        return Samples(entry["tokens"], entry["logprobs"], entry["stopped"])

    def put(self, key: str, samples: Samples) -> None:
        self.entries[key] = {
            "key": key,
            "tokens": samples.tokens,
            "logprobs": samples.logprobs,
            "stopped": samples.stopped,
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write all entries as JSON lines, atomically."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            for entry in self.entries.values():
                f.write(json.dumps(entry) + "\n")
        os.replace(tmp, path)

    def __len__(self) -> int:
        return len(self.entries)


def json_object(text: str) -> dict[str, Any]:
    """`text` as a JSON object, or {} when it is not one."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def canonical(text: str) -> str:
    """JSON text with sorted keys (to compare results), or `text` when it is not JSON."""
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except (json.JSONDecodeError, RecursionError):
        return text
