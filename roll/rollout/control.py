"""Shared state of the episodes on one host: policy version, suspension gate, in-flight
generation requests, and the blocking-call runner that keeps env code off the event loop."""
from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class RolloutControl:
    """What every EnvManager of one host consults before each generation request.

    - ``version``: the policy version new requests are issued under (set by the scheduler
      after a weight update);
    - ``max_staleness``: an episode whose oldest turn is older than ``version - max_staleness``
      stops (failure ``stale``) instead of producing a sample that would be dropped;
    - the gate: closed by ``suspend``; requests wait on it, so nothing is generated while
      weights change; in-flight requests per ``on_weight_update`` (roll/rollout/scheduler.py).
    """

    def __init__(self, version: int = 0, max_staleness: int | None = None, on_weight_update: str = "partial"):
        if on_weight_update not in ("partial", "discard", "wait"):
            raise ValueError(f"on_weight_update must be partial, discard or wait, got {on_weight_update!r}")
        self.version = version
        self.max_staleness = max_staleness
        self.on_weight_update = on_weight_update
        self._running = asyncio.Event()
        self._running.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.inflight: set[str] = set()

    async def wait_running(self) -> None:
        await self._running.wait()

    def request_started(self, request_id: str) -> None:
        self.inflight.add(request_id)
        self._idle.clear()

    def request_finished(self, request_id: str) -> None:
        self.inflight.discard(request_id)
        if not self.inflight:
            self._idle.set()

    async def suspend(self, abort: Callable[[list[str]], Any]) -> None:
        """Close the gate; then abort in-flight requests (partial/discard) or wait for them (wait)."""
        self._running.clear()
        if self.on_weight_update == "wait":
            await self._idle.wait()
        elif self.inflight:
            await abort(sorted(self.inflight))

    def resume(self) -> None:
        self._running.set()

    def is_stale(self, oldest_version: int) -> bool:
        return self.max_staleness is not None and 0 <= oldest_version < self.version - self.max_staleness


class CallTimeout(Exception):
    """A blocking env call did not return within its timeout."""


class ThreadRunner:
    """Runs blocking calls of one env on a dedicated daemon thread, with a timeout.

    One thread per env keeps calls to that env sequential (envs are not thread-safe) and
    lets a hung env be abandoned: its daemon thread is left behind and never blocks exit;
    the env is then discarded by its owner.
    """

    def __init__(self, name: str):
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        self.broken = False

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            fn, args, loop, fut = item
            try:
                outcome = (True, fn(*args))
            except BaseException as e:  # handed to the awaiting coroutine, which types it
                outcome = (False, e)
            try:
                loop.call_soon_threadsafe(_settle, fut, *outcome)
            except RuntimeError:
                return  # the loop closed while a hung call was running: nobody is waiting

    async def call(self, fn: Callable, *args: Any, timeout: float) -> Any:
        if self.broken:
            raise RuntimeError("env runner is broken (a previous call timed out)")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.put((fn, args, loop, fut))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.broken = True
            self._queue.put(None)
            raise CallTimeout(f"{getattr(fn, '__name__', fn)} took longer than {timeout}s") from None

    def close(self) -> None:
        self._queue.put(None)


def _settle(fut: asyncio.Future, ok: bool, payload: Any) -> None:
    if not fut.done():  # a call that timed out has nobody waiting
        (fut.set_result if ok else fut.set_exception)(payload)
