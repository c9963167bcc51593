"""The code_sandbox reward: extraction, test formats, comparison, and scores from real runs."""
from __future__ import annotations

import pytest

from roll.registry import REWARDS
from roll.rewards.base import RewardOutput
from roll.rewards.code import (
    code_sandbox_reward,
    extract_code,
    normalize_tests,
    outputs_match,
    values_equal,
)

FAST = {"timeout_s": 5.0, "cpu_time_s": 3.0}
ADD_STDIO = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"},
             {"input": "-1 1\n", "output": "0\n"}, {"input": "2 2\n", "output": "4\n"}]
ADD_CALLS = ["assert add(1, 2) == 3", "assert add(5, 5) == 10", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\n"


def score(code_text: str, tests, **kw) -> RewardOutput:
    return code_sandbox_reward({"response": code_text}, tests=tests, sandbox=FAST, **kw)


# ------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize("text, code", [
    ("```python\nprint(1)\n```", "print(1)\n"),
    ("```py\nprint(1)\n```", "print(1)\n"),
    ("intro\n```\nx = 1\n```\nthen\n```python\nprint(2)\n```", "print(2)\n"),  # the python block wins
    ("```python\nprint(1)\n```\n```python\nprint(3)\n```", "print(3)\n"),  # the last one
    ("<answer>print(4)</answer>", "print(4)\n"),
    ("<think>```python\nprint(0)\n```</think><answer>\n```python\nprint(5)\n```\n</answer>", "print(5)\n"),
    ("<ANSWER>print(6)</ANSWER>", "print(6)\n"),
])
def test_extract_code(text, code):
    assert extract_code(text) == (code, "")


@pytest.mark.parametrize("text, why", [
    ("print(1)", "no code found"),
    ("<answer>print(1)", "unbalanced"),
    ("print(1)</answer>", "unbalanced"),
    ("<answer><answer>x</answer></answer>", "nested"),
    ("<answer>   </answer>", "no code"),
    ("```python\n\n```", "no code"),
    (None, "not text"),
    (12, "not text"),
])
def test_extract_code_rejects(text, why):
    code, err = extract_code(text)
    assert code is None and why in err


def test_extract_code_is_linear_on_adversarial_text():
    import time

    start = time.monotonic()
    for text in ("```" * 100_000, "<answer>" * 100_000, "```python\n" * 50_000):
        extract_code(text)
    assert time.monotonic() - start < 1.0


