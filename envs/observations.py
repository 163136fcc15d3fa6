"""What a tool env shows: observation text, its space, and the read-only records of its infos.

The space is gymnasium's `Text`, made right for `AsyncVectorEnv`:

gymnasium 1.4's `AsyncVectorEnv(shared_memory=True)` (the default of
``gym.make_vec(..., vectorization_mode="async")``) reads its observation buffer once, at
construction, with `read_from_shared_memory`, and returns that object after every step: for a
`Box` it is a numpy view that follows the buffer, but for `Text` it is a tuple of strings decoded
from the still-empty buffer, so every observation comes back as ``"000..."`` (character 0 of the
charset, repeated). `ObservationText` registers a reader that returns a live view instead: a
sequence whose items decode the buffer when read, and whose copy (``copy=True``, the default,
deep-copies the observations) is a plain tuple of the current strings.
"""

from __future__ import annotations

import copy
import json
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory

CHARSET = string.printable
"""Characters of observations and actions (printable ASCII plus whitespace)."""
MAX_OBS_CHARS = 4096
"""Longest observation; longer tool results are cut with an explicit marker."""


class ObservationText(spaces.Text):
    """`gymnasium.spaces.Text` whose shared-memory read in async vector envs is live."""


class SharedTexts(Sequence[str]):
    """The strings of a shared `Text` buffer, decoded on every read."""

    def __init__(self, space: spaces.Text, shared_memory, n: int) -> None:
        self.space, self.n = space, n
        self.data = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(self.n)))
        chars, size = self.space.character_list, len(self.space.character_set)
        return "".join(chars[v] for v in self.data[i] if v < size)

    def __deepcopy__(self, memo) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@read_from_shared_memory.register(ObservationText)
def _read_live_text(space: ObservationText, shared_memory, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


def to_observation(text: str) -> str:
    """Make text fit the observation space: ASCII-escaped and at most MAX_OBS_CHARS long."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if c in CHARSET else " " for c in text)
    if len(text) > MAX_OBS_CHARS:  # keep a prefix, and say exactly how many characters were cut
        keep = MAX_OBS_CHARS
        while keep + len(marker := f" ...[cut {len(text) - keep} chars]") > MAX_OBS_CHARS:
            keep = MAX_OBS_CHARS - len(marker)
        text = text[:keep] + marker
    return text or " "


def result_text(result: Mapping[str, Any]) -> str:
    """The JSON text of a tool result (a dict or an info `Record`)."""
    return json.dumps(result if isinstance(result, dict) else dict(result), ensure_ascii=True)


class Record(Mapping[str, Any]):
    """A read-only, picklable snapshot of a JSON-like mapping, used for ``info`` entries.

    Not a ``dict``, so Gymnasium's vector envs keep it whole instead of splitting its fields into
    typed arrays (which fails when two sub-envs hold different types under one key); unlike
    ``types.MappingProxyType`` it survives ``copy.deepcopy`` and ``pickle`` (SB3's DummyVecEnv
    and SubprocVecEnv). The contents are deep-copied, so nothing reaches the env's own state.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", copy.deepcopy(dict(data)))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Record is read-only; copy it with dict(record)")

    def __reduce__(self):
        return (Record, (self._data,))

    def __repr__(self) -> str:
        return f"Record({self._data!r})"
