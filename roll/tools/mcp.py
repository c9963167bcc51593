"""MCP tools: the tools of a Model Context Protocol server, started over stdio.

The Model Context Protocol is a JSON-RPC protocol through which a program (the server) offers
tools to a model's host (the client); ``mcp`` on PyPI is its reference Python SDK. An
:class:`MCPToolSource` starts one server process (``command`` + ``args``, with ``env`` and
``cwd``, as MCP clients are configured), initialises a session, lists the server's tools and
turns each into a roll tool (:class:`MCPTool`: name, description, ``inputSchema`` as the
JSON-schema ``parameters``), so they render through the chat template and are validated like
the built-in ones. A call's text content is the result; ``isError`` is a ``ToolError``.

The SDK is async: each source runs its client on its own event loop thread
(:class:`roll.utils.loop.LoopThread`), and one task on that loop owns the server's transport and
session for the server's life (the SDK's context managers must be entered and left by the same
task). Calls come from tool threads and are bounded by ``timeout_s``. A server that dies (its
stderr closes, or a call finds the connection closed) or hangs (a call timed out and a ping got
no answer either) fails that call and is restarted before the next one, at most
``max_restarts`` times in a row without a successful call in between; after that the source is
down and every call fails at once. ``close()`` stops the server process (the SDK closes its
stdin, then terminates its process group).

Config (a ``tools:`` entry of ``roll/Tools-v0``, docs/tools.md)::

    {id: mcp, command: python, args: [-m, my.server], env: {K: V}, cwd: ., tools: [add],
     prefix: "calc_", timeout_s: 10}
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import json
import logging
import os
import shlex
import shutil
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from roll.tools.base import ToolConfigError, ToolError, ToolUnavailable
from roll.utils.loop import LoopThread

logger = logging.getLogger(__name__)

#: the keys of an ``{id: mcp, ...}`` tools entry (besides ``id``)
MCP_OPTIONS = ("command", "args", "env", "cwd", "tools", "prefix", "timeout_s", "startup_timeout_s", "max_restarts",
               "ping_timeout_s")
_STDERR_LINES = 40  # the tail of a server's stderr kept for error messages
_CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK gives requests whose connection closed


class MCPServerError(ToolUnavailable):
    """The server could not answer a call: it died, its connection closed, or it is down."""


class MCPCallTimeout(concurrent.futures.TimeoutError):
    """A call ran past ``timeout_s`` (the tool executor answers it as a ``timeout``)."""


def _sdk() -> Any:
    try:
        import mcp
    except ImportError as e:
        raise ToolConfigError("MCP tools need the `mcp` package (the Model Context Protocol SDK): "
                              "pip install 'roll[mcp]'") from e
    return mcp


def _mcp_error_type(mcp: Any) -> type[BaseException]:
    error = getattr(mcp, "MCPError", None) or getattr(mcp, "McpError", None)  # mcp 2 / mcp 1
    if error is None:
        from mcp.shared.exceptions import McpError as error
    return error


def option_problems(options: Mapping[str, Any], where: str = "mcp") -> list[str]:
    """Problems of an ``{id: mcp, ...}`` entry that show without starting anything: unknown
    keys, wrong types, a command that is not on PATH, a cwd that does not exist."""
    problems = []
    unknown = [k for k in options if k not in MCP_OPTIONS and k != "id"]
    for key in unknown:
        import difflib

        close = difflib.get_close_matches(key, MCP_OPTIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{where}: unknown MCP option {key!r}{hint}; options: {', '.join(MCP_OPTIONS)}")
    command = options.get("command")
    if not isinstance(command, str) or not command.strip():
        problems.append(f"{where}.command: an MCP server needs a command (a string: the program that runs the server)")
    else:
        cwd = options.get("cwd")
        found = shutil.which(command) or (os.sep in command and os.access(
            Path(cwd or ".", command) if not os.path.isabs(command) else command, os.X_OK))
        if not found:
            problems.append(f"{where}.command: {command!r} is not an executable on PATH")
    args = options.get("args", [])
    if not isinstance(args, (list, tuple)) or not all(isinstance(a, (str, int, float)) for a in args):
        problems.append(f"{where}.args: a list of strings, got {args!r}")
    env = options.get("env")
    if env is not None and (not isinstance(env, Mapping) or not all(isinstance(k, str) for k in env)):
        problems.append(f"{where}.env: a mapping of variable names to strings, got {env!r}")
    cwd = options.get("cwd")
    if cwd is not None and not (isinstance(cwd, str) and Path(cwd).expanduser().is_dir()):
        problems.append(f"{where}.cwd: {cwd!r} is not a directory")
    allow = options.get("tools")
    if allow is not None and (not isinstance(allow, (list, tuple)) or not all(isinstance(t, str) for t in allow)):
        problems.append(f"{where}.tools: a list of the server's tool names to keep, got {allow!r}")
    if not isinstance(options.get("prefix", ""), str):
        problems.append(f"{where}.prefix: a string, got {options['prefix']!r}")
    for key in ("timeout_s", "startup_timeout_s", "ping_timeout_s"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            problems.append(f"{where}.{key}: a number of seconds > 0, got {value!r}")
    restarts = options.get("max_restarts")
    if restarts is not None and (isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0):
        problems.append(f"{where}.max_restarts: an integer >= 0, got {restarts!r}")
    return problems


def content_text(result: Any) -> str:
    """The text of a ``CallToolResult``: text blocks joined by newlines; other blocks named
    (a text model cannot see an image); the structured content when there is nothing else."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(text if text is not None else f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:  # image, audio
            parts.append(f"[{kind} {getattr(block, 'mime_type', None) or getattr(block, 'mimeType', '')}]".strip())
    if not parts:
        structured = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
        if structured is not None:
            return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)


