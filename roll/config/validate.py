"""Strict conversion of plain (YAML-loaded) data into the config dataclasses.

Every problem is collected and reported at once, each with its full dotted path:
unknown keys (with the closest valid key), wrong types (expected type and given value),
missing required fields, numbers outside the range a field declares (``ranged(...)``, shown
in docs/config.md). ``dict[str, Any]`` fields are passed through untouched; that is how
backend options under ``strategy_args`` reach their backend.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import math
import textwrap
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from roll.errors import RollError


class ConfigError(RollError, ValueError):
    """A config that cannot be used; ``errors`` holds one line per problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        n = len(self.errors)
        head = f"invalid config ({n} problem{'s' if n != 1 else ''}):"
        return "\n".join([head] + [f"  - {e}" for e in self.errors])


MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Range:
    """Bounds of a numeric config field (each optional); NaN is never inside a range."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __str__(self) -> str:
        low = f">= {self.ge:g}" if self.ge is not None else f"> {self.gt:g}" if self.gt is not None else ""
        high = f"<= {self.le:g}" if self.le is not None else f"< {self.lt:g}" if self.lt is not None else ""
        return " and ".join(p for p in (low, high) if p) or "any"

    def contains(self, value: float) -> bool:
        if math.isnan(value):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


def ranged(default: Any = MISSING, *, default_factory: Any = MISSING, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Any:
    """A dataclass field whose value (or each item of a list value; null always passes) must
    lie in a range: ``lr: float = ranged(1e-6, gt=0)``."""
    meta = {"range": Range(ge, gt, le, lt)}
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_range(f: dataclasses.Field) -> Range | None:
    """The declared range of a config field, if any."""
    return f.metadata.get("range") if f.metadata else None


def _range_problem(rng: Range, value: Any, path: str) -> str | None:
    items = value if isinstance(value, (list, tuple)) else [value]
    for i, v in enumerate(items):
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if not rng.contains(v):
            where = f"{path}[{i}]" if isinstance(value, (list, tuple)) else path
            return f"{where}: must be {rng}, got {v!r}"
    return None


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is Any:
        return "any"
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = get_args(tp)
        return f"list[{type_name(args[0]) if args else 'any'}]"
    if origin is dict:
        args = get_args(tp)
        return f"dict[str, {type_name(args[1]) if args else 'any'}]"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"mapping ({tp.__name__})"
    return getattr(tp, "__name__", str(tp))


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _convert(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, path, errors)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
        else:
            for arg in args:
                if arg is type(None):
                    continue
                trial: list[str] = []
                out = _convert(arg, value, path, trial)
                if not trial:
                    return out
            # One non-null alternative: its own (more precise) errors are the useful ones.
            non_null = [a for a in args if a is not type(None)]
            if len(non_null) == 1:
                return _convert(non_null[0], value, path, errors)
        errors.append(f"{path}: expected {type_name(tp)}, got {value!r}")
        return None
    if origin is Literal:
        if value in get_args(tp):
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in get_args(tp)], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        errors.append(f"{path}: expected one of {type_name(tp)}, got {value!r}{hint}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            errors.append(f"{path}: expected {type_name(tp)}, got {value!r}")
            return value
        (item_tp,) = get_args(tp)[:1] or (Any,)
        return [_convert(item_tp, v, f"{path}[{i}]", errors) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected {type_name(tp)}, got {value!r}")
            return value
        args = get_args(tp)
        val_tp = args[1] if args else Any
        return {str(k): _convert(val_tp, v, _join(path, k), errors) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    errors.append(f"{path}: expected {type_name(tp)}, got {value!r} ({type(value).__name__})")
    return value


def _resolved_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def build_dataclass(cls: type, data: Any, path: str = "", errors: list[str] | None = None) -> Any:
    """Build ``cls`` from ``data``; raises ConfigError (with every problem) at the top level."""
    top = errors is None
    errors = [] if errors is None else errors
    if data is None:
        data = {}
    if not isinstance(data, dict):
        errors.append(f"{path or '<root>'}: expected a mapping ({cls.__name__}), got {data!r}")
        if top:
            raise ConfigError(errors)
        return None
    n_errors_before = len(errors)
    hints = _resolved_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(fields)}"
            errors.append(f"{_join(path, key)}: unknown key{hint}")
            continue
        n_before = len(errors)
        kwargs[key] = _convert(hints[key], value, _join(path, key), errors)
        rng = field_range(fields[key])
        if rng is not None and len(errors) == n_before:
            problem = _range_problem(rng, kwargs[key], _join(path, key))
            if problem:
                errors.append(problem)
    for name, f in fields.items():
        if name in kwargs:
            continue
        if f.default is MISSING and f.default_factory is MISSING:
            errors.append(f"{_join(path, name)}: required field is missing ({type_name(hints[name])})")
    if top and errors:
        raise ConfigError(errors)
    if len(errors) > n_errors_before:
        return None
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as e:  # __post_init__ checks report with the path
        errors.append(f"{path or '<root>'}: {e}")
        if top:
            raise ConfigError(errors) from None
        return None
    return obj


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings: the string literal written right under each field."""
    cached = cls.__dict__.get("__field_docs__")
    if cached is not None:
        return cached
    docs: dict[str, str] = {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        tree = None
    if tree is not None:
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(nxt.value.value)
    cls.__field_docs__ = docs
    return docs


def to_dict(obj: Any) -> Any:
    """Dataclass tree -> plain data (for saving the resolved config next to a run)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj
