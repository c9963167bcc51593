"""The code reward against hostile output (issue 18): nothing a program prints or returns can
raise out of the reward, a sample's wall time is bounded, and call tests show a program only its
own call. Fuzzed with hypothesis over arbitrary text, bytes and numbers."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roll.config.schema import RewardConfig
from roll.rewards.code import (
    DEFAULT_BUDGET_S,
    TestCase,
    _call_passed,
    _judge_call,
    _judge_stdio,
    _judged,
    code_sandbox_reward,
    outputs_match,
    values_equal,
)
from roll.sandbox import ExecutionResult

FAST = {"timeout_s": 5.0, "cpu_time_s": 3.0}
MARK = "@@roll-0123456789abcdef"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```\n"


def score(code_text: str, tests, **kw):
    return code_sandbox_reward({"response": fenced(code_text)}, tests=tests, sandbox=FAST, **kw)


# ------------------------------------------------------------------ the two reported crashes
def test_a_result_line_with_a_non_ascii_digit_index_is_not_a_crash():
    """int('²') raised ValueError out of the reward: the sample failed and was dropped."""
    forged = (
        "import sys\n"
        "mark = sys.argv[1]\n"
        "print(mark, '\\u00b2', 'R', '\"3\"')\n"
        "print(mark, '\\u0663', 'R', '\"3\"')\n"  # ARABIC-INDIC DIGIT THREE
        "def add(a, b):\n"
        "    return 0\n"
    )
    out = score(forged, ["assert add(1, 2) == 3", "assert add(2, 2) == 4"])
    assert out.score == 0.0 and out.info["statuses"] == ["wrong_answer", "wrong_answer"]


def test_a_huge_integer_where_a_float_is_expected_is_wrong_not_a_crash():
    """10**400 raised OverflowError in values_equal."""
    out = score("def f():\n    return 10**400", ["assert f() == 1.5", "assert f() != 2.5"])
    assert out.score == pytest.approx(0.5) and out.info["statuses"] == ["wrong_answer", "passed"]
    assert not values_equal(1.5, 10**400) and not values_equal(10**400, float("inf"))


def test_a_case_that_cannot_be_judged_is_wrong_and_counted():
    case = TestCase("stdio", stdin="1\n", expected_stdout="2\n")

    def broken_judge(*_):
        raise UnicodeError("cannot judge this")

    verdict = _judged(0, case, broken_judge)
    assert not verdict.passed and verdict.judge_error and verdict.status == "wrong_answer"
    assert "UnicodeError" in verdict.detail


# ------------------------------------------------------------------ a bounded time per sample
def test_twenty_sleeping_cases_stay_within_the_sample_budget():
    """About cases / concurrency x timeout_s: 13 or more sleeping cases passed the reward
    worker's timeout, which masked the sample and left a thread hanging."""
    tests = [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(20)]
    start = time.monotonic()
    out = code_sandbox_reward({"response": fenced("import time\ntime.sleep(60)")}, tests=tests,
                              sandbox={"timeout_s": 1.0, "cpu_time_s": 1.0}, max_concurrency=2, budget_s=3.0)
    elapsed = time.monotonic() - start
    assert out.score == 0.0 and out.info["statuses"] == ["timeout"] * 20
    assert elapsed < 3.0 + 2.5, elapsed


def test_the_default_budget_is_below_the_reward_workers_timeout():
    assert DEFAULT_BUDGET_S < RewardConfig(reward_fn="code_sandbox").timeout_s


def test_bad_budget_is_an_error():
    with pytest.raises(ValueError, match="budget_s"):
        score("print(1)", [{"input": "", "output": "1"}], budget_s=0)


# ------------------------------------------------------------------ call tests expose one call
def test_a_call_test_sees_only_its_own_call():
    """Every call expression was in calls.json, readable by the program."""
    snoop = (
        "import os, sys\n"
        "SEEN = []\n"
        "for root, _, files in os.walk('.'):\n"
        "    for name in files:\n"
        "        if name in ('solution.py', 'main.py'):\n"
        "            continue\n"
        "        try:\n"
        "            SEEN.append(open(os.path.join(root, name)).read())\n"
        "        except OSError:\n"
        "            pass\n"
        "SEEN.append(' '.join(sys.argv))\n"
        "def add(a, b):\n"
        "    return repr(SEEN)\n"
    )
    calls = ["assert add(1, 2) == 3", "assert add(5, 5) == 10", "assert add(-1, 1) == 0"]
    out = score(snoop, calls)
    assert out.score == 0.0
    first = out.info["first_failure"]
    assert "add(1, 2)" in first and "add(5, 5)" not in first.split("returned", 1)[1], first