class MCPTool:
    """One tool of an MCP server, in roll's tool contract (``roll.tools.Tool``).

    ``timeout_s`` is None: the source bounds a call itself (``call_timeout_s``), and a server
    restart before a call (bounded by the source's ``startup_timeout_s``) does not count
    against the call, so a call that triggers a restart is not answered with a timeout."""

    timeout_s = None

    def __init__(self, source: MCPToolSource, server_name: str, name: str, description: str,
                 parameters: dict[str, Any], call_timeout_s: float):
        self.source = source
        self.server_name = server_name
        self.name = name
        self.description = description
        self.parameters = parameters
        self.call_timeout_s = call_timeout_s

    def __call__(self, arguments: dict[str, Any]) -> str:
        return self.source.call(self.server_name, arguments, display_name=self.name)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} from {self.source.command_line})"


class _Connection:
    """One server process and its session, owned by one task on the source's loop."""

    def __init__(self, params: Any, name: str):
        self.params = params
        self.name = name
        self.session: Any = None
        self.alive = False
        self.stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        read_fd, self._write_fd = os.pipe()
        # the server writes its stderr into a pipe we read line by line: its tail explains a
        # failed start or a crash, and a chatty server cannot fill a disk
        self._errlog = os.fdopen(self._write_fd, "w")
        self._reader = threading.Thread(target=self._read_stderr, args=(read_fd,), name="mcp-stderr", daemon=True)
        self._reader.start()

    def _read_stderr(self, fd: int) -> None:
        with os.fdopen(fd, "r", errors="replace") as pipe:
            for line in pipe:
                self.stderr.append(line.rstrip("\n"))
                logger.debug("[%s] %s", self.name, line.rstrip("\n"))
        # every writer closed the pipe: the server process (and whatever inherited its stderr) ended
        if self.alive:
            self.alive = False
            logger.warning("MCP server `%s` exited%s", self.name, self.stderr_tail(" (stderr: ", ")"))

    def wait_stderr(self, timeout: float) -> None:
        self._reader.join(timeout)

    @property
    def closed(self) -> bool:
        return self._task is None or self._task.done()

    def stderr_tail(self, before: str = "", after: str = "", lines: int = 8) -> str:
        tail = " | ".join(list(self.stderr)[-lines:])
        return f"{before}{tail[-1500:]}{after}" if tail else ""

    async def open(self, startup_timeout_s: float) -> list[Any]:
        """Start the server and list its tools; on any failure the process is stopped."""
        mcp = _sdk()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(self._own(mcp, ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), startup_timeout_s)
        except BaseException:
            await self.aclose()
            raise

    async def _own(self, mcp: Any, ready: asyncio.Future) -> None:
        try:
            async with mcp.stdio_client(self.params, errlog=self._errlog) as (read, write):
                # the child holds its own copy of the pipe now; closing ours lets the stderr
                # reader see the end of the process
                self._errlog.close()
                async with mcp.ClientSession(read, write) as session:
                    await session.initialize()
                    tools = await _list_tools(session)
                    self.session, self.alive = session, True
                    ready.set_result(tools)
                    await self._stop.wait()
        except BaseException as e:
            if not ready.done():
                if isinstance(e, Exception):
                    ready.set_exception(e)
                else:  # cancelled by open()'s own timeout, which reports it
                    ready.cancel()
            elif not isinstance(e, asyncio.CancelledError):
                logger.warning("MCP server `%s` session ended with %s: %s", self.name, type(e).__name__, e)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            self.alive = False
            if not self._errlog.closed:
                self._errlog.close()

    def stop_soon(self) -> None:
        """Begin stopping the server (from any thread); calls see it as dead from now on."""
        self.alive = False
        if self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)

    async def aclose(self) -> None:
        self.stop_soon()
        if self._task is not None and not self._task.done():
            if self.session is None:
                # still starting (waiting on initialize or tools/list), where the stop event is
                # not looked at: cancel; the SDK's process shutdown runs shielded all the same
                self._task.cancel()
            # the SDK's shutdown: close stdin, wait 2 s, terminate the group, wait 2 s, kill
            done, _ = await asyncio.wait({self._task}, timeout=10.0)
            if not done:
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=5.0)


