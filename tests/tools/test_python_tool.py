"""The python tool runs the model's code in the real sandbox (roll/sandbox)."""
import pytest

from roll.sandbox import SandboxUnavailable
from roll.tools.python import PythonTool


@pytest.fixture(scope="module")
def tool():
    # room on the clock for a loaded machine; the busy loop below ends at the CPU-time limit
    t = PythonTool({"timeout_s": 30.0, "cpu_time_s": 1.0})
    try:
        assert t.pool.sandbox.mode
    except SandboxUnavailable as e:  # e.g. no bubblewrap on this machine
        pytest.skip(f"sandbox unavailable: {e}")
    return t


def test_output_errors_and_limits(tool):
    out = tool({"code": "print(sum(range(101)))"})
    assert out == "5050", out
    out = tool({"code": "import sys\nprint('partial')\nraise ValueError('bad input')"})
    assert out.startswith("partial\n[exit code 1]") and "ValueError: bad input" in out, out
    out = tool({"code": "while True:\n    pass"})
    assert "[stopped: cpu_time limit]" in out, out
    out = tool({"code": "x = 1"})
    assert out == "(no output)", out


def test_code_runs_isolated(tool):
    out = tool({"code": "import os\nprint(os.getuid(), os.path.exists('/work'))"})
    assert out.split()[1] == "False"  # the host file tree is not visible
