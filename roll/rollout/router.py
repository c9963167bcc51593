"""Router: sends generation requests to inference workers.

- load balancing: a new episode goes to the worker with the fewest outstanding requests
  (in flight + queued for a slot);
- sticky routing: every request of one episode (``request.meta["episode_id"]``) goes to the
  same worker, so its prefix cache holds the growing conversation; ``release(episode_id)``
  forgets the binding when the episode ends;
- a bound of ``max_inflight_per_worker`` outstanding requests per worker; more wait in the
  router rather than piling up inside an engine;
- an inference worker that died (Ray restarts it) or is not serving yet (restarted, waiting for
  setup and the current weights: ``WorkerUnavailableError``) does not fail the episode: the
  request is sent again, to another worker or to the same one once it serves, for up to
  ``unavailable_wait_s`` (counted in ``rollout/router/unavailable_retries``); the tokens the
  dead worker had produced for it are lost, the episode is not.

A worker is a Ray actor handle (``generate.remote(request)`` returns a GenerationResult) or
any local object with ``async generate(request)`` / ``async abort(request_ids)`` (an
inference strategy, a scripted fake). The Router itself is an :class:`InferenceClient`.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from roll.errors import WorkerUnavailableError
from roll.rollout.hosts import actor_died, call_host
from roll.strategies.base import GenerationRequest, GenerationResult
from roll.utils.logging import get_logger

logger = get_logger(__name__)

_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0)
_DOWN_S = 5.0
"""How long new requests avoid a worker that failed one (a restart takes seconds)."""


def _aborted(request_id: str) -> GenerationResult:
    return GenerationResult(request_id, [], [], finish_reason="abort")


def is_unavailable(e: BaseException) -> bool:
    """A worker death or a not-yet-serving restarted worker: transient for a request."""
    return isinstance(e, WorkerUnavailableError) or actor_died(e)


def _fail_waiters(waiters: list[tuple[GenerationRequest, asyncio.Future]], error: BaseException) -> None:
    for _, future in waiters:
        if not future.done():
            future.set_exception(error)


@runtime_checkable
class InferenceClient(Protocol):
    """The only thing rollout needs from inference."""

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    async def abort(self, request_ids: list[str]) -> None: ...


class _Slot:
    def __init__(self, worker: Any, bound: int):
        self.worker = worker
        self.sem = asyncio.Semaphore(bound)
        self.outstanding = 0  # in flight + waiting for the semaphore
        self.inflight = 0
        self.episodes = 0
        self.served = 0
        self.down_until = 0.0  # unavailable until then (monotonic clock)
        self.pending: list[tuple[GenerationRequest, asyncio.Future]] = []  # waiting for the next batch call

    def mark_down(self) -> bool:
        """Avoid this worker for ``_DOWN_S``; returns whether it was serving until now."""
        now = time.monotonic()
        newly = self.down_until <= now
        self.down_until = now + _DOWN_S
        return newly


class Router:
    """Load-balanced, sticky, bounded routing over inference workers."""

    def __init__(self, workers: Sequence[Any], max_inflight_per_worker: int = 64, unavailable_wait_s: float = 600.0):
        if not workers:
            raise ValueError("Router needs at least one inference worker")
        if max_inflight_per_worker < 1:
            raise ValueError(f"max_inflight_per_worker must be >= 1, got {max_inflight_per_worker}")
        self.bound = max_inflight_per_worker
        self._slots = [_Slot(w, max_inflight_per_worker) for w in workers]
        self._sticky: dict[str, int] = {}
        self._where: dict[str, int] = {}  # request id -> worker index, while outstanding
        self._running: set[str] = set()  # request ids handed to a worker
        self._aborted_waiting: set[str] = set()
        self._retrying: set[str] = set()  # request ids waiting to be sent again
        self._aborted: set[str] = set()  # aborted while running or waiting to be sent again
        self.max_inflight_seen = 0
        self.unavailable_wait_s = unavailable_wait_s
        self.unavailable_retries = 0
        self.coalesced_calls = 0  # generate_batch calls that carried single requests
        self.coalesced_requests = 0
        self._flushes: set[asyncio.Task] = set()
        self._unsent: set[str] = set()  # admitted, waiting for their batch call to leave

    def _pick(self, episode_id: str | None) -> int:
        if episode_id is not None and episode_id in self._sticky:
            return self._sticky[episode_id]
        # serving workers first; then fewest outstanding requests, fewest bound episodes, lowest index
        now = time.monotonic()
        idx = min(range(len(self._slots)), key=lambda i: (self._slots[i].down_until > now, self._slots[i].outstanding,
                                                          self._slots[i].episodes, i))
        if episode_id is not None:
            self._sticky[episode_id] = idx
            self._slots[idx].episodes += 1
        return idx

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        episode = request.meta.get("episode_id")
        rid = request.request_id
        deadline = time.monotonic() + self.unavailable_wait_s
        attempt = 0
        try:
            while True:
                try:
                    return await self._generate_once(request, self._pick(episode))
                except Exception as e:
                    if not is_unavailable(e) or time.monotonic() >= deadline or rid in self._aborted:
                        raise
                    slot = self.release(episode)  # the episode's worker failed it: pick again
                    if slot is not None and slot.mark_down():  # log once per outage
                        logger.warning("inference worker unavailable (%s); its requests are sent again", type(e).__name__)
                    self.unavailable_retries += 1
                    self._retrying.add(rid)
                    try:
                        await asyncio.sleep(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)])
                        attempt += 1
                    finally:
                        self._retrying.discard(rid)
                    if rid in self._aborted:  # aborted while waiting to be sent again
                        return _aborted(rid)
        finally:
            self._aborted.discard(rid)

    async def generate_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Requests of no episode (e.g. one RLVR prompt's group), results in request order: sent
        to one worker in ONE ``generate_batch`` call when the worker has it and the batch fits
        the bound (one round trip instead of one per request). Otherwise, and when that call
        finds the worker unavailable, each request goes through :meth:`generate` (its retries)."""
        if not requests:
            return []
        idx = self._pick(None)
        slot = self._slots[idx]
        if len(requests) > self.bound or not hasattr(slot.worker, "generate_batch"):
            return list(await asyncio.gather(*(self.generate(r) for r in requests)))
        ids = [r.request_id for r in requests]
        done: dict[str, GenerationResult] = {}
        again: list[GenerationRequest] = []
        try:
            async with self._admit(idx, requests) as send:
                sent = {r.request_id for r in send}
                done.update((rid, _aborted(rid)) for rid in ids if rid not in sent)
                try:
                    if send:
                        done.update((res.request_id, res) for res in await call_host(slot.worker, "generate_batch", send))
                        slot.served += len(send)
                except Exception as e:
                    if not is_unavailable(e):
                        raise
                    slot.mark_down()
                    self.unavailable_retries += 1
                    logger.warning("inference worker %d unavailable for a batch of %d; sending its requests again",
                                   idx, len(send))
                    # aborted while running: answered as aborted, not sent again
                    again = [r for r in send if r.request_id not in self._aborted]
                    done.update((rid, _aborted(rid)) for rid in sent if rid in self._aborted)
        finally:
            self._aborted.difference_update(ids)
        done.update(zip([r.request_id for r in again], await asyncio.gather(*(self.generate(r) for r in again))))
        return [done[rid] for rid in ids]

    async def _generate_once(self, request: GenerationRequest, idx: int) -> GenerationResult:
        async with self._admit(idx, [request]) as send:
            if not send:  # aborted while queued here: the engine never saw it
                return _aborted(request.request_id)
            result = await self._send(idx, request)
        self._slots[idx].served += 1
        return result

    async def _send(self, idx: int, request: GenerationRequest) -> GenerationResult:
        """One request to worker ``idx``. Requests admitted in the same event-loop pass (a
        lockstep turn's, or concurrent episodes') leave together in one ``generate_batch`` call
        when the worker has it: one Ray round trip instead of one per request; the engine batches
        them as before. A request aborted before its batch leaves is answered as aborted."""
        slot = self._slots[idx]
        if not hasattr(slot.worker, "generate_batch"):
            return await call_host(slot.worker, "generate", request)
        future = asyncio.get_running_loop().create_future()
        slot.pending.append((request, future))
        self._unsent.add(request.request_id)
        if len(slot.pending) == 1:  # the first of this pass flushes after the others joined
            asyncio.get_running_loop().call_soon(self._start_flush, slot)
        return await future

    async def _send_alone(self, slot: _Slot, request: GenerationRequest, future: asyncio.Future) -> None:
        if future.done():
            return
        if request.request_id in self._aborted:
            return future.set_result(_aborted(request.request_id))
        try:
            result = await call_host(slot.worker, "generate", request)
        except Exception as e:
            if not future.done():
                future.set_exception(e)
            return
        if not future.done():
            future.set_result(result)

    def _start_flush(self, slot: _Slot) -> None:
        task = asyncio.ensure_future(self._flush(slot))
        self._flushes.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, slot: _Slot) -> None:
        pending, slot.pending = slot.pending, []
        self._unsent.difference_update(r.request_id for r, _ in pending)
        live = []
        for r, f in pending:
            if f.done():  # its caller was cancelled
                continue
            if r.request_id in self._aborted:
                f.set_result(_aborted(r.request_id))
            else:
                live.append((r, f))
        if not live:
            return
        self.coalesced_calls += 1
        self.coalesced_requests += len(live)
        try:
            results = await call_host(slot.worker, "generate_batch", [r for r, _ in live])
        except Exception as e:
            if is_unavailable(e) or len(live) == 1:  # each waiter retries (see generate) or fails
                return _fail_waiters(live, e)
            # one request's own error (a prompt the engine rejects) fails the whole call: send each
            # alone, so that only the request at fault fails, as it would have without batching
            await asyncio.gather(*(self._send_alone(slot, r, f) for r, f in live))
            return
        except BaseException as e:  # cancelled: the waiters must not hang
            _fail_waiters(live, e)
            raise
        by_id = {res.request_id: res for res in results}
        for r, f in live:
            if f.done():
                continue
            if r.request_id in by_id:
                f.set_result(by_id[r.request_id])
            else:
                f.set_exception(RuntimeError(f"generate_batch returned no result for request {r.request_id}"))

    @contextlib.asynccontextmanager
    async def _admit(self, idx: int, requests: list[GenerationRequest]) -> AsyncIterator[list[GenerationRequest]]:
        """Queue ``requests`` for worker ``idx`` within its bound; yields those not aborted while
        queued, counted in flight until the block ends."""
        slot = self._slots[idx]
        ids = [r.request_id for r in requests]
        slot.outstanding += len(ids)
        self._where.update(dict.fromkeys(ids, idx))
        acquired = 0
        send: list[GenerationRequest] = []
        try:
            for _ in ids:
                await slot.sem.acquire()
                acquired += 1
            send = [r for r in requests if r.request_id not in self._aborted_waiting]
            slot.inflight += len(send)
            self.max_inflight_seen = max(self.max_inflight_seen, slot.inflight)
            self._running.update(r.request_id for r in send)
            yield send
        finally:
            slot.inflight -= len(send)
            self._running.difference_update(r.request_id for r in send)
            for _ in range(acquired):
                slot.sem.release()
            slot.outstanding -= len(ids)
            for rid in ids:
                self._where.pop(rid, None)
                self._aborted_waiting.discard(rid)

    async def abort(self, request_ids: list[str]) -> None:
        by_worker: dict[int, list[str]] = {}
        for rid in request_ids:
            if rid in self._retrying or rid in self._unsent:  # answered as aborted, never sent
                self._aborted.add(rid)
            elif rid in self._running:
                self._aborted.add(rid)
                by_worker.setdefault(self._where[rid], []).append(rid)
            elif rid in self._where:
                self._aborted_waiting.add(rid)
        # a dead worker has nothing left to abort; anything else is a bug
        for r in await asyncio.gather(*(call_host(self._slots[i].worker, "abort", ids) for i, ids in by_worker.items()),
                                      return_exceptions=True):
            if isinstance(r, BaseException) and not is_unavailable(r):
                raise r

    def release(self, episode_id: str | None) -> _Slot | None:
        """The episode ended: its worker binding is no longer needed. Returns the worker's slot."""
        idx = self._sticky.pop(episode_id, None)
        if idx is None:
            return None
        self._slots[idx].episodes -= 1
        return self._slots[idx]

    def stats(self) -> dict[str, float]:
        return {"rollout/router/max_inflight": float(self.max_inflight_seen),
                "rollout/router/unavailable_retries": float(self.unavailable_retries),
                "rollout/router/requests_per_call": self.coalesced_requests / max(self.coalesced_calls, 1),
                **{f"rollout/router/worker{i}/served": float(s.served) for i, s in enumerate(self._slots)}}
