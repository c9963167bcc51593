"""Code reward: run a model's program against test cases in the sandbox and score the pass rate.

Test cases (the ``tests`` / ``test_cases`` field, or the same keys on the sample):

- stdin/stdout: ``{"input": "1 2\\n", "output": "3\\n"}`` (``stdin``/``stdout`` and
  ``expected_output`` are accepted too). Each case is one execution; the parent compares the
  program's stdout with the expected text (trailing whitespace ignored per line, or
  token-by-token with a numeric tolerance when ``float_tolerance`` > 0).
- function calls: ``"assert add(1, 2) == 3"`` (``==``/``!=`` against a Python literal, ``is
  None``/``is not None``, or a bare expression that must be True), or ``{"call": "add(1, 2)",
  "expected": 3}`` (a JSON value; ``expected_repr`` takes a Python literal string instead).
  Each call is its own execution, which sees only its own call expression. The child only
  reports ``repr`` of the returned value; the expected values never enter the sandbox, and
  the parent does the comparison on plain data (``ast.literal_eval``), so a program cannot
  pass by printing "ALL TESTS PASSED", by overriding ``__eq__``, or by reading the tests.
- APPS/TACO style: ``{"inputs": [...], "outputs": [...]}`` (stdin/stdout), or with
  ``fn_name`` (each input is an argument list).

Pass/fail is always decided here, in the parent, from captured output. Nothing a program
prints can raise out of the reward: a case whose output cannot be parsed or compared is wrong
(``judge_error`` in its detail, counted in the ``judge_errors`` component), and a sample has a
wall-time budget (``budget_s``): cases whose turn comes after it are scored 0 as timeouts, so
a program that sleeps costs a bounded time and never masks its sample.
"""
from __future__ import annotations

import ast
import json
import math
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roll.registry import REWARDS
from roll.rewards.base import RewardOutput, reads
from roll.sandbox import ExecutionResult, SandboxPool, get_pool

NO_CODE_HINT = "put the program in a ```python code block or inside <answer></answer>"
DEFAULT_BUDGET_S = 30.0
"""Wall time of one sample's executions; below the reward worker's default timeout_s (60)."""
_LITERAL_MISSING = object()

# The harness that runs one function-call test in the sandbox. It receives only its call
# expression, never the expected value nor the other calls, and prints one marked line with the
# repr of the value (or the exception). It keeps its own references to what it needs before
# running the solution, which may monkeypatch builtins.
_HARNESS = r'''
import json, os, sys
_write, _repr, _dumps, _type, _str = os.write, repr, json.dumps, type, str

def _emit(line):
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    _write(1, ("\n" + line + "\n").encode("utf-8", "replace"))

def _main():
    mark, call_path, src_path = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(call_path) as f:
        calls = [json.load(f)]
    os.unlink(call_path)
    with open(src_path) as f:
        src = f.read()
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(src, "solution.py", "exec"), ns)
    except BaseException as e:
        _emit("%s LOAD %s" % (mark, _dumps("%s: %s" % (_type(e).__name__, _str(e)[:500]))))
        return
    for i, call in enumerate(calls):
        try:
            out = "R " + _dumps(_repr(eval(call, ns)))
        except BaseException as e:
            out = "X " + _dumps("%s: %s" % (_type(e).__name__, _str(e)[:500]))
        _emit("%s %d %s" % (mark, i, out))

_main()
'''


# ------------------------------------------------------------------------------ extraction
def _strip_think(text: str) -> str:
    lower = text.lower()
    end = lower.rfind("</think>")
    return text[end + len("</think>"):] if end >= 0 else text


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each ``` fenced block, found by a linear scan."""
    blocks = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            break
        line_end = text.find("\n", start + 3)
        if line_end < 0:
            break
        end = text.find("```", line_end + 1)
        if end < 0:
            break
        blocks.append((text[start + 3:line_end].strip().lower(), text[line_end + 1:end]))
        pos = end + 3
    return blocks


