"""ToolExecutor: turns one model turn into tool results, counting every call and error.

``handle(text)`` parses the turn with the parser; ``None`` means the turn calls no tool (it is
the answer, for the env). Otherwise every call is checked (known tool, arguments valid against
its schema, budget left), run with its tool's timeout, and answered with one result string, in
call order. Nothing a model writes raises out of here: every problem becomes an error result
of a counted kind (``ERROR_KINDS``).
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from roll.registry import TOOLS
from roll.tools.base import (
    Tool,
    ToolConfigError,
    ToolError,
    ToolSource,
    ToolUnavailable,
    schema,
    validate_arguments,
)
from roll.tools.parsers import ToolCall, ToolCallParser, build_parser

logger = logging.getLogger(__name__)

ERROR_KINDS = ("malformed", "missing_name", "bad_arguments", "unknown_tool", "budget", "tool_error", "exception", "timeout",
               "unavailable")


@dataclass
class ToolResult:
    call: ToolCall
    content: str
    error: str = ""


@dataclass
class ToolTurn:
    """The results of one tool-calling model turn, one per attempted call."""

    results: list[ToolResult] = field(default_factory=list)

    @property
    def contents(self) -> list[str]:
        return [r.content for r in self.results]

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.results if r.error]


def build_tool(spec: Any) -> Tool | ToolSource:
    """A tool (or a tool source, such as an MCP server) from a registry id,
    ``{"id": ..., **options}``, or a tool or source object."""
    if isinstance(spec, str):
        return TOOLS.get(spec)()
    if isinstance(spec, Mapping):
        options = dict(spec)
        if "id" not in options:
            raise ToolConfigError(f"a tool given as a mapping needs an 'id' (registered: {', '.join(TOOLS.ids())}), got {spec}")
        return TOOLS.get(str(options.pop("id")))(**options)
    if isinstance(spec, (Tool, ToolSource)):
        return spec
    raise ToolConfigError(f"a tool is a registry id, a mapping with 'id', or a tool object; got {type(spec).__name__}")


class ToolExecutor:
    """The tools of one env, its call parser and its per-episode call budget."""

    def __init__(self, tools: Sequence[Any], parser: str | Mapping[str, Any] = "hermes", max_calls_per_episode: int = 8,
                 max_result_chars: int = 4000):
        self.tools: dict[str, Tool] = {}
        self.sources: list[ToolSource] = []  # closed with the executor
        try:
            self._add_tools(tools)
        except BaseException:
            self.close()  # a source started before the error must not outlive it
            raise
        if not self.tools:
            raise ToolConfigError("a tool env needs at least one tool")
        if max_calls_per_episode < 1:
            raise ToolConfigError(f"max_calls_per_episode must be >= 1, got {max_calls_per_episode}")
        self.parser: ToolCallParser = build_parser(dict(parser) if isinstance(parser, Mapping) else parser)
        self.max_calls_per_episode = int(max_calls_per_episode)
        self.max_result_chars = int(max_result_chars)
        self.schemas: list[dict[str, Any]] = [schema(t) for t in self.tools.values()]
        self._pool: ThreadPoolExecutor | None = None
        self.calls_left = self.max_calls_per_episode
        self.stats: Counter = Counter()

    def _add_tools(self, specs: Sequence[Any]) -> None:
        origin: dict[str, str] = {}
        for spec in specs:
            built = build_tool(spec)
            if isinstance(built, ToolSource):
                self.sources.append(built)
                where, tools = built.describe(), built.tools()
            else:
                where, tools = "", [built]
            for tool in tools:
                if tool.name in self.tools:
                    froms = " and ".join(w for w in (origin[tool.name], where) if w)
                    hint = f" ({froms}; give an MCP source a `prefix`)" if froms else ""
                    raise ToolConfigError(f"two tools are named {tool.name!r}{hint}")
                self.tools[tool.name] = tool
                origin[tool.name] = where

    def reset(self) -> None:
        """A new episode: the budget is full and the counts start at zero."""
        self.calls_left = self.max_calls_per_episode
        self.stats = Counter()

    def handle(self, text: str) -> ToolTurn | None:
        """Tool results for a turn that calls tools; None when it does not, or when the
        budget is spent (the turn then goes to the env as the answer)."""
        calls = self.parser(text)
        if calls is None:
            return None
        if self.calls_left <= 0:
            self.stats["over_budget_turns"] += 1
            return None
        turn = ToolTurn()
        for call in calls:
            result = self._one(call)
            turn.results.append(result)
            self.stats["calls"] += 1
            if call.name in self.tools:
                self.stats[f"calls/{call.name}"] += 1
            if result.error:
                self.stats["errors"] += 1
                self.stats[f"errors/{result.error}"] += 1
                if call.name in self.tools:
                    self.stats[f"errors_by_tool/{call.name}"] += 1
        self.stats["turns"] += 1
        return turn

    def _one(self, call: ToolCall) -> ToolResult:
        if call.error:
            return ToolResult(call, f"Error: {call.detail}", call.error)
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolResult(call, f"Error: unknown tool {call.name[:60]!r}; available tools: {', '.join(self.tools)}",
                              "unknown_tool")
        if self.calls_left <= 0:
            return ToolResult(call, f"Error: the budget of {self.max_calls_per_episode} tool calls is spent; give your answer",
                              "budget")
        self.calls_left -= 1
        problems = validate_arguments(tool.parameters, call.arguments)
        if problems:
            return ToolResult(call, f"Error: bad arguments for {call.name}: {'; '.join(problems)}", "bad_arguments")
        try:
            content = self._run(tool, call.arguments)
        except ToolError as e:
            return ToolResult(call, f"Error: {e}", "tool_error")
        except ToolUnavailable as e:  # logged where it happened (the MCP source restarts its server)
            return ToolResult(call, f"Error: {e}", "unavailable")
        except FutureTimeout as e:
            # a tool that bounds its own time (timeout_s None, like an MCP tool) says what it was
            detail = str(e) or f"{call.name} took longer than {tool.timeout_s:g}s"
            return ToolResult(call, f"Error: {detail}", "timeout")
        except Exception as e:  # a bug in a tool must not end the episode; logged and counted
            logger.warning("tool %s raised %s: %s", call.name, type(e).__name__, e)
            return ToolResult(call, f"Error: {call.name} failed ({type(e).__name__})", "exception")
        if not isinstance(content, str):
            content = str(content)
        if len(content) > self.max_result_chars:
            content = content[: self.max_result_chars] + " [truncated]"
        return ToolResult(call, content)

    def _run(self, tool: Tool, arguments: dict[str, Any]) -> str:
        timeout = getattr(tool, "timeout_s", None)
        if timeout is None:
            return tool(arguments)
        # A Python thread cannot be killed: a tool that overruns is answered with a timeout
        # and left to finish in the background (shipped tools all bound their own run time).
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="roll-tool")
        future = self._pool.submit(tool, arguments)
        try:
            return future.result(timeout=timeout)
        finally:
            future.cancel()

    def close(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        for source in self.sources:
            source.close()
        self.sources = []


def tool_spec_problems(specs: Any, parser: Any = "hermes", where: str = "tools") -> list[str]:
    """Problems of a ``tools:`` list (and its parser) that show without building anything: ids
    not registered, options a tool does not take (or, for a class with ``option_problems``,
    such as the MCP source, whatever that reports), two tools of one known name. Pre-flight
    runs this before Ray starts; building the tools can still fail (an MCP server that does
    not start, a name clash with a server's tools)."""
    import inspect

    from roll.registry import TOOL_PARSERS, RegistryError

    problems: list[str] = []
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        return [f"{where}: a list of tools (registry ids or {{id: ..., options}}), got {specs!r}"]
    names: dict[str, int] = {}
    for i, spec in enumerate(specs):
        at = f"{where}[{i}]"
        if isinstance(spec, str):
            tool_id, options = spec, {}
        elif isinstance(spec, Mapping):
            if "id" not in spec:
                problems.append(f"{at}: a tool given as a mapping needs an 'id' (registered: {', '.join(TOOLS.ids())})")
                continue
            tool_id, options = str(spec["id"]), {k: v for k, v in spec.items() if k != "id"}
        else:
            continue  # a tool object, only possible from Python
        try:
            cls = TOOLS.get(tool_id)
        except RegistryError as e:
            problems.append(f"{at}: {e}")
            continue
        check = getattr(cls, "option_problems", None)
        if callable(check):
            problems += check(options, at)
        else:
            try:
                sig = inspect.signature(cls)
            except (TypeError, ValueError):
                sig = None
            if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
                for key in options:
                    if key not in sig.parameters:
                        problems.append(f"{at}.{key}: tool {tool_id!r} takes no option {key!r} "
                                        f"(its options: {', '.join(sig.parameters) or 'none'})")
            name = getattr(cls, "name", None)
            if isinstance(name, str) and name:
                if name in names:
                    problems.append(f"{at}: a second tool named {name!r} ({where}[{names[name]}] is one)")
                names[name] = i
    parser_id = parser.get("id") if isinstance(parser, Mapping) else parser
    if not isinstance(parser_id, str) or parser_id not in TOOL_PARSERS:
        problems.append(f"parser: {parser_id!r} is not a registered tool-call parser (registered: "
                        f"{', '.join(TOOL_PARSERS.ids())})")
    return problems


def describe_tool_spec(spec: Any) -> str:
    """One line for ``roll plan``: the tool id and its options; for an MCP source the command
    that would start its server (nothing is started)."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping):
        options = {k: v for k, v in spec.items() if k != "id"}
        if spec.get("id") == "mcp":
            import shlex

            line = f"mcp: `{shlex.join([str(spec.get('command', '?')), *map(str, spec.get('args') or [])])}`"
            extra = [f"{k}={', '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
                     for k, v in options.items() if k in ("tools", "prefix", "cwd", "timeout_s") and v not in (None, "")]
            if options.get("env"):
                extra.append(f"env: {', '.join(options['env'])}")  # names only: values may be secrets
            return line + (f" ({'; '.join(extra)})" if extra else "")
        return f"{spec.get('id')}" + (f" ({', '.join(f'{k}={v}' for k, v in options.items())})" if options else "")
    return getattr(spec, "name", type(spec).__name__)
