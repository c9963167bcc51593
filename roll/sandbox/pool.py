"""A bounded pool of concurrent sandboxed executions, shared by the threads of one process.

Ray workers each build their own pool (a pool pickles as its config and size, so it can be
passed to a remote task or actor); :func:`get_pool` returns one cached pool per config in a
process, so all reward calls in a worker share one concurrency bound.
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from roll.sandbox.config import SandboxConfig, as_config
from roll.sandbox.executor import ExecutionResult, Sandbox


class SandboxPool:
    """At most ``max_concurrency`` executions at a time; calls beyond that wait their turn."""

    def __init__(self, config: SandboxConfig | dict | None = None, max_concurrency: int = 2):
        if int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.sandbox = Sandbox(config)
        self.config = self.sandbox.config
        self.max_concurrency = int(max_concurrency)
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False
        self.stats = {"executions": 0, "in_flight": 0, "peak_in_flight": 0, "sandbox_errors": 0, "timeouts": 0,
                      "skipped": 0}

    def __reduce__(self):  # rebuilt, not copied, in another process (threads and locks do not travel)
        return (SandboxPool, (self.config, self.max_concurrency))

    @property
    def mode(self) -> str:
        return self.sandbox.mode

    def _guarded(self, fn: Callable[..., ExecutionResult], *args, deadline: float | None = None,
                 **kwargs) -> ExecutionResult | None:
        if self._closed:
            raise RuntimeError("the sandbox pool is closed")
        with self._slots:
            if deadline is not None:  # the caller's budget (time.monotonic()) covers the wait too
                left = deadline - time.monotonic()
                if left <= 0:
                    with self._lock:
                        self.stats["skipped"] += 1
                    return None
                asked = kwargs.get("timeout_s")
                kwargs["timeout_s"] = min(float(asked if asked is not None else self.config.timeout_s), left)
            with self._lock:
                self.stats["in_flight"] += 1
                self.stats["peak_in_flight"] = max(self.stats["peak_in_flight"], self.stats["in_flight"])
            try:
                result = fn(*args, **kwargs)
            except Exception:
                with self._lock:
                    self.stats["sandbox_errors"] += 1
                raise
            finally:
                with self._lock:
                    self.stats["in_flight"] -= 1
        with self._lock:
            self.stats["executions"] += 1
            self.stats["timeouts"] += int(result.timed_out)
        return result

    def run(self, command: Sequence[str], **kwargs: Any) -> ExecutionResult:
        """:meth:`Sandbox.run` within the concurrency bound (blocks while the pool is full)."""
        return self._guarded(self.sandbox.run, command, **kwargs)

    def run_python(self, code: str, *, deadline: float | None = None, **kwargs: Any) -> ExecutionResult | None:
        """:meth:`Sandbox.run_python` within the concurrency bound. With ``deadline`` (a
        ``time.monotonic()`` value) the run's timeout is cut to what is left of it, and a run
        whose turn comes after it is not started: None."""
        return self._guarded(self.sandbox.run_python, code, deadline=deadline, **kwargs)

    def submit_python(self, code: str, **kwargs: Any) -> Future[ExecutionResult | None]:
        """Start :meth:`run_python` in the pool's own threads; returns a Future."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="roll-sandbox")
        return self._executor.submit(self.run_python, code, **kwargs)

    def map_python(self, jobs: Sequence[Mapping[str, Any]], deadline: float | None = None) -> list[ExecutionResult | None]:
        """Run many ``run_python`` jobs (each a dict of its keyword arguments, with ``code``)
        concurrently; results in job order (None for a job not started by ``deadline``). A
        SandboxError from any job is raised."""
        if len(jobs) <= 1:
            return [self.run_python(**dict(j), deadline=deadline) for j in jobs]
        futures = [self.submit_python(**dict(j), deadline=deadline) for j in jobs]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._closed = True
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_POOLS: dict[str, SandboxPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(config: SandboxConfig | dict | None = None, max_concurrency: int = 2) -> SandboxPool:
    """The process-wide pool for this config and size (built on first use)."""
    cfg = as_config(config)
    key = json.dumps([dataclasses.asdict(cfg), int(max_concurrency)], sort_keys=True)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool._closed:
            pool = _POOLS[key] = SandboxPool(cfg, max_concurrency)
        return pool
