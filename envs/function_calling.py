"""Function calling (like BFCL): a registry of real Python functions; tasks need 1-3 calls.

The verifier checks both the calls (every call of the oracle's solution was made with matching
arguments, numbers within tolerance) and the final answer.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rehearsal_gym.core.protocol import ToolCall, ToolSpec, format_answer, format_call

from .base import Backend, Family, Task, ToolEnv, ToolError

_NUM = {"type": "number"}
_DATE = {"type": "string", "maxLength": 10}
UNITS = {"km": "kilometers", "mi": "miles", "kg": "kilograms", "lb": "pounds", "m": "meters", "ft": "feet"}
_TO_BASE = {"km": 1000.0, "mi": 1609.344, "m": 1.0, "ft": 0.3048, "kg": 1.0, "lb": 0.45359237}
_DIMENSION = {"km": "length", "mi": "length", "m": "length", "ft": "length", "kg": "mass", "lb": "mass"}
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
WORDS = ("planet", "garden", "silver", "rocket", "window", "marble", "forest", "candle", "bridge", "puzzle")


def _spec(name: str, description: str, props: dict[str, Any]) -> ToolSpec:
    schema = {"type": "object", "properties": props, "required": list(props)}
    return ToolSpec(name, description, schema)


TOOLS = {
    s.name: s
    for s in [
        _spec("add", "a + b", {"a": _NUM, "b": _NUM}),
        _spec("multiply", "a * b", {"a": _NUM, "b": _NUM}),
        _spec("percent_of", "percent % of value", {"percent": _NUM, "value": _NUM}),
        _spec(
            "convert_units",
            "convert a length or mass",
            {"value": _NUM, "from_unit": {"enum": list(UNITS)}, "to_unit": {"enum": list(UNITS)}},
        ),
        _spec("days_between", "days from start to end date", {"start": _DATE, "end": _DATE}),
        _spec(
            "add_days",
            "date plus a number of days",
            {"date": _DATE, "days": {"type": "integer", "minimum": -100000, "maximum": 100000}},
        ),
        _spec("weekday", "day of the week of a date", {"date": _DATE}),
        _spec("reverse_text", "text reversed", {"text": {"type": "string", "maxLength": 200}}),
    ]
}


def _date(value: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise ToolError(f"{name} must be a date YYYY-MM-DD, got {value[:20]!r}") from None


def _convert(value: float, from_unit: str, to_unit: str) -> float:
    if _DIMENSION[from_unit] != _DIMENSION[to_unit]:
        raise ToolError(
            f"cannot convert {from_unit} ({_DIMENSION[from_unit]}) to {to_unit} ({_DIMENSION[to_unit]})"
        )
    return round(value * _TO_BASE[from_unit] / _TO_BASE[to_unit], 4)


def _add_days(date: str, days: int) -> dict[str, Any]:
    try:
        return {"date": (_date(date, "date") + dt.timedelta(days=days)).isoformat()}
    except OverflowError:
        raise ToolError("resulting date is out of range") from None


FUNCTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "add": lambda a, b: {"result": round(a + b, 4)},
    "multiply": lambda a, b: {"result": round(a * b, 4)},
    "percent_of": lambda percent, value: {"result": round(percent * value / 100, 4)},
    "convert_units": lambda value, from_unit, to_unit: {"result": _convert(value, from_unit, to_unit)},
    "days_between": lambda start, end: {"days": (_date(end, "end") - _date(start, "start")).days},
    "add_days": _add_days,
    "weekday": lambda date: {"weekday": WEEKDAYS[_date(date, "date").weekday()]},
    "reverse_text": lambda text: {"result": text[::-1]},
}


class FunctionRegistry(Backend):
    """Executes the registry's functions and records every successful call."""

    tools = TOOLS

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def call(self, call: ToolCall) -> dict[str, Any]:
        try:
            result = FUNCTIONS[call.name](**call.arguments)
        except OverflowError:
            raise ToolError("number out of range") from None
        if any(isinstance(v, float) and not np.isfinite(v) for v in result.values()):
            raise ToolError("result is not a finite number")
        self.calls.append(call.to_dict())
        return result

    def state(self) -> list[dict[str, Any]]:
        return list(self.calls)


def _same_args(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool):
            if not np.isclose(x, y, rtol=1e-3, atol=1e-3):
                return False
        elif x != y:
            return False
    return True


def _random_date(rng: np.random.Generator) -> dt.date:
    return dt.date(2020, 1, 1) + dt.timedelta(days=int(rng.integers(0, 2000)))


