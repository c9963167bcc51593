"""ToolExecutor: calls checked against the tools and their schemas, a budget, timeouts, counts."""
import json
import time
from typing import ClassVar

import pytest

from roll.tools import (
    BaseTool,
    ToolConfigError,
    ToolError,
    ToolExecutor,
    validate_arguments,
)


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class Slow(BaseTool):
    name = "slow"
    description = "sleeps"
    parameters: ClassVar[dict] = {"type": "object", "properties": {"s": {"type": "number"}}, "required": ["s"]}
    timeout_s = 0.2

    def run(self, s):
        time.sleep(s)
        return "woke"


class Broken(BaseTool):
    name = "broken"
    description = "fails"
    parameters: ClassVar[dict] = {"type": "object", "properties": {"how": {"type": "string", "enum": ["expected", "bug"]}}}

    def run(self, how="bug"):
        if how == "expected":
            raise ToolError("nothing found")
        raise KeyError("internal")


def test_results_in_call_order_and_counts():
    ex = ToolExecutor(["calculator", "search"])
    turn = ex.handle(call("calculator", expression="6*7") + call("search", query="speed of light", k=1)
                     + call("nope") + "<tool_call>{oops}</tool_call>")
    assert turn.contents[0] == "42" and turn.contents[1].startswith("[Speed of light]")
    assert [r.error for r in turn.results] == ["", "", "unknown_tool", "malformed"]
    assert "unknown tool 'nope'" in turn.contents[2] and "calculator, search" in turn.contents[2]
    assert turn.contents[3].startswith("Error:")
    assert ex.stats == {"calls": 4, "turns": 1, "errors": 2, "calls/calculator": 1, "calls/search": 1,
                        "errors/unknown_tool": 1, "errors/malformed": 1}
    assert ex.handle("<answer>42</answer>") is None


@pytest.mark.parametrize("arguments, problem", [
    ({"expression": 5}, "'expression' must be string"),
    ({}, "missing required argument 'expression'"),
    ({"expression": "1", "extra": 1}, "unknown argument 'extra'"),
])
def test_bad_argument_types_are_answered(arguments, problem):
    ex = ToolExecutor(["calculator"])
    [result] = ex.handle(call("calculator", **arguments)).results
    assert result.error == "bad_arguments" and problem in result.content
    assert ex.stats["errors_by_tool/calculator"] == 1


def test_schema_subset():
    schema = {"type": "object", "properties": {"k": {"type": "integer", "minimum": 1, "maximum": 5},
                                                 "tags": {"type": "array", "items": {"type": "string"}}}}
    assert validate_arguments(schema, {"k": 3, "tags": ["a"]}) == []
    assert validate_arguments(schema, {"k": 3.0}) == []  # JSON has one number type
    assert validate_arguments(schema, {"k": True}) == ["'k' must be integer, got bool"]
    assert validate_arguments(schema, {"k": 9}) == ["'k' must be <= 5"]
    assert validate_arguments(schema, {"tags": ["a", 1]}) == ["'tags'[1] must be string, got int"]


def test_budget_then_the_turn_is_the_answer():
    ex = ToolExecutor(["calculator"], max_calls_per_episode=2)
    turn = ex.handle(call("calculator", expression="1+1") * 3)
    assert [r.error for r in turn.results] == ["", "", "budget"]
    assert ex.handle(call("calculator", expression="1+1")) is None  # spent: goes to the env
    assert ex.stats["over_budget_turns"] == 1
    ex.reset()
    assert ex.handle(call("calculator", expression="2+2")).contents == ["4"]


def test_tool_errors_exceptions_and_timeouts_never_raise():
    ex = ToolExecutor([Slow(), Broken()])
    t0 = time.monotonic()
    turn = ex.handle(call("slow", s=2) + call("broken", how="expected") + call("broken", how="bug") + call("slow", s=0))
    assert time.monotonic() - t0 < 1.9  # the 2 s sleep was not waited for
    assert [r.error for r in turn.results] == ["timeout", "tool_error", "exception", ""]
    assert turn.contents[1] == "Error: nothing found" and "KeyError" in turn.contents[2] and turn.contents[3] == "woke"
    ex.close()


def test_long_results_are_cut_and_bad_declarations_refused():
    ex = ToolExecutor(["search"], max_result_chars=50)
    [r] = ex.handle(call("search", query="water", k=3)).results
    assert r.content.endswith("[truncated]") and len(r.content) == 50 + len(" [truncated]")
    with pytest.raises(ToolConfigError, match="two tools"):
        ToolExecutor(["calculator", "calculator"])
    with pytest.raises(ToolConfigError, match="needs an 'id'"):
        ToolExecutor([{"name": "calculator"}])
    with pytest.raises(ToolConfigError, match="max_calls_per_episode"):
        ToolExecutor(["calculator"], max_calls_per_episode=0)
