"""The tool-call protocol: the text formats of an agent turn, and their parser.

Two call formats (`CALL_FORMATS`). ``"text"`` (the default model's) is exactly one of::

    CALL <tool_name> <JSON object of arguments>
    ANSWER <free text>

``"json"`` is the convention Qwen/Hermes-style instruct models are trained on::

    <tool_call>{"name": <tool_name>, "arguments": <JSON object>}</tool_call>

with optional text before the tag (the model's note to itself, ignored); a turn without a
``<tool_call>`` tag is the final answer, as plain text. One call per turn.

`parse_turn` never raises on any input string, in either format: it returns a `ToolCall`, a
`FinalAnswer` or a `ParseError` whose message says what was wrong and what was expected.
Arguments are checked against the tool's JSON-schema parameters (a documented subset: type,
properties, required, additionalProperties, enum, minimum, maximum, maxLength, items). No `eval`.
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

CALL_FORMATS = ("text", "json")
USAGE = "Write one turn: CALL <tool> {json arguments}  or  ANSWER <text>."
JSON_USAGE = (
    'Write one turn: <tool_call>{"name": <tool>, "arguments": {json arguments}}</tool_call>  '
    "or the final answer as plain text."
)
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def check_call_format(call_format: str) -> str:
    if call_format not in CALL_FORMATS:
        raise ValueError(f"call_format must be one of {CALL_FORMATS}, got {call_format!r}")
    return call_format


def usage(call_format: str = "text") -> str:
    """One line telling the agent how to write a turn in `call_format`."""
    return JSON_USAGE if check_call_format(call_format) == "json" else USAGE


def format_call(name: str, arguments: Mapping[str, Any], call_format: str = "text") -> str:
    """The canonical text of a tool call (inverse of `parse_turn`)."""
    args = json.dumps(dict(arguments), ensure_ascii=True)
    if check_call_format(call_format) == "json":
        return f'{TOOL_CALL_OPEN}{{"name": {json.dumps(name)}, "arguments": {args}}}{TOOL_CALL_CLOSE}'
    return f"CALL {name} {args}"


def format_answer(text: str, call_format: str = "text") -> str:
    """The canonical text of a final answer (inverse of `parse_turn`)."""
    return text if check_call_format(call_format) == "json" else f"ANSWER {text}"


def reformat(turn: str, tools: Mapping[str, ToolSpec] | Iterable[ToolSpec], call_format: str) -> str:
    """A text-format turn (as the built-in oracles write them) in `call_format`."""
    parsed = parse_turn(turn, tools)
    if isinstance(parsed, ToolCall):
        return format_call(parsed.name, parsed.arguments, call_format)
    if isinstance(parsed, FinalAnswer):
        return format_answer(parsed.text, call_format)
    raise ValueError(f"not a valid turn: {parsed.message}")


def tool_list(tools: Mapping[str, ToolSpec] | Iterable[ToolSpec], call_format: str = "text") -> str:
    """The tools as the agent is shown them: one signature per line (text format), or one JSON
    function schema per line inside ``<tools>`` with the Hermes instructions (json format)."""
    tools = _tool_map(tools)
    if check_call_format(call_format) == "text":
        return "\n".join(["Tools:"] + [spec.signature() for spec in tools.values()])
    schemas = [
        json.dumps(
            {
                "type": "function",
                "function": {"name": s.name, "description": s.description, "parameters": s.parameters},
            },
            ensure_ascii=True,
        )
        for s in tools.values()
    ]
    return "\n".join(
        ["You may call one function per turn. Function signatures, within <tools></tools>:", "<tools>"]
        + schemas
        + [
            "</tools>",
            "To call a function, write a JSON object with its name and arguments within "
            "<tool_call></tool_call> tags:",
            '<tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>',
            "When done, write the final answer as plain text.",
        ]
    )


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


def parse_turn(
    text: Any, tools: Mapping[str, ToolSpec] | Iterable[ToolSpec], call_format: str = "text"
) -> Turn:
    """Parse one agent turn written in `call_format`. Never raises; bad input gives a `ParseError`."""
    tools = _tool_map(tools)
    guide = usage(call_format)
    if not isinstance(text, str):
        return ParseError(f"a turn must be a string, got {type(text).__name__}. {guide}")
    if len(text) > MAX_TURN_CHARS:
        return ParseError(f"turn is {len(text)} characters; the limit is {MAX_TURN_CHARS}. {guide}")
    stripped = text.strip()
    if not stripped:
        return ParseError(f"empty turn. {guide}")
    if call_format == "json":
        return _parse_json_turn(stripped, tools)
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
    raw = rest[match.end() :].strip()
    if not raw:
        return ParseError(f"tool {name!r} needs a JSON object of arguments, e.g. CALL {name} {{}}")
    arguments = _json_value(raw, "arguments")
    if isinstance(arguments, ParseError):
        return arguments
    return _checked_call(name, arguments, tools)


def _json_value(raw: str, what: str) -> Any:
    """The one JSON value that is all of `raw`, or a ParseError (no NaN/Infinity, bounded depth)."""
    try:
        decoder = json.JSONDecoder(parse_constant=_reject_constant)
        value, end = decoder.raw_decode(raw)
    except json.JSONDecodeError as e:
        return ParseError(f"{what} are not valid JSON at char {e.pos}: {e.msg}")
    except (ValueError, RecursionError) as e:
        return ParseError(f"{what} are not valid JSON: {str(e)[:80]}")
    if raw[end:].strip():
        return ParseError(f"unexpected text after the {what} at char {end}: {quote(raw[end:], 20)}")
    if _depth(value, MAX_JSON_DEPTH + 1) > MAX_JSON_DEPTH + 1:
        return ParseError(f"{what} are nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def _call_end(body: str) -> int:
    """Where the closing tag of a call's body starts: right after its JSON value when the body
    opens with one (a string argument may itself contain the closing tag), else the first tag."""
    try:
        _, stop = json.JSONDecoder().raw_decode(body, len(body) - len(body.lstrip()))
    except (ValueError, RecursionError):
        return body.find(TOOL_CALL_CLOSE)
    at = len(body) - len(body[stop:].lstrip())
    return at if body.startswith(TOOL_CALL_CLOSE, at) else body.find(TOOL_CALL_CLOSE)


def _parse_json_turn(stripped: str, tools: Mapping[str, ToolSpec]) -> Turn:
    start = stripped.find(TOOL_CALL_OPEN)
    if start < 0:
        if TOOL_CALL_CLOSE in stripped:
            return ParseError(f"{TOOL_CALL_CLOSE} without {TOOL_CALL_OPEN}. {JSON_USAGE}")
        return FinalAnswer(stripped)
    body = stripped[start + len(TOOL_CALL_OPEN) :]
    end = _call_end(body)
    if end < 0:
        return ParseError(f"{TOOL_CALL_OPEN} is not closed by {TOOL_CALL_CLOSE}. {JSON_USAGE}")
    after = body[end + len(TOOL_CALL_CLOSE) :].strip()
    if TOOL_CALL_OPEN in after:
        return ParseError("one tool call per turn: write the next call after its result comes back")
    if after:
        return ParseError(f"unexpected text after {TOOL_CALL_CLOSE}: {quote(after, 20)}")
    obj = _json_value(body[:end].strip(), "tool call")
    if isinstance(obj, ParseError):
        return obj
    if not isinstance(obj, dict):
        return ParseError(f"a tool call must be a JSON object, got {_json_type(obj)}. {JSON_USAGE}")
    if set(obj) - {"name", "arguments"}:
        extra = ", ".join(quote(k, 20) for k in sorted(set(obj) - {"name", "arguments"}))
        return ParseError(f"unexpected key(s) {extra} in the tool call; it has 'name' and 'arguments'")
    name = obj.get("name")
    if not isinstance(name, str):
        return ParseError(f"the tool call needs a string 'name', got {_json_type(name)}")
    if name not in tools:
        return ParseError(f"unknown tool {quote(name)}; tools are: {', '.join(sorted(tools))}")
    if "arguments" not in obj:
        return ParseError(f"tool {name!r} needs 'arguments', a JSON object (may be {{}})")
    return _checked_call(name, obj["arguments"], tools)


def _checked_call(name: str, arguments: Any, tools: Mapping[str, ToolSpec]) -> Turn:
    """A ToolCall of known tool `name` once `arguments` pass its schema, else a ParseError."""
    spec = tools[name]
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
