"""Every registered tool and tool-call parser, checked the same way: registering one is
enough to have it covered."""
import pytest

from roll.registry import TOOL_PARSERS, TOOLS
from roll.rollout.chat import ChatRenderer
from roll.tools import Tool, ToolExecutor, schema, validate_arguments


@pytest.mark.parametrize("tool_id", TOOLS.ids())
def test_registered_tool_builds_with_defaults_and_renders(tok, tool_id):
    tool = TOOLS.get(tool_id)()
    assert isinstance(tool, Tool) and tool.name and tool.description
    params = tool.parameters
    assert params["type"] == "object" and set(params.get("required", [])) <= set(params["properties"])
    assert validate_arguments(params, {}) == [f"missing required argument {k!r}" for k in params.get("required", [])]
    assert tool.timeout_s is None or tool.timeout_s > 0
    ids = ChatRenderer(tok, "s").initial_prompt("hi", tools=[schema(tool)])
    assert f'"name": "{tool.name}"' in tok.decode(ids)
    # a call with no arguments is answered (bad_arguments when some are required), never raised
    turn = ToolExecutor([tool_id]).handle(f'<tool_call>{{"name": "{tool.name}", "arguments": {{}}}}</tool_call>')
    assert len(turn.results) == 1 and turn.contents[0]


@pytest.mark.parametrize("parser_id", TOOL_PARSERS.ids())
def test_registered_parser_leaves_plain_answers_alone(parser_id):
    parser = TOOL_PARSERS.get(parser_id)()
    assert parser("<think>x</think><answer>Left</answer>") is None
    assert parser("") is None
