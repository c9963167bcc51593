"""A small MCP server for the MCP tool tests, run over stdio: ``python tests/tools/mcp_server.py``.

Tools: ``add``, ``echo``, ``fail`` (raises, so the client gets ``isError``), ``nap`` (sleeps in
a worker thread: a slow tool on a server that still answers), ``freeze`` (blocks the server's
event loop: a hung server) and ``whoami`` (the server's pid, so a test can tell a restarted
server from the first one and check that none is left).
Written with the SDK's high-level server (``MCPServer`` in mcp 2, ``FastMCP`` in mcp 1).
"""
from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    # a server that dies before it answers `initialize` (always, or while a flag file exists),
    # before the SDK import so that a failed start costs little
    crash = "--crash-on-start" in sys.argv
    if "--crash-if" in sys.argv:
        crash = os.path.exists(sys.argv[sys.argv.index("--crash-if") + 1])
    if crash:
        print("mcp_server: refusing to start", file=sys.stderr)
        sys.exit(3)

try:
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError

server = Server("roll-test-tools")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@server.tool()
def nap(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return f"slept {seconds:g}s"


@server.tool()
async def freeze(seconds: float) -> str:
    """Block the whole server for a while (a blocking call in async code: nothing else runs)."""
    time.sleep(seconds)  # noqa: ASYNC251  (blocking the loop is the point)
    return f"froze {seconds:g}s"


@server.tool()
def whoami() -> str:
    """The server's process id."""
    return str(os.getpid())


if __name__ == "__main__":
    server.run()
