"""The environment workers (hosts) of one rollout scheduler: selection, broadcasts, death and
restart.

A host is a Ray actor handle of :class:`roll.workers.environment.EnvironmentWorker` (or the
worker object itself, in-process; both expose the same coroutine methods). The settings
broadcast to every host (max staleness, policy version, suspend/resume) are remembered and
replayed on a host whose process Ray restarted, which then serves again (``restarts``);
episodes that were running on it fail as ``worker_died`` (transient: retried). A host that
does not come back within ``recover_timeout_s`` is given up; when none is left the run stops.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

from roll.errors import RunFailedError
from roll.utils.logging import get_logger

logger = get_logger(__name__)

ACTOR_DIED = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError")


def actor_died(e: BaseException) -> bool:
    return type(e).__name__ in ACTOR_DIED


async def call_host(host: Any, method: str, *args: Any) -> Any:
    """``host.method(*args)`` through ``.remote`` on a Ray actor handle, directly in-process."""
    fn = getattr(host, method)
    return await (fn.remote(*args) if hasattr(fn, "remote") else fn(*args))


class HostPool:
    """Load-balanced env hosts with death detection and restart (see the module docstring)."""

    def __init__(self, hosts: Sequence[Any], recover_timeout_s: float = 120.0, name: str = "rollout",
                 max_restarts: int = -1):
        if not hosts:
            raise ValueError("a rollout scheduler needs at least one environment worker")
        self.hosts = list(hosts)
        self.name = name
        self.load = [0] * len(self.hosts)
        self.epoch = [0] * len(self.hosts)  # bumped at each death: calls tied to the old process fail
        self.max_restarts = max_restarts  # Ray's budget per host (-1: unlimited); past it a death is final
        self.lost: set[int] = set()  # died and did not come back
        self.recover_timeout_s = recover_timeout_s
        self.restarts = 0
        self.deaths = 0
        self._settings: dict[str, tuple[str, tuple]] = {}  # key -> (method, args), replayed in order
        self._recovering: dict[int, asyncio.Task] = {}  # died; waiting for its restart
        self._changed = asyncio.Event()  # bound to the loop that first waits on it

    def serving(self, i: int) -> bool:
        return i not in self._recovering and i not in self.lost

    def live(self) -> list[int]:
        return [i for i in range(len(self.hosts)) if self.serving(i)]

    async def acquire(self) -> int:
        """The least-loaded serving host, waiting while every host is recovering; its load
        counts one more episode until :meth:`release`."""
        while not self.live() and self._recovering:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), timeout=self.recover_timeout_s + 5)
        live = self.live()
        if not live:
            raise RunFailedError("every environment worker died and none came back "
                                 f"(lost: {sorted(self.lost)}, recovering: {sorted(self._recovering)})")
        i = min(live, key=lambda i: (self.load[i], i))
        self.load[i] += 1
        return i

    def release(self, i: int) -> None:
        self.load[i] -= 1

    async def call(self, i: int, method: str, *args: Any, epoch: int | None = None) -> tuple[bool, Any]:
        """``(True, result)``, or ``(False, error)`` when host ``i`` died (it is then recovering).
        ``epoch``: the process the caller's episode lives in; a restarted one does not know it."""
        if not self.serving(i) or epoch not in (None, self.epoch[i]):
            return False, None
        try:
            return True, await call_host(self.hosts[i], method, *args)
        except Exception as e:
            if not actor_died(e):
                raise
            self.on_death(i, e)
            return False, e

    async def broadcast(self, method: str, *args: Any, remember: str | None = None, tolerate: bool = False) -> None:
        """Call ``method`` on every serving host. ``remember``: the setting's key, so that a
        restarted host gets the latest value too. ``tolerate``: ignore non-death errors (shutdown)."""
        if remember is not None:
            self._settings[remember] = (method, args)
        for r in await asyncio.gather(*(self.call(i, method, *args) for i in self.live()), return_exceptions=True):
            if isinstance(r, BaseException) and not tolerate:
                raise r

    def on_death(self, i: int, error: BaseException) -> None:
        if not self.serving(i):
            return
        self.deaths += 1
        self.epoch[i] += 1
        logger.error("%s environment worker %d died (%s); waiting for its restart", self.name, i, type(error).__name__)
        if not hasattr(getattr(self.hosts[i], "ping", None), "remote"):
            self._give_up(i, "not a Ray actor")  # in-process hosts do not restart
        elif 0 <= self.max_restarts < self.epoch[i]:
            self._give_up(i, f"out of restarts (max_worker_restarts={self.max_restarts})")
        else:
            self._recovering[i] = asyncio.get_running_loop().create_task(self._recover(i))

    async def _recover(self, i: int) -> None:
        """Wait for Ray's restart, replay the settings, serve again."""
        deadline = time.monotonic() + self.recover_timeout_s
        try:
            while True:
                try:
                    await asyncio.wait_for(call_host(self.hosts[i], "ping"), timeout=max(deadline - time.monotonic(), 0.1))
                    for method, args in list(self._settings.values()):
                        await call_host(self.hosts[i], method, *args)
                    break
                except Exception as e:
                    if not (actor_died(e) or isinstance(e, asyncio.TimeoutError)) or time.monotonic() >= deadline:
                        self._give_up(i, f"{type(e).__name__}: {e}")
                        return
                    await asyncio.sleep(0.5)  # restarting: the new process is not up yet
            self.restarts += 1
            logger.warning("%s environment worker %d restarted and serving again (restart #%d)", self.name, i, self.restarts)
        finally:
            self._recovering.pop(i, None)
            self._changed.set()

    def _give_up(self, i: int, why: str) -> None:
        self.lost.add(i)
        logger.error("%s environment worker %d did not come back (%s); continuing with %d of %d", self.name, i, why,
                     len(self.live()), len(self.hosts))

    def metrics(self) -> dict[str, float]:
        return {"rollout/env_workers/deaths": float(self.deaths), "rollout/env_workers/restarts": float(self.restarts),
                "rollout/env_workers/serving": float(len(self.live()))}

    async def close(self) -> None:
        from roll.workers.environment import release_creation_args

        for task in list(self._recovering.values()):
            task.cancel()
        await asyncio.gather(*self._recovering.values(), return_exceptions=True)
        for h in self.hosts:
            release_creation_args(h)