# ------------------------------------------------------------------------------ test formats
def test_normalize_formats():
    cases = normalize_tests([
        {"input": "1\n", "output": "2\n"}, {"stdin": "a", "stdout": "b"}, {"input": ["1", "2"], "expected_output": ["3"]},
        "assert f(1) == 2", "assert f(2) != 3", "assert g() is None", "assert h(1)",
        {"call": "f(3)", "expected": [1, 2]}, {"call": "f(4)", "expected_repr": "(1, 2)"},
    ])
    kinds = [c.kind for c in cases]
    assert kinds == ["stdio"] * 3 + ["call"] * 6
    assert cases[2].stdin == "1\n2\n" and cases[2].expected_stdout == "3\n"
    assert (cases[3].call, cases[3].expected, cases[3].negate) == ("f(1)", 2, False)
    assert cases[4].negate and cases[5].identity and cases[5].expected is None
    assert (cases[6].call, cases[6].expected) == ("h(1)", True)
    assert cases[8].expected == (1, 2)
    apps = normalize_tests({"inputs": [[1, 2], [3, 4]], "outputs": [3, 7], "fn_name": "add"})
    assert [c.call for c in apps] == ["add(*[1, 2])", "add(*[3, 4])"]
    stdio = normalize_tests({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    assert stdio[0].kind == "stdio"
    assert normalize_tests('[{"input": "1", "output": "1"}]')[0].kind == "stdio"


@pytest.mark.parametrize("bad, match", [
    ([], "no test cases"),
    (None, "must be a list"),
    (["assert f(1) == g(2)"], "literal"),
    (["assert f(1) < 2"], "only =="),
    (["x = 1"], "single assert"),
    (["assert ("], "not valid Python"),
    ([{"input": "1"}], "needs 'input' and 'output'"),
    ([{"call": "f()"}], "needs 'expected'"),
    ({"inputs": [1], "outputs": []}, "1 inputs but 0 outputs"),
    ([3.5], "unsupported type"),
])
def test_normalize_rejects(bad, match):
    with pytest.raises(ValueError, match=match):
        normalize_tests(bad)


def test_value_and_output_comparison():
    assert values_equal(0.3, 0.1 + 0.2) and not values_equal(0.3, 0.31)
    assert values_equal([1, (2, 3)], [1, [2, 3]]) and values_equal({"a": 1.0}, {"a": 1})
    assert not values_equal("1", 1) and not values_equal([1], [1, 2])
    assert values_equal(float("nan"), float("nan"))
    assert outputs_match("1 2\n3\n", "1 2   \n3\n\n\n") and not outputs_match("1 2", "1  2")
    assert outputs_match("0.333333", "0.3333334", float_tolerance=1e-5) and not outputs_match("0.3", "0.4", 1e-5)


# ------------------------------------------------------------------------------ scores
def test_registered_under_code_sandbox():
    assert REWARDS.get("code_sandbox") is code_sandbox_reward


@pytest.mark.parametrize("tests", [ADD_STDIO, ADD_CALLS], ids=["stdio", "calls"])
def test_correct_wrong_and_partial(tests):
    if tests is ADD_STDIO:
        right, wrong = "a, b = map(int, input().split())\nprint(a + b)", "print(-7)"
        partial = "a, b = map(int, input().split())\nprint(a * b if a == b else a + b)"  # wrong on 5 5
    else:
        right, wrong = "def add(a, b):\n    return a + b", "def add(a, b):\n    return None"
        partial = "def add(a, b):\n    return a * b if a == b else a + b"
    out = score(fenced(right), tests)
    assert (out.score, out.success, out.components) == (1.0, True, {"pass_rate": 1.0, "full_pass": 1.0, "judge_errors": 0.0})
    out = score(fenced(wrong), tests)
    assert (out.score, out.success) == (0.0, False)
    out = score(fenced(partial), tests)
    assert out.score == pytest.approx(0.75) and not out.success and out.info["passed"] == 3
    assert "5 5" in out.info["first_failure"] or "add(5, 5)" in out.info["first_failure"]
    out = score(fenced(partial), tests, score="full_pass")
    assert out.score == 0.0 and out.components["pass_rate"] == pytest.approx(0.75)


def test_failure_statuses():
    out = score(fenced("import time\ntime.sleep(100)"), ADD_STDIO[:1], timeout_s=1)
    assert out.info["statuses"] == ["timeout"]
    out = score(fenced("raise ValueError('boom')"), ADD_STDIO[:1])
    assert out.info["statuses"] == ["runtime_error"] and "boom" in out.info["first_failure"]
    out = score(fenced("def add(a, b):\n    return a +"), ADD_CALLS)
    assert set(out.info["statuses"]) == {"syntax_error"}
    out = score(fenced("def add(a, b):\n    return 1 / 0"), ADD_CALLS[:1])
    assert out.info["statuses"] == ["runtime_error"] and "ZeroDivisionError" in out.info["first_failure"]
    out = score(fenced("import os\nos._exit(0)"), ADD_CALLS[:1])
    assert out.info["statuses"] == ["crashed"] and out.score == 0.0


def test_call_tests_compare_values_in_the_parent():
    # __eq__ that says yes to everything cannot pass: only the repr crosses the boundary.
    cheat = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n\ndef add(a, b):\n    return Yes()"
    assert score(fenced(cheat), ADD_CALLS).score == 0.0
    # A program that monkeypatches builtins (e.g. repr) only corrupts its own report.
    patch = "import builtins\nbuiltins.repr = lambda x: '3'\ndef add(a, b):\n    return 0"
    assert score(fenced(patch), ADD_CALLS).score == pytest.approx(0.25)  # only add(1, 2) == 3 "matches"
    assert score(fenced("def f():\n    return 1.0000000001"), ["assert f() == 1"]).score == 1.0
    assert score(fenced("def f():\n    return (1, 2)"), [{"call": "f()", "expected": [1, 2]}]).score == 1.0
    assert score(fenced("def f():\n    return None"), ["assert f() is None", "assert f() is not None"]).score == 0.5


def test_no_code_and_missing_tests():
    out = score("I think the answer is 3.", ADD_STDIO)
    assert out.score == 0.0 and "no code" in out.info["error"]
    with pytest.raises(ValueError, match="needs test cases"):
        code_sandbox_reward({"response": fenced("print(1)")})


def test_tests_and_response_from_the_sample():
    sample = {"completion": fenced("print(int(input()) * 2)"), "test_cases": [{"input": "4", "output": "8"}]}
    out = code_sandbox_reward({**sample, "score": 0.3, "sandbox": "unrelated"}, sandbox=FAST)
    assert out.score == 1.0 and out.info["isolation"] in ("userns", "root")  # other sample keys are ignored
