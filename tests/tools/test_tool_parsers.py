"""The Hermes tool-call parser and the parser registry."""
import pytest

from roll.registry import TOOL_PARSERS, RegistryError
from roll.tools import HermesToolParser, build_parser


def parse(text):
    return HermesToolParser()(text)


def test_no_call_is_the_answer():
    assert parse("<think>easy</think><answer>Left</answer>") is None
    assert parse("") is None


def test_one_valid_call():
    [call] = parse('I will compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>')
    assert (call.name, call.arguments, call.error) == ("calculator", {"expression": "2+2"}, "")


def test_several_calls_in_order():
    text = ('<tool_call>{"name": "search", "arguments": {"query": "moon"}}</tool_call> and '
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1/3"}}</tool_call>')
    calls = parse(text)
    assert [c.name for c in calls] == ["search", "calculator"]
    assert all(not c.error for c in calls)


def test_arguments_as_json_string_and_missing_arguments():
    [a, b] = parse('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
                   '<tool_call>{"name": "g"}</tool_call>')
    assert (a.arguments, a.error) == ({"x": 1}, "")
    assert (b.arguments, b.error) == ({}, "")


@pytest.mark.parametrize("body, kind", [
    ("{name: calculator}", "malformed"),
    ('{"name": "calculator", "arguments": {"expression": "1"}', "malformed"),
    ("[1, 2]", "malformed"),
    ('{"arguments": {"x": 1}}', "missing_name"),
    ('{"name": "", "arguments": {}}', "missing_name"),
    ('{"name": 3, "arguments": {}}', "missing_name"),
    ('{"name": "calculator", "arguments": [1]}', "bad_arguments"),
    ('{"name": "calculator", "arguments": "not json"}', "bad_arguments"),
])
def test_malformed_calls_are_typed_errors(body, kind):
    [call] = parse(f"<tool_call>{body}</tool_call>")
    assert call.error == kind and call.detail


def test_unclosed_and_reopened_tags():
    [call] = parse('<tool_call>{"name": "calculator", "arguments": {}}')
    assert call.error == "malformed" and "not closed" in call.detail
    first, second = parse('<tool_call>{"name": "a"<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert first.error == "malformed" and (second.name, second.error) == ("b", "")


def test_calls_per_turn_are_capped_and_hostile_text_is_fast():
    calls = HermesToolParser(max_calls_per_turn=3)('<tool_call>{"name": "a"}</tool_call>' * 100)
    assert len(calls) == 3
    # many unclosed tags and deeply nested JSON: no exception, bounded work
    assert parse("<tool_call>" * 20000)[0].error == "malformed"
    [deep] = parse("<tool_call>" + "[" * 100000 + "</tool_call>")
    assert deep.error == "malformed"


def test_parser_registry():
    assert "hermes" in TOOL_PARSERS
    assert isinstance(build_parser("hermes"), HermesToolParser)
    assert build_parser({"id": "hermes", "max_calls_per_turn": 2}).max_calls_per_turn == 2
    with pytest.raises(RegistryError, match="did you mean 'hermes'"):
        build_parser("herms")