def extract_code(text: object) -> tuple[str | None, str]:
    """The program in a model answer: ``(code, "")`` or ``(None, why not)``.

    The answer is the last ``<answer>...</answer>`` if there is one (a fenced block inside it
    is unwrapped), else the last ```python fenced block (or the last fenced block of any
    language). A leading ``<think>`` block is ignored.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return None, f"answer is not text ({type(text).__name__})"
    text = _strip_think(text)
    lower = text.lower()
    close = lower.rfind("</answer>")
    if close >= 0 or "<answer>" in lower:
        open_ = lower.rfind("<answer>", 0, close if close >= 0 else len(lower))
        if close < 0 or open_ < 0:
            return None, "unbalanced <answer> tags"
        body = text[open_ + len("<answer>"):close]
        if "<answer>" in lower[:open_] and lower.find("</answer>", 0, open_) < 0:
            return None, "nested <answer> tags"
        blocks = _fenced_blocks(body)
        code = _pick_block(blocks) if blocks else body
    else:
        blocks = _fenced_blocks(text)
        if not blocks:
            return None, f"no code found: {NO_CODE_HINT}"
        code = _pick_block(blocks)
    # Lone surrogates and the like cannot be written to a file: replace them like a decoder would.
    code = code.encode("utf-8", errors="replace").decode("utf-8").strip("\n")
    if not code.strip():
        return None, "the answer holds no code"
    return code + "\n", ""


def _pick_block(blocks: list[tuple[str, str]]) -> str:
    python = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    return (python or [body for _, body in blocks])[-1]


# ------------------------------------------------------------------------------ test cases
@dataclass
class TestCase:
    """One normalized test: ``kind`` is "stdio" or "call"."""

    __test__ = False  # not a pytest class

    kind: str
    stdin: str = ""
    expected_stdout: str = ""
    call: str = ""
    expected: Any = None
    display: str = ""
    negate: bool = False
    """The assert used != (or `is not`)."""
    identity: bool = False
    """The assert used `is` with None/True/False."""


def _literal(source: str) -> Any:
    try:
        return ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _LITERAL_MISSING


def _parse_assert(text: str) -> TestCase:
    try:
        tree = ast.parse(text.strip())
    except SyntaxError as e:
        raise ValueError(f"test {text[:80]!r} is not valid Python: {e}") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise ValueError(f"test {text[:80]!r} must be a single assert statement")
    test = tree.body[0].test
    src = text.strip()
    seg = lambda node: ast.get_source_segment(src, node)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        value = _literal(seg(right))
        if isinstance(op, (ast.Eq, ast.NotEq)) and value is not _LITERAL_MISSING:
            return TestCase("call", call=seg(test.left), expected=value, display=src, negate=isinstance(op, ast.NotEq))
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value in (None, True, False):
            return TestCase("call", call=seg(test.left), expected=right.value, display=src,
                            identity=True, negate=isinstance(op, ast.IsNot))
        if isinstance(op, (ast.Eq, ast.NotEq)):
            raise ValueError(
                f"test {text[:80]!r}: the right side of == must be a Python literal (the parent compares "
                f"values; it never trusts a comparison made inside the sandbox)"
            )
    if isinstance(test, ast.Compare):
        raise ValueError(f"test {text[:80]!r}: only ==, != and `is` None/True/False comparisons are supported")
    return TestCase("call", call=seg(test), expected=True, display=src)


def normalize_tests(tests: Any, fn_name: str | None = None) -> list[TestCase]:
    """Turn any accepted test-case format into a list of TestCase (ValueError on bad input)."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            tests = [tests]  # a single assert statement
    if isinstance(tests, dict):
        if "inputs" not in tests or "outputs" not in tests:
            raise ValueError(f"a dict of tests needs 'inputs' and 'outputs' lists, got keys {sorted(tests)}")
        inputs, outputs = list(tests["inputs"]), list(tests["outputs"])
        if len(inputs) != len(outputs):
            raise ValueError(f"tests have {len(inputs)} inputs but {len(outputs)} outputs")
        fn_name = tests.get("fn_name") or fn_name
        cases = []
        for args, out in zip(inputs, outputs):
            if fn_name:
                args = args if isinstance(args, list) else [args]
                call = f"{fn_name}(*{json.dumps(args)})"
                cases.append(TestCase("call", call=call, expected=out, display=f"{fn_name}{tuple(args)!r}"))
            else:
                cases.append(_stdio_case({"input": args, "output": out}))
        return _nonempty(cases)
    if not isinstance(tests, (list, tuple)):
        raise ValueError(f"tests must be a list of cases or an inputs/outputs dict, got {type(tests).__name__}")
    cases = []
    for i, t in enumerate(tests):
        if isinstance(t, str):
            cases.append(_parse_assert(t))
        elif isinstance(t, dict) and ("call" in t):
            if "expected_repr" in t:
                expected = _literal(str(t["expected_repr"]))
                if expected is _LITERAL_MISSING:
                    raise ValueError(f"test {i}: expected_repr {t['expected_repr']!r:.80} is not a Python literal")
            elif "expected" in t:
                expected = t["expected"]
            else:
                raise ValueError(f"test {i}: a call test needs 'expected' or 'expected_repr'")
            cases.append(TestCase("call", call=str(t["call"]), expected=expected, display=f"{t['call']} == {expected!r}"))
        elif isinstance(t, dict):
            cases.append(_stdio_case(t, i))
        else:
            raise ValueError(f"test {i} has unsupported type {type(t).__name__}")
    return _nonempty(cases)


