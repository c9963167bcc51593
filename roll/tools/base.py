"""The tool contract: a named callable with an OpenAI-function JSON schema.

A tool is any object with ``name``, ``description``, ``parameters`` (the JSON schema of its
arguments object), ``timeout_s`` and ``__call__(arguments: dict) -> str``. ``schema()`` turns
one into the ``{"type": "function", "function": {...}}`` form that
``tokenizer.apply_chat_template(tools=...)`` takes. A tool signals an expected failure (bad
input, nothing found) by raising :class:`ToolError`; its message is shown to the model.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from roll.errors import RollError


class ToolError(Exception):
    """An expected failure of one tool call; the message is what the model is told."""


class ToolUnavailable(Exception):
    """What runs a tool is not there for this call (an MCP server that died, hung or is down).
    Answered and counted as ``unavailable``, apart from the model's own ``tool_error``s."""


class ToolConfigError(RollError):
    """A tool or tool parser is declared wrongly (unknown id, bad options)."""


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]
    timeout_s: float | None

    def __call__(self, arguments: dict[str, Any]) -> str: ...


@runtime_checkable
class ToolSource(Protocol):
    """Several tools from one provider that owns what they need (an MCP server process):
    ``tools()`` lists them, ``describe()`` names the provider (``roll plan``, errors), and
    ``close()`` releases it. A registry entry may build a source instead of a single tool."""

    def tools(self) -> list[Tool]: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


class BaseTool:
    """Convenience base: class attributes for the schema, ``run(**arguments)`` for the work."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    timeout_s: float | None = 10.0

    def __call__(self, arguments: dict[str, Any]) -> str:
        return self.run(**arguments)

    def run(self, **arguments: Any) -> str:
        raise NotImplementedError


def object_parameters(required: Mapping[str, dict[str, Any]], optional: Mapping[str, dict[str, Any]] | None = None
                      ) -> dict[str, Any]:
    """The JSON schema of a tool's arguments: an object with these properties and no others."""
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required),
            "additionalProperties": False}


def schema(tool: Tool) -> dict[str, Any]:
    """The OpenAI function form of a tool, as chat templates render it."""
    return {"type": "function", "function": {
        "name": tool.name, "description": tool.description, "parameters": tool.parameters}}


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,), "null": (type(None),),
}


def _type_ok(value: Any, expected: str | list[str]) -> bool:
    names = [expected] if isinstance(expected, str) else list(expected)
    for name in names:
        types = _JSON_TYPES.get(name)
        if types is None:
            continue
        # JSON has no bool-as-number: True is not an integer argument
        if isinstance(value, bool) and name in ("integer", "number"):
            continue
        if name == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, types):
            return True
    return False


def validate_arguments(parameters: Mapping[str, Any], arguments: Any, path: str = "arguments") -> list[str]:
    """Problems of ``arguments`` against the subset of JSON schema tools use: ``type``,
    ``properties``, ``required``, ``additionalProperties: false``, ``enum``, ``minimum``,
    ``maximum``, ``items``. Empty when valid."""
    problems: list[str] = []
    expected = parameters.get("type")
    if expected is not None and not _type_ok(arguments, expected):
        return [f"{path} must be {expected}, got {type(arguments).__name__}"]
    if "enum" in parameters and arguments not in parameters["enum"]:
        problems.append(f"{path} must be one of {list(parameters['enum'])}")
    if isinstance(arguments, (int, float)) and not isinstance(arguments, bool):
        if "minimum" in parameters and arguments < parameters["minimum"]:
            problems.append(f"{path} must be >= {parameters['minimum']}")
        if "maximum" in parameters and arguments > parameters["maximum"]:
            problems.append(f"{path} must be <= {parameters['maximum']}")
    if isinstance(arguments, dict):
        props = parameters.get("properties") or {}
        for key in parameters.get("required") or []:
            if key not in arguments:
                problems.append(f"missing required argument {key!r}")
        if parameters.get("additionalProperties") is False:
            for key in arguments:
                if key not in props:
                    problems.append(f"unknown argument {key!r} (expected: {', '.join(props) or 'none'})")
        for key, value in arguments.items():
            if key in props:
                problems += validate_arguments(props[key], value, f"{key!r}" if path == "arguments" else f"{path}.{key}")
    if isinstance(arguments, list) and isinstance(parameters.get("items"), Mapping):
        for i, value in enumerate(arguments):
            problems += validate_arguments(parameters["items"], value, f"{path}[{i}]")
    return problems
