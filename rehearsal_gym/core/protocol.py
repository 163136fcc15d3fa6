"""The tool-call protocol: one text format for an agent turn, and its parser.

A turn is exactly one of::

    CALL <tool_name> <JSON object of arguments>
    ANSWER <free text>

`parse_turn` never raises on any input string: it returns a `ToolCall`, a `FinalAnswer`
or a `ParseError` whose message says what was wrong and what was expected. Arguments are
checked against the tool's JSON-schema parameters (a documented subset: type, properties,
required, additionalProperties, enum, minimum, maximum, maxLength, items). No `eval`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_TURN_CHARS = 4096
"""Longest accepted turn; longer text is rejected (never truncated and executed)."""
MAX_JSON_DEPTH = 16
"""Deepest accepted nesting of arguments."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEAD_RE = re.compile(r"(\S+)\s*(.*)", re.DOTALL)
_JSON_TYPES = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "object": "object",
    "array": "array",
    "null": "null",
}


@dataclass(frozen=True)
class ToolSpec:
    """A tool the agent may call: its name, a one-line description and JSON-schema parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ValueError(f"tool name must match {_NAME_RE.pattern!r}, got {self.name!r}")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type 'object'")

    @property
    def required(self) -> list[str]:
        return list(self.parameters.get("required", []))

    def signature(self) -> str:
        """Compact text form for prompts, e.g. ``get_order(order_id: string) - Look up an order``."""
        props = self.parameters.get("properties", {})
        args = []
        for name, schema in props.items():
            kind = "|".join(map(str, schema["enum"])) if "enum" in schema else schema.get("type", "any")
            args.append(f"{name}: {kind}" + ("" if name in self.required else "?"))
        return f"{self.name}({', '.join(args)}) - {self.description}"


@dataclass(frozen=True)
class ToolCall:
    """A parsed, schema-valid call of a known tool."""

    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class FinalAnswer:
    """The agent's final answer; ends the episode."""

    text: str


@dataclass(frozen=True)
class ParseError:
    """Why a turn could not be used; `message` is shown to the agent."""

    message: str


Turn = ToolCall | FinalAnswer | ParseError

USAGE = "Write one turn: CALL <tool> {json arguments}  or  ANSWER <text>."


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The canonical text of a tool call (inverse of `parse_turn`)."""
    return f"CALL {name} {json.dumps(dict(arguments), ensure_ascii=True)}"


def format_answer(text: str) -> str:
    """The canonical text of a final answer (inverse of `parse_turn`)."""
    return f"ANSWER {text}"


def quote(text: str, limit: int = 40) -> str:
    """A short ASCII-safe quotation of untrusted text for error messages."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return ascii(shown)