def _nonempty(cases: list[TestCase]) -> list[TestCase]:
    if not cases:
        raise ValueError("no test cases given")
    return cases


def _stdio_case(t: dict, i: int = 0) -> TestCase:
    stdin = next((t[k] for k in ("input", "stdin") if k in t), None)
    out = next((t[k] for k in ("output", "stdout", "expected_output") if k in t), None)
    if stdin is None or out is None:
        raise ValueError(f"test {i}: a stdin/stdout case needs 'input' and 'output', got keys {sorted(t)}")
    if isinstance(stdin, list):
        stdin = "\n".join(map(str, stdin)) + "\n"
    if isinstance(out, list):
        out = "\n".join(map(str, out)) + "\n"
    return TestCase("stdio", stdin=str(stdin), expected_stdout=str(out))


# ------------------------------------------------------------------------------ comparison
def values_equal(expected: Any, got: Any, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Python equality on plain data, with a float tolerance and lists equal to tuples."""
    if isinstance(expected, float) or isinstance(got, float):
        if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
            try:
                if math.isnan(expected) or math.isnan(got):
                    return math.isnan(expected) and math.isnan(got)
                return math.isclose(expected, got, rel_tol=rel_tol, abs_tol=abs_tol)
            except OverflowError:  # an int beyond any float (10**400) equals no finite float
                return False
        return False
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(expected) == len(got) and all(values_equal(a, b, rel_tol, abs_tol) for a, b in zip(expected, got))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(values_equal(expected[k], got[k], rel_tol, abs_tol) for k in expected)
    return bool(expected == got)  # plain literals only: this cannot run program code


def _normalize_output(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").rstrip().split("\n")
    return [line.rstrip() for line in lines]


def outputs_match(expected: str, got: str, float_tolerance: float = 0.0) -> bool:
    """Lines equal after trailing whitespace is dropped; or, with a tolerance, tokens equal with
    numbers compared within ``float_tolerance`` (relative or absolute)."""
    if _normalize_output(expected) == _normalize_output(got):
        return True
    if float_tolerance <= 0:
        return False
    a, b = expected.split(), got.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not math.isclose(fx, fy, rel_tol=float_tolerance, abs_tol=float_tolerance):
            return False
    return True


# ------------------------------------------------------------------------------ running
@dataclass
class CaseResult:
    """The verdict on one test case."""

    index: int
    passed: bool
    status: str
    """passed, wrong_answer, runtime_error, syntax_error, timeout, memory, output_limit, crashed."""
    detail: str = ""
    """Everything about the failure, the expected output included (for logs)."""
    public: str | None = None
    """The failure without the expected output (what a model may be shown); None: same as detail."""
    judge_error: bool = False
    """The output could not be parsed or compared (the case is wrong; counted)."""

    def shown(self, show_expected: bool) -> str:
        return self.detail if show_expected or self.public is None else self.public


@dataclass
class TestReport:
    """All verdicts for one program."""

    __test__ = False  # not a pytest class

    cases: list[CaseResult] = field(default_factory=list)
    error: str = ""
    """Why no test ran (e.g. no code in the answer)."""

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.cases else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.cases) and self.passed == self.total

    @property
    def first_failure(self) -> CaseResult | None:
        return next((c for c in self.cases if not c.passed), None)

    @property
    def judge_errors(self) -> int:
        return sum(c.judge_error for c in self.cases)

    def feedback(self, max_chars: int = 1200, show_expected: bool = False) -> str:
        """A short report for the model: the counts and the first failing case (its input and
        verdict; its expected output only with ``show_expected``, since a model shown expected
        outputs over several turns collects the hidden answers)."""
        if self.error:
            return self.error[:max_chars]
        head = f"Passed {self.passed}/{self.total} tests."
        first = self.first_failure
        if first is None:
            return head + " All tests passed."
        body = first.shown(show_expected)
        return (head + f"\nTest {first.index + 1} failed ({first.status.replace('_', ' ')}):\n" + body)[:max_chars]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + f"... [{len(text) - n} more chars]"


def _failure_status(r: ExecutionResult) -> str:
    if r.timed_out or r.limit == "cpu_time":
        return "timeout"
    if r.oom or r.limit == "memory":
        return "memory"
    if r.limit == "output":
        return "output_limit"
    if r.exit_code != 0:
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        return "syntax_error" if last.startswith(("SyntaxError", "IndentationError", "TabError")) else "runtime_error"
    return ""


def _error_detail(r: ExecutionResult, status: str, timeout_s: float) -> str:
    if status == "timeout":
        return f"time limit exceeded ({timeout_s:g} s)"
    if status == "memory":
        return "memory limit exceeded\n" + _stderr_summary(r.stderr, 400)
    if status == "output_limit":
        return "the program printed more output than allowed"
    code = f"exit code {r.exit_code}" if r.signal is None else f"killed by signal {r.signal}"
    return f"{code}\n{_stderr_summary(r.stderr, 600)}".rstrip()


def _stderr_summary(stderr: str, n: int) -> str:
    """The end of the traceback and the start of its last line (the exception and message)."""
    lines = stderr.rstrip().splitlines()
    if not lines:
        return ""
    before = "\n".join(lines[:-1])[-(n // 2):]
    return (before + "\n" if before else "") + _clip(lines[-1], n // 2)


_PY_VERSION_LOCK = threading.Lock()
_PY_VERSIONS: dict[str, tuple[int, int] | None] = {}


def _sandbox_python_version(python: str) -> tuple[int, int] | None:
    with _PY_VERSION_LOCK:
        if python not in _PY_VERSIONS:
            # /usr/bin/python3 is normally a link to python3.X: no need to start it.
            name = os.path.basename(os.path.realpath(python))
            if name.startswith("python") and name[6:].count(".") == 1 and name[6:].replace(".", "").isdigit():
                major, minor = name[6:].split(".")
                _PY_VERSIONS[python] = (int(major), int(minor))
                return _PY_VERSIONS[python]
            try:
                out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                                     capture_output=True, timeout=20, env={"PATH": "/usr/bin:/bin"}, check=False)
                major, minor = out.stdout.split()
                _PY_VERSIONS[python] = (int(major), int(minor))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                _PY_VERSIONS[python] = None
        return _PY_VERSIONS[python]


def syntax_error(code: str, python: str) -> str | None:
    """The SyntaxError of ``code``, found by compiling (never running) it here, when this
    interpreter has the sandbox interpreter's version; else None (the sandbox will tell)."""
    if _sandbox_python_version(python) != tuple(sys.version_info[:2]):
        return None
    try:
        compile(code, "main.py", "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"{type(e).__name__}: {e.msg} (line {e.lineno})\n{_clip((e.text or '').rstrip(), 200)}".rstrip()
    except (ValueError, UnicodeError, MemoryError, RecursionError, OverflowError):
        return None
    return None


def run_tests(
    code: str,
    tests: Sequence[TestCase],
    pool: SandboxPool,
    timeout_s: float | None = None,
    float_tolerance: float = 0.0,
    show_chars: int = 300,
    budget_s: float | None = DEFAULT_BUDGET_S,
) -> TestReport:
    """Run ``code`` against ``tests`` in ``pool``; SandboxError propagates (infrastructure).

    ``budget_s`` bounds the wall time of all executions together (None: unbounded): each one
    gets at most what is left of it, and a case whose turn comes after it is a timeout. Nothing
    the program prints can raise out of here (see :func:`_judged`)."""
    timeout = float(timeout_s if timeout_s is not None else pool.config.timeout_s)
    deadline = time.monotonic() + float(budget_s) if budget_s is not None else None
    report = TestReport(cases=[None] * len(tests))  # type: ignore[list-item]
    bad_syntax = syntax_error(code, pool.config.python)
    if bad_syntax:
        report.cases = [CaseResult(i, False, "syntax_error", bad_syntax) for i in range(len(tests))]
        return report
    mark = "@@roll-" + secrets.token_hex(8)
    jobs = []
    for t in tests:
        if t.kind == "stdio":
            jobs.append({"code": code, "stdin": t.stdin, "timeout_s": timeout})
        else:  # one execution per call: a program sees no call but its own
            jobs.append({"code": _HARNESS, "timeout_s": timeout, "args": [mark, "call.json", "solution.py"],
                         "files": {"solution.py": code, "call.json": json.dumps(t.call)}})
    results = pool.map_python(jobs, deadline=deadline)
    for i, (t, r) in enumerate(zip(tests, results)):
        if r is None:
            why = f"not run: the sample's time budget ({budget_s:g} s) was spent"
            report.cases[i] = CaseResult(i, False, "timeout", f"{_describe(t, show_chars)}\n{why}")
        elif t.kind == "stdio":
            report.cases[i] = _judged(i, t, _judge_stdio, r, timeout, float_tolerance, show_chars)
        else:
            report.cases[i] = _judged(i, t, _judge_call, r, mark, timeout, show_chars)
    return report


def _describe(t: TestCase, n: int) -> str:
    """The case's input, without its expected output."""
    return f"Input:\n{_clip(t.stdin, n)}" if t.kind == "stdio" else f"Call: {_clip(t.call, n)}"


def _judged(i: int, t: TestCase, judge, *args) -> CaseResult:
    """``judge(i, t, *args)``, where any exception (the program's output could not be parsed or
    compared: an odd digit, a number too large for a float, nesting too deep) makes the case
    wrong and is counted, never raised: otherwise a wrong answer would dodge its 0."""
    try:
        return judge(i, t, *args)
    except Exception as e:  # noqa: BLE001 - any failure to judge is a wrong answer, counted
        why = f"the output could not be judged ({type(e).__name__})"
        return CaseResult(i, False, "wrong_answer", f"{_describe(t, 300)}\n{why}", judge_error=True)


def _judge_stdio(i: int, t: TestCase, r: ExecutionResult, timeout: float, tol: float, n: int) -> CaseResult:
    status = _failure_status(r)
    if status:
        return CaseResult(i, False, status, f"Input:\n{_clip(t.stdin, n)}\n" + _error_detail(r, status, timeout))
    if r.stdout_truncated or not outputs_match(t.expected_stdout, r.stdout, tol):
        got = f"Your output:\n{_clip(r.stdout, n)}"
        return CaseResult(i, False, "wrong_answer",
                          f"Input:\n{_clip(t.stdin, n)}\nExpected output:\n{_clip(t.expected_stdout, n)}\n{got}",
                          public=f"Input:\n{_clip(t.stdin, n)}\n{got}")
    return CaseResult(i, True, "passed")


def _judge_call(i: int, t: TestCase, r: ExecutionResult, mark: str, timeout: float, n: int) -> CaseResult:
    reported: tuple[str, str] | None = None
    load_error = None
    for line in r.stdout.splitlines():
        if not line.startswith(mark + " "):
            continue
        head, _, payload = line[len(mark) + 1:].partition(" ")
        try:
            text = json.loads(payload.partition(" ")[2]) if head != "LOAD" else json.loads(payload)
        except (json.JSONDecodeError, RecursionError):
            continue
        if head == "LOAD":
            load_error = str(text)
        elif head == "0" and reported is None:  # ASCII "0" only: the harness runs one call
            reported = (payload[:1], str(text))
    status = _failure_status(r)
    desc = f"Call: {_clip(t.call, n)}"
    if load_error is not None:
        return CaseResult(i, False, "runtime_error", f"{desc}\nthe solution failed to load: {_clip(load_error, n)}")
    if reported is None:
        why = _error_detail(r, status, timeout) if status else "the program ended before this test ran"
        return CaseResult(i, False, status or "crashed", f"{desc}\n{why}")
    if reported[0] == "X":
        return CaseResult(i, False, "runtime_error", f"{desc}\nraised {_clip(reported[1], n)}")
    got_repr = reported[1]
    if _call_passed(t, got_repr):
        return CaseResult(i, True, "passed")
    got = f"{t.call} returned {_clip(got_repr, n)}"
    return CaseResult(i, False, "wrong_answer", f"{_clip(t.display or t.call, n)}\n{got}", public=f"{desc}\n{got}")


def _call_passed(t: TestCase, got_repr: str) -> bool:
    got = _literal(got_repr)
    negate = t.negate
    if t.identity:
        same = got is not _LITERAL_MISSING and got is t.expected
    elif got is _LITERAL_MISSING:
        same = got_repr == repr(t.expected)  # e.g. nan, inf, or an object's repr
    else:
        same = values_equal(t.expected, got)
    return same != negate


# ------------------------------------------------------------------------------ the reward
def _first(mapping: dict, keys: Iterable[str]) -> Any:
    return next((mapping[k] for k in keys if mapping.get(k) is not None), None)


_SAMPLE_FIELDS = ("tests", "test_cases", "fn_name", "float_tolerance")


@REWARDS.register("code_sandbox")
@reads("tests", "test_cases", "fn_name", "score", "budget_s", "sandbox", "max_concurrency", "timeout_s", "float_tolerance")
def code_sandbox_reward(sample: dict, **fields: Any) -> RewardOutput:
    """Run the program in the sample's response against its tests in the sandbox.

    Fields (keyword arguments; the per-sample ones, ``tests``/``test_cases``, ``fn_name`` and
    ``float_tolerance``, may also be keys of the sample): ``tests`` / ``test_cases`` (see
    the module docstring), ``fn_name`` (APPS style), ``timeout_s`` (per execution, default
    the sandbox's), ``float_tolerance`` (0: exact lines), ``score`` ("pass_rate" default, or
    "full_pass": 1 only when every test passes), ``sandbox`` (a SandboxConfig dict) and
    ``max_concurrency`` (executions at a time in this process, default 2) and ``budget_s``
    (wall time of the sample's executions together, default 30 s: keep it below the reward
    worker's ``timeout_s``; cases past it score 0 as timeouts). The program is the code in
    ``sample["response"]`` (or ``completion``/``output``/``text``), fenced or inside <answer>.
    Components: pass_rate, full_pass, judge_errors (cases whose output could not be parsed or
    compared: wrong, and counted). Raises ValueError on missing or malformed tests and
    SandboxError when the sandbox itself fails; never on anything the program prints.
    """
    # Only per-sample data comes from the sample; how to score comes from the reward's config.
    fields = {**{k: sample[k] for k in _SAMPLE_FIELDS if k in sample and k not in fields}, **fields}
    tests = _first(fields, ("tests", "test_cases"))
    if tests is None:
        raise ValueError("code_sandbox needs test cases in the 'tests' or 'test_cases' field")
    cases = normalize_tests(tests, fields.get("fn_name"))
    score_mode = fields.get("score", "pass_rate")
    if score_mode not in ("pass_rate", "full_pass"):
        raise ValueError(f"code_sandbox score must be 'pass_rate' or 'full_pass', got {score_mode!r}")
    response = _first(sample, ("response", "completion", "output", "text"))
    code, why = extract_code(response if response is not None else "")
    budget = fields.get("budget_s", DEFAULT_BUDGET_S)
    if budget is not None and not float(budget) > 0:
        raise ValueError(f"code_sandbox budget_s must be > 0 (or null for none), got {budget!r}")
    if code is None:
        return RewardOutput(0.0, False, {"pass_rate": 0.0, "full_pass": 0.0, "judge_errors": 0.0},
                            {"error": why, "passed": 0, "total": len(cases)})
    pool = get_pool(fields.get("sandbox"), int(fields.get("max_concurrency", 2)))
    report = run_tests(code, cases, pool, timeout_s=fields.get("timeout_s"),
                       float_tolerance=float(fields.get("float_tolerance", 0.0)), budget_s=budget)
    full = 1.0 if report.all_passed else 0.0
    first = report.first_failure
    return RewardOutput(
        score=report.pass_rate if score_mode == "pass_rate" else full,
        success=report.all_passed,
        components={"pass_rate": report.pass_rate, "full_pass": full, "judge_errors": float(report.judge_errors)},
        info={
            "passed": report.passed,
            "total": report.total,
            "statuses": [c.status for c in report.cases],
            "first_failure": first.detail if first else "",
            "isolation": pool.mode,
            "resource_control": pool.sandbox.resource_control,
        },
    )
