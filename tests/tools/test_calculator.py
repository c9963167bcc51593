"""The calculator tool: exact arithmetic, and hostile expressions refused quickly."""
import time

import pytest

from roll.registry import TOOLS
from roll.tools import ToolError
from roll.tools.calculator import Calculator


@pytest.fixture
def calc():
    return Calculator()


@pytest.mark.parametrize("expr, want", [
    ("2 + 3 * 4", "14"), ("(2 + 3) * 4", "20"), ("7 / 2", "3.5"), ("7 // 2", "3"), ("-7 % 3", "2"),
    ("2 ** 10", "1024"), ("2 ** -1", "0.5"), ("1234567 * 7654321", "9449772114007"), ("6 / 3", "2"),
    ("-(3 - 5)", "2"), ("+4", "4"), ("0.1 + 0.2", "0.3"), ("1e3 * 2", "2000"), ("12345678901234567890 + 1", "12345678901234567891"),
    ("2 ** 0.5", "1.41421356237"),
])
def test_correct_results(calc, expr, want):
    assert calc({"expression": expr}) == want


@pytest.mark.parametrize("expr, message", [
    ("9 ** 9 ** 9", "too large"),
    ("2 ** 100000", "too large"),
    ("(2 ** 4000) * (2 ** 4000)", "too large"),
    ("10.0 ** 400", "too large"),
    ("1.5 ** 100000", "exponent too large"),
    ("1e308 * 10", "not a finite"),
    ("(-8) ** 0.5", "not a real"),
    ("1 / 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("__import__('os').system('true')", "not allowed"),
    ("x + 1", "not allowed"),
    ("(1).__class__", "not allowed"),
    ("abs(-1)", "not allowed"),
    ("[1, 2][0]", "not allowed"),
    ("'a' * 3", "only numbers"),
    ("True + 1", "only numbers"),
    ("lambda: 1", "not allowed"),
    ("1 if 1 else 2", "not allowed"),
    ("2 < 3", "not allowed"),
    ("1 +", "not an arithmetic expression"),
    ("1; 2", "not an arithmetic expression"),
    ("-" * 100 + "1", "nested deeper"),
    ("(" * 30 + "1" + ")" * 30 + "+ 1" * 60, "nested deeper"),
    ("1+" * 300 + "1", "longer than"),
])
def test_hostile_or_invalid_expressions_are_refused_fast(calc, expr, message):
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=message):
        calc({"expression": expr})
    assert time.monotonic() - t0 < 2.0  # bounded work, with room for a loaded machine


def test_very_deep_parentheses_within_the_length_limit():
    calc = Calculator(max_chars=100_000)
    with pytest.raises(ToolError):
        calc({"expression": "(" * 5000 + "1" + ")" * 5000})


def test_registered():
    assert isinstance(TOOLS.get("calculator")(), Calculator)
    assert set(TOOLS.ids()) >= {"calculator", "python", "search"}
