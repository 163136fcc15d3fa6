"""The turn grammar as a character automaton, and the valid-next-token masks it implies.

`TurnGrammar` accepts exactly the canonical turns of `rehearsal_gym.core.protocol` for a tool set::

    ANSWER <printable ASCII text>
    CALL <tool> {"key": value, "key2": value2}      (json.dumps spacing)

with keys restricted to the tool's parameters, required keys present before the object closes,
enum strings, ``maxLength`` and the JSON type of each top-level argument enforced, and each
top-level argument checked against its schema (`protocol.validate`, so also minimum/maximum) when
it ends. Nested values follow plain JSON syntax. A state is an immutable tuple, so a search can
branch from it; `step` returns None for a character that no valid turn could continue with.

`TokenMasker` turns the automaton into a boolean mask over a tokenizer's vocabulary (a trie walk
over the tokens' text), for MaskablePPO or constrained sampling: a token is allowed when its
text keeps the turn a viable prefix; the end token only when the turn is complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from rehearsal_gym.core.protocol import MAX_JSON_DEPTH, MAX_TURN_CHARS, ToolSpec, validate

PRINTABLE = frozenset(chr(c) for c in range(0x20, 0x7F))
_DIGITS = frozenset("0123456789")
_ESCAPES = frozenset('"\\/bfnrt')
_FIRST = {  # first character of a value of each JSON-schema type
    "string": '"',
    "integer": "-0123456789",
    "number": "-0123456789",
    "boolean": "tf",
    "object": "{",
    "array": "[",
    "null": "n",
}
# number sub-states after a character; None = the character does not continue the number
_NUMBER = {
    "sign": {**dict.fromkeys("0", "zero"), **dict.fromkeys("123456789", "int")},
    "zero": {".": "dot", "e": "exp", "E": "exp"},
    "int": {**dict.fromkeys(_DIGITS, "int"), ".": "dot", "e": "exp", "E": "exp"},
    "int_only": dict.fromkeys(_DIGITS, "int_only"),  # integer arguments: no fraction or exponent
    "sign_int": {**dict.fromkeys("0", "zero_only"), **dict.fromkeys("123456789", "int_only")},
    "zero_only": {},
    "dot": dict.fromkeys(_DIGITS, "frac"),
    "frac": {**dict.fromkeys(_DIGITS, "frac"), "e": "exp", "E": "exp"},
    "exp": {**dict.fromkeys(_DIGITS, "exp_int"), "+": "exp_sign", "-": "exp_sign"},
    "exp_sign": dict.fromkeys(_DIGITS, "exp_int"),
    "exp_int": dict.fromkeys(_DIGITS, "exp_int"),
}
_NUMBER_DONE = frozenset({"zero", "zero_only", "int", "int_only", "frac", "exp_int"})


class Json(NamedTuple):
    """Automaton state inside the arguments object of `tool`."""

    tool: str
    stack: str  # open containers, "o" object / "a" array; "" once the arguments object closed
    lex: str  # what comes next: key_or_close, key, key_str, colon, colon_space, value,
    #            value_or_close, after, comma_space, str, str_esc, num:<sub>, lit:<rest>
    key: str = ""  # the top-level key being written or whose value is being written
    seen: frozenset = frozenset()  # top-level keys written so far
    raw: str | None = None  # text of the current top-level value (validated when it ends)
    chars: int = 0  # length of the turn so far


class TurnGrammar:
    """Canonical turns for `tools` (see the module docstring)."""

    def __init__(self, tools: Mapping[str, ToolSpec] | Iterable[ToolSpec]) -> None:
        self.tools = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
        self._heads = [f"{name} {{" for name in self.tools]

    def initial(self) -> tuple:
        return ("head", "")

    def complete(self, state: tuple | Json) -> bool:
        """True when the text so far is a whole valid turn."""
        if isinstance(state, Json):
            return state.stack == ""
        return state[0] == "answer" and state[2]

    def accepts(self, text: str) -> bool:
        state = self.initial()
        for ch in text:
            state = self.step(state, ch)
            if state is None:
                return False
        return self.complete(state)

    def step(self, state: tuple | Json, ch: str) -> tuple | Json | None:
        if isinstance(state, Json):
            return self._json(state, ch)
        phase = state[0]
        if phase == "head":
            text = state[1] + ch
            if text == "ANSWER ":
                return ("answer", 7, False)
            if text == "CALL ":
                return ("name", "")
            return ("head", text) if "CALL ".startswith(text) or "ANSWER ".startswith(text) else None
        if phase == "answer":
            if ch not in PRINTABLE or state[1] >= MAX_TURN_CHARS:
                return None
            return ("answer", state[1] + 1, state[2] or ch != " ")
        if phase == "name":
            text = state[1] + ch
            for head in self._heads:
                if head == text:
                    return Json(head[:-2], "o", "key_or_close", chars=5 + len(text))
            return ("name", text) if any(h.startswith(text) for h in self._heads) else None
        return None

    # -- JSON --------------------------------------------------------------------------------
    def _schema(self, s: Json) -> Mapping[str, Any]:
        return self.tools[s.tool].parameters

    def _json(self, s: Json, ch: str) -> Json | None:
        if ch not in PRINTABLE or s.chars >= MAX_TURN_CHARS or not s.stack:
            return None
        s = s._replace(chars=s.chars + 1, raw=None if s.raw is None else s.raw + ch)
        lex = s.lex
        if lex.startswith("num:"):
            nxt = _NUMBER[lex[4:]].get(ch)
            if nxt == "int_only" and s.raw is not None and len(s.stack) == 1:
                if int(s.raw) > self._prop(s).get("maximum", float("inf")):
                    return None  # an integer argument only grows: stop at its maximum
            if nxt is not None:
                return s._replace(lex="num:" + nxt)
            if lex[4:] not in _NUMBER_DONE:
                return None
            # the number ended just before `ch`: close it, then read `ch` as what follows it
            s = self._value_done(s._replace(chars=s.chars - 1, raw=None if s.raw is None else s.raw[:-1]))
            return None if s is None else self._json(s, ch)
        if lex.startswith("lit:"):
            rest = lex[4:]
            if ch != rest[0]:
                return None
            s = s._replace(lex="lit:" + rest[1:])
            return self._value_done(s) if len(rest) == 1 else s
        if lex in ("key_or_close", "key"):
            if ch == '"':
                if len(s.stack) == 1 and not self._key_ok(s, "", False):
                    return None
                return s._replace(lex="key_str", key="" if len(s.stack) == 1 else s.key)
            if ch == "}" and lex == "key_or_close":
                return self._close(s, "o")
            return None
        if lex == "key_str":
            if len(s.stack) > 1:  # a key inside a nested object: any JSON string
                return s._replace(lex="colon") if ch == '"' else None if ch == "\\" else s
            if ch == '"':
                return (
                    s._replace(lex="colon", seen=s.seen | {s.key}) if self._key_ok(s, s.key, True) else None
                )
            if ch == "\\" or not self._key_ok(s, s.key + ch, False):
                return None
            return s._replace(key=s.key + ch)
        if lex == "colon":
            return s._replace(lex="colon_space") if ch == ":" else None
        if lex == "colon_space":
            return s._replace(lex="value") if ch == " " else None
        if lex == "comma_space":
            if ch != " ":
                return None
            return s._replace(lex="key" if s.stack[-1] == "o" else "value")
        if lex == "after":
            if ch == ",":  # at the top level only while an argument is left to write
                more = len(s.stack) > 1 or self._key_ok(s, "", False)
                return s._replace(lex="comma_space") if more else None
            if ch in "}]":
                return self._close(s, "o" if ch == "}" else "a")
            return None
        if lex in ("value", "value_or_close"):
            if ch == "]" and lex == "value_or_close":
                return self._close(s, "a")
            return self._value_start(s, ch)
        if lex == "str":
            if ch == '"':
                return self._value_done(s)
            if ch == "\\":
                return s._replace(lex="str_esc") if self._escape_fits(s) else None
            return self._string_char(s)
        if lex == "str_esc":
            return self._string_char(s._replace(lex="str")) if ch in _ESCAPES else None
        return None

    def _key_ok(self, s: Json, key: str, final: bool) -> bool:
        """May `key` (whole if `final`, else a prefix) name a top-level argument not yet written?"""
        schema = self._schema(s)
        props = schema.get("properties", {})
        if schema.get("additionalProperties", "properties" not in schema):
            return not (final and key in s.seen)
        if final:
            return key in props and key not in s.seen
        return any(p.startswith(key) and p not in s.seen for p in props)

    def _value_start(self, s: Json, ch: str) -> Json | None:
        if len(s.stack) == 1:  # a top-level argument: its type decides the first character
            schema = self._prop(s)
            kind = schema.get("type")
            if kind is None and schema.get("enum") and all(isinstance(v, str) for v in schema["enum"]):
                kind = "string"
            kinds = [kind] if isinstance(kind, str) else list(kind or [])
            kinds += ["null"] if kinds and schema.get("nullable") else []
            if kinds and all(k in _FIRST for k in kinds) and not any(ch in _FIRST[k] for k in kinds):
                return None
            if ch == "-" and schema.get("minimum", -1) >= 0:
                return None
            if ch == "0" and kind == "integer" and schema.get("minimum", 0) > 0:
                return None
            s = s._replace(raw=ch)
        if ch == '"':
            return s._replace(lex="str")
        if ch in "{[":
            if len(s.stack) >= MAX_JSON_DEPTH:
                return None
            kind = "o" if ch == "{" else "a"
            return s._replace(stack=s.stack + kind, lex="key_or_close" if kind == "o" else "value_or_close")
        integer = len(s.stack) == 1 and self._prop(s).get("type") == "integer"
        if ch == "-":
            return s._replace(lex="num:sign_int" if integer else "num:sign")
        if ch in _DIGITS:
            if integer:
                return s._replace(lex="num:zero_only" if ch == "0" else "num:int_only")
            return s._replace(lex="num:zero" if ch == "0" else "num:int")
        for word in ("true", "false", "null"):
            if ch == word[0]:
                return s._replace(lex="lit:" + word[1:])
        return None

    def _string_char(self, s: Json) -> Json | None:
        """A character of a string; a top-level string argument must stay within its schema."""
        if s.raw is None or len(s.stack) != 1:
            return s
        schema = self._prop(s)
        body = json.loads(s.raw + '"')
        if len(body) > schema.get("maxLength", MAX_TURN_CHARS):
            return None
        if "enum" in schema and not any(isinstance(v, str) and v.startswith(body) for v in schema["enum"]):
            return None
        return s

    def _escape_fits(self, s: Json) -> bool:
        """Room for one more character in a top-level string argument (escapes never in enums)."""
        if s.raw is None or len(s.stack) != 1:
            return True
        schema = self._prop(s)
        return "enum" not in schema and len(json.loads(s.raw[:-1] + '"')) < schema.get(
            "maxLength", MAX_TURN_CHARS
        )

    def _close(self, s: Json, kind: str) -> Json | None:
        if s.stack[-1] != kind:
            return None
        if len(s.stack) == 1:  # the arguments object itself
            required = self._schema(s).get("required", [])
            return s._replace(stack="", lex="done") if set(required) <= s.seen else None
        return self._value_done(s._replace(stack=s.stack[:-1]))

    def _value_done(self, s: Json) -> Json | None:
        """A value ended; if it was a top-level argument, check it against its schema."""
        s = s._replace(lex="after")
        if len(s.stack) != 1 or s.raw is None:
            return s
        try:
            value = json.loads(s.raw)
        except ValueError:
            return None
        if validate(value, self._prop(s)) is not None:
            return None
        return s._replace(raw=None)

    def _prop(self, s: Json) -> Mapping[str, Any]:
        schema = self._schema(s)
        props = schema.get("properties", {})
        if s.key in props:
            return props[s.key]
        extra = schema.get("additionalProperties", "properties" not in schema)
        return extra if isinstance(extra, Mapping) else {}


class TokenMasker:
    """Valid-next-token masks of a `TurnGrammar` over a tokenizer's vocabulary.

    Only tokens whose text is printable ASCII can be allowed (byte fragments and special tokens
    never are, except `end_id` once the turn is complete), so the decoded turn is exactly the
    concatenation of the allowed tokens' texts.
    """

    def __init__(self, token_texts: Mapping[int, str], vocab_size: int, end_id: int) -> None:
        self.vocab_size, self.end_id = vocab_size, end_id
        self._trie: dict = {}
        self.texts = {i: t for i, t in token_texts.items() if t and set(t) <= PRINTABLE}
        for token_id, text in self.texts.items():
            node = self._trie
            for ch in text:
                node = node.setdefault(ch, {})
            node.setdefault(None, []).append(token_id)
        self._cache: dict = {}

    @classmethod
    def from_codec(cls, codec) -> TokenMasker:
        special = codec.special_ids
        texts = {i: codec.tokenizer.decode([i]) for i in range(codec.vocab_size) if i not in special}
        return cls(texts, codec.vocab_size, codec.end_id)

    def mask(self, grammar: TurnGrammar, state: tuple | Json) -> np.ndarray:
        """Boolean mask of the tokens that may follow `state` (cached per state)."""
        key = (id(grammar), state)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        out = np.zeros(self.vocab_size, dtype=bool)
        out[self.end_id] = grammar.complete(state)
        stack = [(self._trie, state)]
        while stack:
            node, st = stack.pop()
            for ch, child in node.items():
                if ch is None:
                    continue
                nxt = grammar.step(st, ch)
                if nxt is None:
                    continue
                if None in child:
                    out[child[None]] = True
                stack.append((child, nxt))
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = out
        return out

    def advance(self, grammar: TurnGrammar, state: tuple | Json, token_id: int) -> tuple | Json | None:
        """The state after `token_id` (None if the token breaks the grammar)."""
        text = self.texts.get(token_id)
        if text is None:
            return None
        for ch in text:
            state = grammar.step(state, ch)
            if state is None:
                return None
        return state