async def _list_tools(session: Any) -> list[Any]:
    tools, cursor = [], None
    while True:
        if cursor is None:
            page = await session.list_tools()
        else:
            from mcp import types

            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        tools += list(page.tools)
        cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
        if not cursor:
            return tools


async def _close_all(conns: Sequence[_Connection]) -> None:
    await asyncio.gather(*(c.aclose() for c in conns))


_OPEN_SOURCES: weakref.WeakSet[MCPToolSource] = weakref.WeakSet()


@atexit.register
def _close_open_sources() -> None:
    # a process that exits without closing its envs must not leave servers behind
    for source in list(_OPEN_SOURCES):
        source.close()


class MCPToolSource:
    """The tools of one MCP server started over stdio (module docstring; docs/tools.md).

    ``tools`` keeps only the named server tools (all when None); the model sees each as
    ``prefix + name``. ``timeout_s`` bounds one call, ``startup_timeout_s`` the start (process,
    ``initialize``, ``tools/list``), ``ping_timeout_s`` the liveness check after a timeout.
    A server that cannot start raises :class:`ToolConfigError` naming the command."""

    def __init__(self, command: str, args: Sequence[Any] = (), env: Mapping[str, Any] | None = None,
                 cwd: str | None = None, tools: Sequence[str] | None = None, prefix: str = "",
                 timeout_s: float = 10.0, startup_timeout_s: float = 30.0, max_restarts: int = 3,
                 ping_timeout_s: float = 1.0):
        options = {"command": command, "args": list(args), "env": env, "cwd": cwd, "tools": tools, "prefix": prefix,
                   "timeout_s": timeout_s, "startup_timeout_s": startup_timeout_s, "max_restarts": max_restarts,
                   "ping_timeout_s": ping_timeout_s}
        problems = option_problems(options)
        if problems:
            raise ToolConfigError("; ".join(problems))
        mcp = _sdk()
        self._error_type = _mcp_error_type(mcp)
        self.command_line = shlex.join([command, *map(str, args)])
        self.params = mcp.StdioServerParameters(
            command=command, args=[str(a) for a in args], cwd=cwd,
            env={str(k): str(v) for k, v in env.items()} if env else None)
        self.prefix = prefix
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.ping_timeout_s = float(ping_timeout_s)
        self.max_restarts = int(max_restarts)
        self.restarts = 0  # over the source's life
        self._failures_in_a_row = 0
        self._lock = threading.Lock()
        self._closed = False
        self._conn: _Connection | None = None
        self._old: list[_Connection] = []  # stopped connections still being torn down
        self._loop = LoopThread(f"mcp-{Path(command).name}")
        _OPEN_SOURCES.add(self)
        try:
            listed = self._start()
        except BaseException:
            self.close()
            raise
        by_name = {t.name: t for t in listed}
        if tools is not None:
            missing = [t for t in tools if t not in by_name]
            if missing:
                self.close()
                raise ToolConfigError(f"MCP server `{self.command_line}` has no tool(s) {', '.join(map(repr, missing))} "
                                      f"(it offers: {', '.join(by_name) or 'none'})")
        keep = [by_name[t] for t in dict.fromkeys(tools)] if tools is not None else listed
        self._tools = [self._tool(t) for t in keep]

    #: pre-flight's check of a ``tools:`` entry (roll.tools.executor.tool_spec_problems)
    option_problems = staticmethod(option_problems)

    # ---- the tool source contract -------------------------------------------------------
    def tools(self) -> list[MCPTool]:
        return list(self._tools)

    def describe(self) -> str:
        return f"mcp `{self.command_line}`"

    def close(self) -> None:
        """Stop the server process (and any being torn down) and the loop thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns = [c for c in [self._conn, *self._old] if c is not None]
            self._conn, self._old = None, []
        if self._loop.running:
            try:
                self._loop.run(_close_all(conns), timeout=30)
            except Exception as e:  # noqa: BLE001  (close is best effort; the SDK already escalated to kill)
                logger.warning("stopping MCP server `%s` failed: %s: %s", self.command_line, type(e).__name__, e)
        self._loop.close()
        _OPEN_SOURCES.discard(self)

    # ---- calls ----------------------------------------------------------------------------
    def call(self, name: str, arguments: dict[str, Any], display_name: str | None = None) -> str:
        """Call the server's tool ``name``: its text, or ``ToolError`` (the tool reported an
        error), ``TimeoutError`` (past ``timeout_s``) or :class:`MCPServerError`."""
        conn = self._connection()
        future = asyncio.run_coroutine_threadsafe(self._call(conn, name, arguments, display_name or name),
                                                  self._loop.loop)
        try:
            # the coroutine bounds itself (timeout, then a ping); the margin is for the loop
            text = future.result(self.timeout_s + self.ping_timeout_s + 5.0)
        except MCPCallTimeout:
            raise
        except concurrent.futures.TimeoutError:  # the loop itself did not answer
            future.cancel()
            conn.stop_soon()
            raise
        except ToolError:
            self._answered()  # the server works; the tool reported a failure
            raise
        self._answered()
        return text

    def _answered(self) -> None:
        with self._lock:
            self._failures_in_a_row = 0

    async def _call(self, conn: _Connection, name: str, arguments: dict[str, Any], display_name: str) -> str:
        try:
            result = await asyncio.wait_for(conn.session.call_tool(name, arguments), self.timeout_s)
        except asyncio.TimeoutError:  # noqa: UP041  (not the builtin TimeoutError before Python 3.11)
            if not await self._answers_ping(conn):
                logger.warning("MCP server `%s` did not answer a ping after %s timed out; it restarts on the next call",
                               self.command_line, name)
                conn.stop_soon()
            raise MCPCallTimeout(f"{display_name} took longer than {self.timeout_s:g}s") from None
        except self._error_type as e:
            if getattr(e, "code", None) == _CONNECTION_CLOSED or getattr(getattr(e, "error", None), "code", None) == _CONNECTION_CLOSED:
                conn.stop_soon()
                logger.warning("MCP server `%s` closed the connection during %s%s; it restarts on the next call",
                               self.command_line, name, conn.stderr_tail(" (stderr: ", ")"))
                raise MCPServerError(f"the tool's server stopped during the call ({e}); it restarts for the next "
                                     "call") from None
            raise ToolError(str(e)) from None  # a protocol-level refusal (bad params, unknown tool)
        except (OSError, EOFError) as e:  # the transport broke under the call
            conn.stop_soon()
            raise MCPServerError(f"the connection to the tool's server failed ({type(e).__name__}: {e}); it "
                                 "restarts for the next call") from None
        text = content_text(result)
        if getattr(result, "is_error", None) or getattr(result, "isError", None):
            raise ToolError(text or f"{name} failed")
        return text

    async def _answers_ping(self, conn: _Connection) -> bool:
        try:
            await asyncio.wait_for(conn.session.send_ping(), self.ping_timeout_s)
            return True
        except Exception:  # noqa: BLE001  (no answer of any kind means a hung or dead server)
            return False

    # ---- the server process -----------------------------------------------------------------
    def _start(self) -> list[Any]:
        conn = _Connection(self.params, self.command_line)
        try:
            listed = self._loop.run(conn.open(self.startup_timeout_s), timeout=self.startup_timeout_s + 15.0)
        except BaseException as e:
            while len(getattr(e, "exceptions", ())) == 1:  # the SDK's task groups wrap one error in a group
                e = e.exceptions[0]
            reason = ("it did not finish starting (initialize and tools/list) within "
                      f"{self.startup_timeout_s:g}s" if isinstance(e, (asyncio.TimeoutError, concurrent.futures.TimeoutError))
                      else f"{type(e).__name__}: {e}")
            conn.wait_stderr(2.0)  # the whole tail, so the error shows why
            raise ToolConfigError(f"MCP server `{self.command_line}` could not start: {reason}"
                                  f"{conn.stderr_tail('; its stderr ends: ')}") from e
        self._conn = conn
        return listed

    def _connection(self) -> _Connection:
        """The live connection, restarting a dead or hung server (bounded, logged)."""
        with self._lock:
            if self._closed:
                raise MCPServerError("the MCP tool source is closed")
            conn = self._conn
            if conn is not None and conn.alive:
                return conn
            self._old = [c for c in self._old if not c.closed]
            if conn is not None:
                # torn down in the background; close() waits for any still going
                self._old.append(conn)
                self._conn = None
                asyncio.run_coroutine_threadsafe(conn.aclose(), self._loop.loop)
            if self._failures_in_a_row >= self.max_restarts:
                raise MCPServerError(f"the MCP server is down ({self.max_restarts} restarts in a row without a "
                                     "successful call)")
            self._failures_in_a_row += 1
            self.restarts += 1
            logger.warning("restarting MCP server `%s` (restart %d; %d of %d in a row)", self.command_line,
                           self.restarts, self._failures_in_a_row, self.max_restarts)
            try:
                self._start()
            except ToolConfigError as e:
                logger.warning("%s", e)
                raise MCPServerError(str(e)) from None
            return self._conn

    def _tool(self, listed: Any) -> MCPTool:
        schema = getattr(listed, "input_schema", None) or getattr(listed, "inputSchema", None) or {}
        parameters = dict(schema)
        parameters.setdefault("type", "object")
        parameters.setdefault("properties", {})
        description = listed.description or getattr(listed, "title", None) or listed.name
        return MCPTool(self, listed.name, self.prefix + listed.name, description, parameters, self.timeout_s)

    def __repr__(self) -> str:
        return f"MCPToolSource({self.command_line!r}, {len(self._tools) if hasattr(self, '_tools') else '?'} tools)"
