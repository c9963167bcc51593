"""Every registered tool and tool-call parser, checked the same way: registering one is
enough to have it covered."""
import sys
from pathlib import Path

import pytest

from roll.registry import TOOL_PARSERS, TOOLS
from roll.rollout.chat import ChatRenderer
from roll.tools import Tool, ToolExecutor, ToolSource, schema, validate_arguments

#: options for each registered tool *source* (a source has no defaults: it needs its server)
SOURCE_OPTIONS = {"mcp": {"command": sys.executable, "args": [str(Path(__file__).with_name("mcp_server.py"))]}}


@pytest.mark.parametrize("tool_id", TOOLS.ids())
def test_registered_tool_builds_with_defaults_and_renders(tok, tool_id):
    if callable(getattr(TOOLS.get(tool_id), "tools", None)):  # a tool source: every tool it lists
        assert tool_id in SOURCE_OPTIONS, f"add options for the tool source {tool_id!r} to SOURCE_OPTIONS"
        if tool_id == "mcp":
            pytest.importorskip("mcp")  # the `mcp` extra
        executor = ToolExecutor([{"id": tool_id, **SOURCE_OPTIONS[tool_id]}])
        assert len(executor.sources) == 1 and isinstance(executor.sources[0], ToolSource)
    else:
        executor = ToolExecutor([TOOLS.get(tool_id)()])
    try:
        for tool in executor.tools.values():
            assert isinstance(tool, Tool) and tool.name and tool.description
            params = tool.parameters
            assert params["type"] == "object" and set(params.get("required", [])) <= set(params["properties"])
            assert validate_arguments(params, {}) == [f"missing required argument {k!r}" for k in params.get("required", [])]
            assert tool.timeout_s is None or tool.timeout_s > 0
            ids = ChatRenderer(tok, "s").initial_prompt("hi", tools=[schema(tool)])
            assert f'"name": "{tool.name}"' in tok.decode(ids)
            # a call with no arguments is answered (bad_arguments when some are required), never raised
            turn = executor.handle(f'<tool_call>{{"name": "{tool.name}", "arguments": {{}}}}</tool_call>')
            assert len(turn.results) == 1 and turn.contents[0]
            executor.reset()
    finally:
        executor.close()


@pytest.mark.parametrize("parser_id", TOOL_PARSERS.ids())
def test_registered_parser_leaves_plain_answers_alone(parser_id):
    parser = TOOL_PARSERS.get(parser_id)()
    assert parser("<think>x</think><answer>Left</answer>") is None
    assert parser("") is None
