"""Declarative field checks for config dataclasses.

A field's constraint is part of its type: ``lr: PositiveFloat = 2e-5``, ``mode: Literal["a", "b"]``.
`validate(config)` checks every field of a dataclass (nested dataclasses included) against its
annotation and raises a ValueError that names the field; classes call it from ``__post_init__``
and keep only their cross-field rules there.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal


@dataclass(frozen=True)
class Range:
    """Numbers in [low, high] (or (low, high] with `open_low`), finite."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False

    def problem(self, value: Any, kind: type) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int if kind is int else int | float):
            return f"must be {'an int' if kind is int else 'a number'}"
        if not math.isfinite(value):
            return "must be finite"
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return self.describe(kind)
        if self.high is not None and value > self.high:
            return self.describe(kind)
        return None

    def describe(self, kind: type) -> str:
        noun = "an int" if kind is int else "a finite number"
        if self.low == 0 and self.open_low:
            return f"must be a positive {'int' if kind is int else 'finite number'}"
        if self.high is not None:
            return f"must be {noun} in [{self.low}, {self.high}]"
        return f"must be {noun} >= {self.low}"


PositiveInt = Annotated[int, Range(0, open_low=True)]
NonNegativeInt = Annotated[int, Range(0)]
PositiveFloat = Annotated[float, Range(0, open_low=True)]
NonNegativeFloat = Annotated[float, Range(0)]
UnitFloat = Annotated[float, Range(0, 1)]


def problem(value: Any, hint: Any) -> str | None:
    """Why `value` does not fit the type `hint` (Literal, Annotated with a Range, Optional, a
    dataclass, a plain type), or None."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        base, *extras = args
        for extra in extras:
            if isinstance(extra, Range):
                return extra.problem(value, base)
        return problem(value, base)
    if origin is Literal:
        return None if value in args else f"must be one of {args}"
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return problem(value, inner[0]) if len(inner) == 1 else None
    if origin is tuple and args and args[-1] is Ellipsis:
        if not isinstance(value, tuple):
            return f"must be a tuple, got {type(value).__name__}"
        return next((f"item {v!r} {p}" for v in value if (p := problem(v, args[0]))), None)
    if hint is bool:
        return None if isinstance(value, bool) else "must be True or False"
    if hint in (int, float):
        return Range().problem(value, hint)
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    return None


def base_type(hint: Any) -> tuple[Any, bool]:
    """(the plain type under Annotated / Literal / Optional, whether None is allowed) of a field's
    annotation: ``PositiveInt | None`` -> (int, True); a Literal gives its values' type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return base_type(args[0])
    if origin is Literal:
        return type(args[0]), False
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        kind, _ = base_type(inner[0]) if len(inner) == 1 else (Any, False)
        return kind, type(None) in args
    return hint, False


def validate(config: Any, where: str | None = None) -> None:
    """Check each field of the dataclass `config` against its annotation (see `problem`)."""
    where = where or type(config).__name__
    hints = typing.get_type_hints(type(config), include_extras=True)
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            validate(value, f"{where}.{f.name}")
            continue
        reason = problem(value, hints[f.name])
        if reason:
            raise ValueError(f"{where}.{f.name} {reason}, got {value!r}")
