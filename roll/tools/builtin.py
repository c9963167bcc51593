"""Registers the shipped tools in ``roll.registry.TOOLS`` (entry points, imported on use)."""
from roll.registry import TOOLS

TOOLS.register("calculator", "roll.tools.calculator:Calculator", doc="safe arithmetic evaluation")
TOOLS.register("python", "roll.tools.python:PythonTool", doc="run Python code in the sandbox")
TOOLS.register("search", "roll.tools.search:SearchTool", doc="BM25 search over a small text corpus")
TOOLS.register("mcp", "roll.tools.mcp:MCPToolSource", doc="the tools of an MCP server started over stdio")