class FunctionCallingFamily(Family):
    name = "function_calling"
    tools = TOOLS
    templates = ("unit", "days", "weekday", "shift_weekday", "percent", "reverse", "scale_convert", "chain")

    def make_backend(self, task: Task) -> FunctionRegistry:
        return FunctionRegistry()

    def state_matches(self, state: Any, expected: Any) -> bool:
        """Every call of the oracle's solution was made (extra calls are allowed)."""
        return all(
            any(c["name"] == e["name"] and _same_args(c["arguments"], e["arguments"]) for c in state)
            for e in expected
        )

    def draw_task(self, rng: np.random.Generator, task_id: str) -> Task:
        template = self.templates[int(rng.integers(len(self.templates)))]
        p: dict[str, Any]
        if template == "unit":
            a, b = [("km", "mi"), ("mi", "km"), ("kg", "lb"), ("lb", "kg"), ("m", "ft"), ("ft", "m")][
                int(rng.integers(6))
            ]
            p = {"value": int(rng.integers(1, 500)), "from_unit": a, "to_unit": b}
            text = f"How many {UNITS[b]} is {p['value']} {UNITS[a]}?"
            kind, rule = "number", "convert with convert_units, then answer the result"
        elif template == "days":
            d1 = _random_date(rng)
            d2 = d1 + dt.timedelta(days=int(rng.integers(1, 400)))
            p = {"start": d1.isoformat(), "end": d2.isoformat()}
            text = f"How many days are there from {p['start']} to {p['end']}?"
            kind, rule = "number", "use days_between with the earlier date as start"
        elif template == "weekday":
            p = {"date": _random_date(rng).isoformat()}
            text = f"What day of the week is {p['date']}?"
            kind, rule = "keyword", "call weekday on the date"
        elif template == "shift_weekday":
            p = {"date": _random_date(rng).isoformat(), "days": int(rng.integers(2, 200))}
            text = f"What day of the week is {p['days']} days after {p['date']}?"
            kind, rule = "keyword", "first add_days, then weekday of the new date"
        elif template == "percent":
            p = {"percent": int(rng.integers(1, 100)), "value": int(rng.integers(10, 1000))}
            text = f"What is {p['percent']}% of {p['value']}?"
            kind, rule = "number", "use percent_of"
        elif template == "reverse":
            p = {"text": WORDS[int(rng.integers(len(WORDS)))] + str(int(rng.integers(10, 100)))}
            text = f"Reverse the text '{p['text']}'."
            kind, rule = "keyword", "use reverse_text and answer its result exactly"
        elif template == "scale_convert":
            a, b = [("lb", "kg"), ("kg", "lb")][int(rng.integers(2))]
            p = {
                "value": int(rng.integers(1, 60)),
                "from_unit": a,
                "to_unit": b,
                "count": int(rng.integers(2, 20)),
            }
            text = f"A box weighs {p['value']} {UNITS[a]}. How many {UNITS[b]} do {p['count']} boxes weigh?"
            kind, rule = "number", "convert one box first, then multiply by the count"
        else:  # chain
            p = {
                "a": int(rng.integers(1, 100)),
                "b": int(rng.integers(1, 100)),
                "c": int(rng.integers(2, 10)),
            }
            p["percent"] = int(rng.integers(5, 95))
            text = (
                f"Add {p['a']} and {p['b']}, multiply the sum by {p['c']}, then take {p['percent']}% of that."
            )
            kind, rule = "number", "add, then multiply, then percent_of, each on the previous result"
        task = Task(task_id, self.name, template, text, int(rng.integers(2**31)), p, kind, "", rule)
        if kind == "keyword":
            answer = self.oracle(task)[-1].split(" ", 1)[1]
            task = Task(task_id, self.name, template, text, task.world_seed, p, kind, answer, rule)
        return task

    def oracle(self, task: Task) -> list[str]:
        p, f = task.params, FUNCTIONS
        calls: list[tuple[str, dict[str, Any]]]
        if task.template == "unit":
            calls = [("convert_units", dict(p))]
        elif task.template == "days":
            calls = [("days_between", dict(p))]
        elif task.template == "weekday":
            calls = [("weekday", dict(p))]
        elif task.template == "shift_weekday":
            new_date = f["add_days"](**p)["date"]
            calls = [("add_days", dict(p)), ("weekday", {"date": new_date})]
        elif task.template == "percent":
            calls = [("percent_of", dict(p))]
        elif task.template == "reverse":
            calls = [("reverse_text", dict(p))]
        elif task.template == "scale_convert":
            one = {k: p[k] for k in ("value", "from_unit", "to_unit")}
            calls = [
                ("convert_units", one),
                ("multiply", {"a": f["convert_units"](**one)["result"], "b": p["count"]}),
            ]
        else:
            s = f["add"](p["a"], p["b"])["result"]
            m = f["multiply"](s, p["c"])["result"]
            calls = [("add", {"a": p["a"], "b": p["b"]}), ("multiply", {"a": s, "b": p["c"]})]
            calls.append(("percent_of", {"percent": p["percent"], "value": m}))
        last = f[calls[-1][0]](**calls[-1][1])
        answer = next(iter(last.values()))
        return [format_call(n, a) for n, a in calls] + [format_answer(str(answer))]


class FunctionCallingEnv(ToolEnv):
    __doc__ = ToolEnv.__doc__
    family = FunctionCallingFamily()
