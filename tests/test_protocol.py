import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rehearsal_gym.core.protocol import (
    MAX_TURN_CHARS,
    FinalAnswer,
    ParseError,
    ToolCall,
    ToolSpec,
    format_answer,
    format_call,
    parse_turn,
    reformat,
    tool_list,
    validate,
)

GET_ORDER = ToolSpec(
    "get_order",
    "order details",
    {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
)
PLACE = ToolSpec(
    "place",
    "an order",
    {
        "type": "object",
        "properties": {
            "qty": {"type": "integer", "minimum": 1, "maximum": 10},
            "side": {"enum": ["buy", "sell"]},
            "price": {"type": "number"},
        },
        "required": ["qty", "side"],
    },
)
ANY_ARGS = ToolSpec("anything", "takes anything", {"type": "object", "additionalProperties": True})
TOOLS = [GET_ORDER, PLACE, ANY_ARGS]


def test_call_and_answer():
    assert parse_turn('CALL get_order {"order_id": "O1"}', TOOLS) == ToolCall("get_order", {"order_id": "O1"})
    assert parse_turn("  ANSWER  42 apples \n", TOOLS) == FinalAnswer("42 apples")
    assert parse_turn("ANSWER\nmulti\nline", TOOLS) == FinalAnswer("multi\nline")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty turn"),
        ("hello there", "turn must start with CALL or ANSWER, got 'hello'"),
        ("ANSWER   ", "ANSWER needs text"),
        ("CALL", "CALL must be followed by a tool name"),
        ('CALL x {"a": 1}', "unknown tool 'x'; tools are: anything, get_order, place"),
        ("CALL get_order", "needs a JSON object of arguments"),
        ('CALL get_order {"order_id" "O1"}', "arguments are not valid JSON at char 12"),
        ('CALL get_order ["O1"]', "arguments must be a JSON object, got array"),
        ("CALL get_order {}", "argument 'order_id' missing"),
        ('CALL get_order {"order_id": 5}', "argument 'order_id' must be string, got integer"),
        ('CALL get_order {"order_id": "a", "x": 1}', "unexpected argument 'x'; allowed: order_id"),
        ('CALL get_order {"order_id": "a"} trailing', "unexpected text after the arguments"),
        ('CALL place {"qty": true, "side": "buy"}', "argument 'qty' must be integer, got boolean"),
        ('CALL place {"qty": 11, "side": "buy"}', "argument 'qty' must be <= 10"),
        ('CALL place {"qty": 1, "side": "hold"}', 'argument \'side\' must be one of "buy", "sell"'),
        ('CALL place {"qty": 1, "side": "buy", "price": NaN}', "not valid JSON"),
        ('CALL place {"qty": 1e400, "side": "buy"}', "must be integer"),
        ('CALL anything {"n": 99999999999999999999999}', "out of the 64-bit integer range"),
        ("CALL anything " + "[" * 5000 + "]" * 5000, "characters; the limit is"),
        ("CALL anything {" + '"a":{' * 40 + "}" * 41, "nested deeper than"),
        ("x" * (MAX_TURN_CHARS + 1), f"the limit is {MAX_TURN_CHARS}"),
        ('CALL get_order {"order_id": "\\u202e\\ud800"}', "invalid unicode"),
    ],
)
def test_errors_are_precise(text, message):
    result = parse_turn(text, TOOLS)
    assert isinstance(result, ParseError)
    assert message in result.message


def test_non_string_turn():
    assert isinstance(parse_turn(None, TOOLS), ParseError)
    assert isinstance(parse_turn(b"CALL get_order {}", TOOLS), ParseError)


def test_unicode_in_names_is_quoted_ascii():
    result = parse_turn('CALL g\u00e9t {"a": 1}', TOOLS)
    assert isinstance(result, ParseError) and result.message.isascii()


def test_validate_nested():
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}
    assert validate({"xs": [1, 2]}, schema) is None
    assert validate({"xs": [1, "2"]}, schema) == "value 'xs'[1] must be integer, got string"


def test_toolspec_rejects_bad_definitions():
    with pytest.raises(ValueError, match="tool name"):
        ToolSpec("bad name", "x")
    with pytest.raises(ValueError, match="type 'object'"):
        ToolSpec("ok", "x", {"type": "array"})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises_on_text(text):
    assert isinstance(parse_turn(text, TOOLS), ToolCall | FinalAnswer | ParseError)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["CALL get_order ", "CALL place ", "CALL anything ", "ANSWER "]), st.text(max_size=200)
)
def test_parser_never_raises_after_a_valid_head(head, tail):
    assert isinstance(parse_turn(head + tail, TOOLS), ToolCall | FinalAnswer | ParseError)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
