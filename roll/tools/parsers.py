"""Parsers of the tool calls in a model turn, in a registry (``TOOL_PARSERS``).

A parser takes the text of one assistant turn and returns ``None`` when the turn makes no tool
call (it is the final answer, for the env), or the list of calls it attempted. An attempted
call that cannot be used carries an ``error`` (its kind) and ``detail``; it is answered with an
error message, never raised. Parsers run in time linear in the text (``str.find``, no regex
that could backtrack over model text).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from roll.registry import TOOL_PARSERS


@dataclass
class ToolCall:
    """One call found in a model turn; ``error`` is empty when it is well-formed."""

    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    """Kind of the problem: ``malformed`` (not JSON, unclosed tag), ``missing_name``,
    ``bad_arguments`` (not an object); the executor adds ``unknown_tool`` and others."""
    detail: str = ""
    raw: str = ""


class ToolCallParser(Protocol):
    def __call__(self, text: str) -> list[ToolCall] | None: ...


@TOOL_PARSERS.register("hermes")
class HermesToolParser:
    """Qwen2.5 / Hermes format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
    any number per turn. ``arguments`` may also be a JSON string holding an object."""

    open_tag = "<tool_call>"
    close_tag = "</tool_call>"

    def __init__(self, max_calls_per_turn: int = 16):
        if max_calls_per_turn < 1:
            raise ValueError(f"max_calls_per_turn must be >= 1, got {max_calls_per_turn}")
        self.max_calls_per_turn = int(max_calls_per_turn)

    def __call__(self, text: str) -> list[ToolCall] | None:
        calls: list[ToolCall] = []
        pos = text.find(self.open_tag)
        if pos < 0:
            return None
        while pos >= 0 and len(calls) < self.max_calls_per_turn:
            start = pos + len(self.open_tag)
            end = text.find(self.close_tag, start)
            if end < 0:
                calls.append(ToolCall(error="malformed", detail=f"{self.open_tag} is not closed by {self.close_tag}",
                                      raw=text[start:start + 200]))
                break
            # a second open tag before the close: the first call was never closed
            reopened = text.find(self.open_tag, start, end)
            if reopened >= 0:
                calls.append(ToolCall(error="malformed", detail=f"{self.open_tag} is not closed by {self.close_tag}",
                                      raw=text[start:reopened][:200]))
                pos = reopened
                continue
            calls.append(self.parse_body(text[start:end]))
            pos = text.find(self.open_tag, end + len(self.close_tag))
        return calls

    @staticmethod
    def parse_body(body: str) -> ToolCall:
        raw = body.strip()
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as e:
            return ToolCall(error="malformed", detail=f"the call is not valid JSON ({e})", raw=raw[:200])
        if not isinstance(obj, dict):
            return ToolCall(error="malformed", detail=f"the call must be a JSON object, got {type(obj).__name__}", raw=raw[:200])
        name = obj.get("name")
        if not isinstance(name, str) or not name.strip():
            return ToolCall(error="missing_name", detail='the call has no "name" string', raw=raw[:200])
        arguments = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                return ToolCall(name=name, error="bad_arguments", detail='"arguments" is a string that is not a JSON object', raw=raw[:200])
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return ToolCall(name=name, error="bad_arguments",
                            detail=f'"arguments" must be an object, got {type(arguments).__name__}', raw=raw[:200])
        return ToolCall(name=name.strip(), arguments=arguments, raw=raw[:200])


def build_parser(spec: str | dict[str, Any] = "hermes") -> ToolCallParser:
    """A parser from its registry id, or ``{"id": ..., **options}``."""
    options: dict[str, Any] = {}
    if isinstance(spec, dict):
        options = dict(spec)
        spec = options.pop("id", "hermes")
    return TOOL_PARSERS.get(str(spec))(**options)
