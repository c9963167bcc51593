"""Tool calling for agentic episodes (docs/tools.md).

Tools (``roll.registry.TOOLS``: calculator, python, search, and ``mcp``, a source of the tools
of an MCP server) are declared as OpenAI-function JSON schemas and rendered through the chat
template's ``tools=``; a parser (``roll.registry.TOOL_PARSERS``: hermes) finds the model's
calls; :class:`ToolExecutor` runs them and counts calls and errors. ``roll/Tools-v0`` (envs/tools) wraps any env with tools.
"""
from roll.tools.base import (
    BaseTool,
    Tool,
    ToolConfigError,
    ToolError,
    ToolSource,
    ToolUnavailable,
    schema,
    validate_arguments,
)
from roll.tools.executor import (
    ERROR_KINDS,
    ToolExecutor,
    ToolResult,
    ToolTurn,
    build_tool,
)
from roll.tools.parsers import HermesToolParser, ToolCall, build_parser

__all__ = [
    "ERROR_KINDS",
    "BaseTool",
    "HermesToolParser",
    "Tool",
    "ToolCall",
    "ToolConfigError",
    "ToolError",
    "ToolExecutor",
    "ToolResult",
    "ToolSource",
    "ToolTurn",
    "ToolUnavailable",
    "build_parser",
    "build_tool",
    "schema",
    "validate_arguments",
]
