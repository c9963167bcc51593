"""Isolated execution of untrusted code: bubblewrap namespaces, an unprivileged user, rlimits,
a wall-clock deadline and capped output (threat model and limits: docs/sandbox.md).

    from roll.sandbox import SandboxPool
    pool = SandboxPool({"timeout_s": 5}, max_concurrency=2)
    result = pool.run_python("print(input()[::-1])", stdin="abc\\n")
    result.stdout  # 'cba\\n'
"""
from roll.sandbox.config import SandboxConfig, as_config
from roll.sandbox.executor import ExecutionResult, Sandbox
from roll.sandbox.isolation import SandboxError, SandboxUnavailable
from roll.sandbox.pool import SandboxPool, get_pool

__all__ = [
    "ExecutionResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxPool",
    "SandboxUnavailable",
    "as_config",
    "get_pool",
]
