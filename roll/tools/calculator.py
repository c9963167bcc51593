"""A calculator tool: arithmetic on numbers, evaluated from the ``ast`` with a whitelist.

Only number literals, ``+ - * / // % **`` and unary ``+ -`` (and parentheses) are accepted;
names, calls, attributes, subscripts, strings and everything else are rejected before anything
is evaluated. Bounds keep a hostile expression from hanging the env or using its memory: the
expression length, the syntax-tree depth, and the size (in bits) of every integer result,
checked *before* a power or product is computed.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Any, ClassVar

from roll.tools.base import BaseTool, ToolError, object_parameters

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class Calculator(BaseTool):
    """Evaluate an arithmetic expression."""

    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. (12.5 + 3) * 4."
    parameters: ClassVar[dict[str, Any]] = object_parameters(
        {"expression": {"type": "string", "description": "the arithmetic expression"}})

    def __init__(self, max_chars: int = 500, max_depth: int = 40, max_bits: int = 4096, timeout_s: float = 5.0):
        self.max_chars = int(max_chars)
        self.max_depth = int(max_depth)
        self.max_bits = int(max_bits)
        self.timeout_s = float(timeout_s)

    def run(self, expression: str) -> str:
        return format_number(self.evaluate(expression))

    def evaluate(self, expression: str) -> int | float:
        if not isinstance(expression, str):
            raise ToolError("expression must be a string")
        if len(expression) > self.max_chars:
            raise ToolError(f"expression longer than {self.max_chars} characters")
        try:
            tree = ast.parse(expression.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            raise ToolError(f"not an arithmetic expression ({type(e).__name__})") from None
        return self._eval(tree.body, 1)

    def _eval(self, node: ast.AST, depth: int) -> int | float:
        if depth > self.max_depth:
            raise ToolError(f"expression nested deeper than {self.max_depth}")
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ToolError(f"only numbers are allowed, got {type(value).__name__} {str(value)[:20]!r}")
            return self._checked(value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self._eval(node.operand, depth + 1))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left = self._eval(node.left, depth + 1)
            right = self._eval(node.right, depth + 1)
            self._precheck(node.op, left, right)
            try:
                return self._checked(_BINARY[type(node.op)](left, right))
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
            except OverflowError:
                raise ToolError("result too large") from None
        what = type(node).__name__
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            raise ToolError(f"names, calls and attributes are not allowed ({what})")
        raise ToolError(f"{what} is not allowed; use numbers and + - * / // % **")

    def _precheck(self, op: ast.operator, left: float, right: float) -> None:
        """Refuse an integer power or product whose result would exceed ``max_bits``."""
        if isinstance(op, ast.Pow):
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                if right * math.log2(abs(left)) > self.max_bits:
                    raise ToolError(f"result too large (more than {self.max_bits} bits)")
            if isinstance(right, (int, float)) and abs(right) > 10_000 and abs(left) not in (0, 1):
                raise ToolError("exponent too large")
        if (isinstance(op, ast.Mult) and isinstance(left, int) and isinstance(right, int)
                and left.bit_length() + right.bit_length() > self.max_bits + 1):
            raise ToolError(f"result too large (more than {self.max_bits} bits)")

    def _checked(self, value: Any) -> int | float:
        if isinstance(value, complex):  # (-8) ** 0.5
            raise ToolError("the result is not a real number")
        if isinstance(value, int) and value.bit_length() > self.max_bits:
            raise ToolError(f"result too large (more than {self.max_bits} bits)")
        if isinstance(value, float) and not math.isfinite(value):
            raise ToolError("the result is not a finite number")
        return value


def format_number(value: float) -> str:
    """Integers in full; floats without a trailing ``.0`` when whole, else to 12 significant digits."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)