def _tool_map(tools: Mapping[str, ToolSpec] | Iterable[ToolSpec]) -> Mapping[str, ToolSpec]:
    if isinstance(tools, Mapping):
        return tools
    return {t.name: t for t in tools}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in arguments")


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a JSON value, stopping early once `limit` is passed."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def parse_turn(text: Any, tools: Mapping[str, ToolSpec] | Iterable[ToolSpec]) -> Turn:
    """Parse one agent turn. Never raises; bad input gives a `ParseError`."""
    tools = _tool_map(tools)
    if not isinstance(text, str):
        return ParseError(f"a turn must be a string, got {type(text).__name__}. {USAGE}")
    if len(text) > MAX_TURN_CHARS:
        return ParseError(f"turn is {len(text)} characters; the limit is {MAX_TURN_CHARS}. {USAGE}")
    stripped = text.strip()
    if not stripped:
        return ParseError(f"empty turn. {USAGE}")
    keyword, rest = _HEAD_RE.match(stripped).groups()
    if keyword == "ANSWER":
        answer = rest.strip()
        if not answer:
            return ParseError("ANSWER needs text after it, e.g. 'ANSWER 42'.")
        return FinalAnswer(answer)
    if keyword != "CALL":
        return ParseError(f"turn must start with CALL or ANSWER, got {quote(keyword, 20)}. {USAGE}")
    rest = rest.lstrip()
    match = _NAME_RE.match(rest)
    if not match:
        return ParseError(f"CALL must be followed by a tool name, got {quote(rest, 20)}. {USAGE}")
    name = match.group(0)
    if name not in tools:
        return ParseError(f"unknown tool {quote(name)}; tools are: {', '.join(sorted(tools))}")
    spec = tools[name]
    raw = rest[match.end() :].strip()
    if not raw:
        return ParseError(f"tool {name!r} needs a JSON object of arguments, e.g. CALL {name} {{}}")
    try:
        decoder = json.JSONDecoder(parse_constant=_reject_constant)
        arguments, end = decoder.raw_decode(raw)
    except json.JSONDecodeError as e:
        return ParseError(f"arguments are not valid JSON at char {e.pos}: {e.msg}")
    except (ValueError, RecursionError) as e:
        return ParseError(f"arguments are not valid JSON: {str(e)[:80]}")
    if raw[end:].strip():
        return ParseError(f"unexpected text after the arguments at char {end}: {quote(raw[end:], 20)}")
    if not isinstance(arguments, dict):
        return ParseError(f"arguments must be a JSON object, got {_json_type(arguments)}")
    if _depth(arguments, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return ParseError(f"arguments are nested deeper than {MAX_JSON_DEPTH} levels")
    error = validate(arguments, spec.parameters, where="argument")
    if error:
        return ParseError(f"tool {name!r}: {error}. Signature: {spec.signature()}")
    return ToolCall(name, arguments)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _type_ok(value: Any, kind: str) -> bool:
    actual = _json_type(value)
    if kind == "number":
        return actual in ("integer", "number") and (actual == "integer" or math.isfinite(value))
    return actual == kind


def validate(value: Any, schema: Mapping[str, Any], where: str = "value") -> str | None:
    """Check `value` against a JSON-schema subset; return an error message or None.

    For objects, property errors name the property (``argument 'order_id' missing``); keys not
    in ``properties`` are rejected unless ``additionalProperties`` allows them (the default when a
    schema names no properties).
    Integers must fit in int64 (the backends store them in SQLite).
    """
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    if any(k not in _JSON_TYPES for k in kinds):
        raise ValueError(f"unsupported schema type {kind!r}")
    if schema.get("nullable") and value is None:  # OpenAPI's nullable, as transformers writes it
        return None
    if kinds and not any(_type_ok(value, k) for k in kinds):
        return f"{where} must be {' or '.join(kinds)}, got {_json_type(value)}"
    if _json_type(value) == "integer" and not INT64_MIN <= value <= INT64_MAX:
        return f"{where} is out of the 64-bit integer range"
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(json.dumps(v) for v in schema["enum"])
        return f"{where} must be one of {options}, got {quote(json.dumps(value), 30)}"
    if isinstance(value, str) and not _utf8_ok(value):
        return f"{where} contains invalid unicode (a lone surrogate)"
    if isinstance(value, str) and len(value) > schema.get("maxLength", MAX_TURN_CHARS):
        return f"{where} is {len(value)} characters; at most {schema['maxLength']} allowed"
    if _json_type(value) in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{where} must be >= {schema['minimum']}, got {value}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{where} must be <= {schema['maximum']}, got {value}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in value:
                return f"{where} {req!r} missing"
        for key, item in value.items():
            if not _utf8_ok(key):
                return f"{where} name contains invalid unicode (a lone surrogate)"
            if key in props:
                error = validate(item, props[key], where=f"{where} {key!r}")
                if error:
                    return error
            else:
                extra = schema.get("additionalProperties", "properties" not in schema)
                if not extra:
                    allowed = ", ".join(props) or "none"
                    return f"unexpected {where} {quote(key)}; allowed: {allowed}"
                error = validate(
                    item, extra if isinstance(extra, Mapping) else {}, where=f"{where} {quote(key)}"
                )
                if error:
                    return error
    if isinstance(value, list):
        for i, item in enumerate(value):
            error = validate(item, schema.get("items", {}), where=f"{where}[{i}]")
            if error:
                return error
    return None