def test_format_parse_round_trip_call(arguments):
    parsed = parse_turn(format_call("anything", arguments), TOOLS)
    assert parsed == ToolCall("anything", json.loads(json.dumps(arguments)))


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=200).map(str.strip).filter(bool))
def test_format_parse_round_trip_answer(text):
    assert parse_turn(format_answer(text), TOOLS) == FinalAnswer(text)


def test_signature():
    assert PLACE.signature() == "place(qty: integer, side: buy|sell, price: number?) - an order"


# -- the JSON call format (<tool_call>{...}</tool_call>, answers as plain text) ------------------


def test_json_format_call_and_answer():
    call = '<tool_call>{"name": "get_order", "arguments": {"order_id": "O1"}}</tool_call>'
    assert parse_turn(call, TOOLS, "json") == ToolCall("get_order", {"order_id": "O1"})
    note = 'Let me look it up.\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "O1"}}\n</tool_call>\n'
    assert parse_turn(note, TOOLS, "json") == ToolCall("get_order", {"order_id": "O1"})
    assert parse_turn("  Order O1 is shipped. ", TOOLS, "json") == FinalAnswer("Order O1 is shipped.")
    assert parse_turn("ANSWER 3", TOOLS, "json") == FinalAnswer("ANSWER 3")  # plain text is the answer
    assert isinstance(parse_turn(call, TOOLS, "text"), ParseError)  # each env parses its own format


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty turn"),
        ('<tool_call>{"name": "get_order", "arguments": {}}', "not closed by </tool_call>"),
        ("done </tool_call>", "</tool_call> without <tool_call>"),
        (
            '<tool_call>{"name": "get_order", "arguments": {"order_id": "O1"}}</tool_call> ok',
            "unexpected text",
        ),
        ('<tool_call>{"name": "get_order", "arguments": {"order_id": "1"}}</tool_call>' * 2, "one tool call"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object, got array"),
        ("<tool_call>{'name': 'x'}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "unknown tool 'nope'"),
        ('<tool_call>{"name": 3, "arguments": {}}</tool_call>', "string 'name', got integer"),
        ('<tool_call>{"name": "get_order"}</tool_call>', "needs 'arguments'"),
        (
            '<tool_call>{"name": "get_order", "arguments": "{}"}</tool_call>',
            "arguments must be a JSON object",
        ),
        ('<tool_call>{"name": "get_order", "arguments": {}, "id": 1}</tool_call>', "unexpected key(s) 'id'"),
        ('<tool_call>{"name": "get_order", "arguments": {}}</tool_call>', "argument 'order_id' missing"),
        (
            '<tool_call>{"name": "place", "arguments": {"qty": NaN, "side": "buy"}}</tool_call>',
            "not valid JSON",
        ),
        (
            '<tool_call>{"name": "anything", "arguments": {"a": ' + "[" * 20 + "]" * 20 + "}}</tool_call>",
            "nested deeper than 16",
        ),
        ("<tool_call>" + "[" * 3000 + "</tool_call>", "not valid JSON"),
        ("x" * (MAX_TURN_CHARS + 1), "the limit is 4096"),
    ],
)
def test_json_format_errors_are_precise(text, message):
    parsed = parse_turn(text, TOOLS, "json")
    assert isinstance(parsed, ParseError) and message in parsed.message, parsed


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["", "<tool_call>", '<tool_call>{"name": "anything", "arguments": ']),
    st.text(max_size=200),
)
def test_json_format_parser_never_raises(head, tail):
    assert isinstance(parse_turn(head + tail, TOOLS, "json"), ToolCall | FinalAnswer | ParseError)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=4))
@example({"": "</tool_call>"})  # a string argument holding the closing tag (found by hypothesis)
@example({"a": "x</tool_call><tool_call>"})
def test_json_format_round_trip_call(arguments):
    text = format_call("anything", arguments, "json")
    assert parse_turn(text, TOOLS, "json") == ToolCall("anything", json.loads(json.dumps(arguments)))
    assert reformat(format_call("anything", arguments), TOOLS, "json") == text


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=200).map(str.strip).filter(lambda t: t and "tool_call>" not in t))
def test_json_format_round_trip_answer(text):
    assert parse_turn(format_answer(text, "json"), TOOLS, "json") == FinalAnswer(text)


def test_tool_lists_follow_the_format():
    text = tool_list(TOOLS, "text")
    assert text.splitlines()[1] == GET_ORDER.signature()
    shown = tool_list(TOOLS, "json")
    lines = shown.splitlines()
    schemas = [json.loads(line) for line in lines[lines.index("<tools>") + 1 : lines.index("</tools>")]]
    assert [s["function"]["name"] for s in schemas] == ["get_order", "place", "anything"]
    assert schemas[1]["function"]["parameters"] == PLACE.parameters and "<tool_call>" in shown
    with pytest.raises(ValueError, match="call_format"):
        tool_list(TOOLS, "xml")
