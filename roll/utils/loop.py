"""An asyncio event loop on a daemon thread, for synchronous drivers of async work (the
rollout scheduler keeps producing episodes while the driver trains)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, Coroutine, Optional


class LoopThread:
    def __init__(self, name: str = "roll-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine, timeout: Optional[float] = None) -> Any:
        """Run ``coro`` on the loop and wait for its result (``timeout`` seconds at most)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run_watching(self, coro: Coroutine, on_wait: Callable[[], None], interval_s: float) -> Any:
        """Run ``coro`` on the loop and wait for its result, calling ``on_wait()`` on this thread
        every ``interval_s`` seconds meanwhile (health checks while a long call runs). If
        ``on_wait`` raises, the coroutine is cancelled and the error propagates."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        while True:
            try:
                return fut.result(interval_s)
            except concurrent.futures.TimeoutError:
                pass
            try:
                on_wait()
            except BaseException:
                fut.cancel()
                raise

    @property
    def running(self) -> bool:
        return self.loop.is_running()

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
