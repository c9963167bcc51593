"""A python tool: runs the model's code in the project's sandbox (roll/sandbox, docs/sandbox.md).

The code runs as a fresh program in the sandbox with its limits (wall clock, CPU time, memory,
output); what it prints is the result. A non-zero exit, a limit hit or stderr output is
reported to the model as part of the result, not as a tool error: reading a traceback is how a
model fixes its code. Only a sandbox that cannot start is a tool error.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from roll.sandbox import SandboxConfig, SandboxError, get_pool
from roll.tools.base import BaseTool, ToolError, object_parameters

DEFAULT_SANDBOX = {"timeout_s": 5.0, "cpu_time_s": 4.0, "memory_mb": 512}


class PythonTool(BaseTool):
    """Run Python code in the sandbox and return its output."""

    name = "python"
    description = "Run a Python 3 program (standard library only) in a sandbox and return what it prints."
    parameters: ClassVar[dict[str, Any]] = object_parameters(
        {"code": {"type": "string", "description": "the complete program; print the result"}})

    def __init__(self, sandbox: SandboxConfig | Mapping[str, Any] | None = None, max_concurrency: int = 2,
                 max_output_chars: int = 2000, max_code_chars: int = 20_000):
        config = sandbox if isinstance(sandbox, SandboxConfig) else {**DEFAULT_SANDBOX, **dict(sandbox or {})}
        self.pool = get_pool(config, max_concurrency)
        self.max_output_chars = int(max_output_chars)
        self.max_code_chars = int(max_code_chars)
        # the sandbox enforces its own deadline; this one only catches a sandbox that hangs
        self.timeout_s = float(self.pool.config.timeout_s) + 10.0

    def run(self, code: str) -> str:
        if len(code) > self.max_code_chars:
            raise ToolError(f"code longer than {self.max_code_chars} characters")
        try:
            result = self.pool.run_python(code)
        except SandboxError as e:
            raise ToolError(f"the sandbox could not run the code: {e}") from None
        if result is None:  # only with a deadline, which is not passed here
            raise ToolError("the sandbox did not start the run")
        parts = []
        if result.stdout:
            parts.append(result.stdout.rstrip("\n") + (" [output truncated]" if result.stdout_truncated else ""))
        if result.limit:
            parts.append(f"[stopped: {result.limit} limit]")
        elif result.exit_code not in (0, None) or result.signal is not None:
            status = f"signal {result.signal}" if result.signal is not None else f"exit code {result.exit_code}"
            parts.append(f"[{status}]")
        if result.stderr:
            parts.append("stderr:\n" + result.stderr.rstrip("\n")[-self.max_output_chars:])
        text = "\n".join(parts) or "(no output)"
        return text if len(text) <= self.max_output_chars else text[: self.max_output_chars] + " [truncated]"