# ------------------------------------------------------------------ fuzzing
PRINTABLE_HEADS = st.one_of(st.sampled_from(["0", "1", "LOAD", "²", "٣", "-1", "00", "0 ", "", "X"]), st.text(max_size=6))
PAYLOADS = st.one_of(
    st.sampled_from(["R \"3\"", "X \"boom\"", "R \"10**400\"", "R \"1e999\"", "R \"[[[[[[\"", "R " + json.dumps("[" * 5000)]),
    st.text(max_size=40),
    st.builds(lambda n: "R " + json.dumps(repr(n)), st.one_of(st.integers(), st.floats(allow_nan=True), st.complex_numbers())),
)


def _result(stdout: str, exit_code: int = 0) -> ExecutionResult:
    return ExecutionResult(exit_code=exit_code, signal=None, stdout=stdout, stderr="")


EXPECTED = st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=5),
                     st.lists(st.one_of(st.integers(), st.floats(allow_nan=True)), max_size=3))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.lists(PRINTABLE_HEADS, max_size=4), payloads=st.lists(PAYLOADS, max_size=4),
       noise=st.binary(max_size=200), expected=EXPECTED, exit_code=st.integers(0, 255))
def test_call_judging_never_raises(heads, payloads, noise, expected, exit_code):
    lines = [f"{MARK} {h} {p}" for h, p in zip(heads, payloads)]
    stdout = noise.decode("utf-8", errors="replace") + "\n" + "\n".join(lines)
    for case in (TestCase("call", call="f()", expected=expected),
                 TestCase("call", call="f()", expected=expected, negate=True),
                 TestCase("call", call="f()", expected=None, identity=True)):
        verdict = _judged(0, case, _judge_call, _result(stdout, exit_code), MARK, 1.0, 300)
        assert verdict.status in ("passed", "wrong_answer", "runtime_error", "crashed", "timeout", "memory")
        assert isinstance(verdict.passed, bool)


@settings(max_examples=400, deadline=None)
@given(expected=st.text(max_size=60), got=st.one_of(st.text(max_size=60), st.binary(max_size=60).map(
    lambda b: b.decode("utf-8", errors="replace"))), tol=st.sampled_from([0.0, 1e-6, 0.5]))
def test_stdio_judging_never_raises(expected, got, tol):
    case = TestCase("stdio", stdin="x\n", expected_stdout=expected)
    verdict = _judged(0, case, _judge_stdio, _result(got), 1.0, tol, 300)
    assert verdict.passed == outputs_match(expected, got, tol)
    assert not verdict.judge_error


NUMBERS = st.one_of(st.integers(), st.integers(min_value=10**300, max_value=10**500), st.floats(allow_nan=True),
                    st.booleans(), st.decimals(allow_nan=False, allow_infinity=False).map(str))


@settings(max_examples=500, deadline=None)
@given(a=st.recursive(NUMBERS, lambda kids: st.lists(kids, max_size=3) | st.tuples(kids, kids), max_leaves=8),
       b=st.recursive(NUMBERS, lambda kids: st.lists(kids, max_size=3) | st.tuples(kids, kids), max_leaves=8))
def test_value_comparison_never_raises(a, b):
    assert isinstance(values_equal(a, b), bool)
    assert isinstance(_call_passed(TestCase("call", call="f()", expected=a), repr(b)), bool)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.binary(min_size=1, max_size=300), head=PRINTABLE_HEADS)
def test_end_to_end_hostile_output_is_scored(junk, head):
    """A real program that writes arbitrary bytes and forged result lines: always a score."""
    code = (
        "import os, sys\n"
        f"os.write(1, {junk!r})\n"
        f"print(sys.argv[1] if len(sys.argv) > 1 else '', {head!r}, 'R', '\"1\"')\n"
        "def f():\n"
        f"    os.write(1, {junk!r})\n"
        "    return 10**400\n"
    )
    tests = ["assert f() == 1.5", {"input": "", "output": "1"}]
    out = code_sandbox_reward({"response": fenced(code)}, tests=tests, sandbox=FAST, budget_s=20)
    assert out.score == 0.0 and len(out.info["statuses"]) == 2
