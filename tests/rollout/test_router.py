"""Router: load balancing, sticky routing per episode, in-flight bound, abort routing."""
import asyncio

import pytest

from roll.rollout.router import InferenceClient, Router
from roll.strategies.base import GenerationRequest, GenerationResult


class Worker:
    def __init__(self, delay=0.01):
        self.delay = delay
        self.seen: list[str] = []
        self.inflight = 0
        self.max_inflight = 0
        self.aborted: list[str] = []
        self._events: dict[str, asyncio.Event] = {}

    async def generate(self, r: GenerationRequest) -> GenerationResult:
        self.seen.append(r.request_id)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        ev = self._events.setdefault(r.request_id, asyncio.Event())
        try:
            await asyncio.wait_for(ev.wait(), self.delay)
            return GenerationResult(r.request_id, [1], [-0.5], "abort")
        except TimeoutError:
            return GenerationResult(r.request_id, [1, 2], [-0.5, -0.5], "stop")
        finally:
            self.inflight -= 1

    async def abort(self, ids):
        self.aborted += ids
        for i in ids:
            if i in self._events:
                self._events[i].set()


def req(ep, turn):
    return GenerationRequest(f"{ep}/t{turn}", [1, 2, 3], meta={"episode_id": ep})


def test_router_is_an_inference_client():
    assert isinstance(Router([Worker()]), InferenceClient)
    with pytest.raises(ValueError):
        Router([])


def test_sticky_and_balanced():
    workers = [Worker(), Worker(), Worker()]
    router = Router(workers, max_inflight_per_worker=8)

    async def episode(ep):
        for turn in range(3):
            await router.generate(req(ep, turn))

    async def main():
        await asyncio.gather(*(episode(f"e{i}") for i in range(6)))

    asyncio.run(main())
    owners = {}
    for wi, w in enumerate(workers):
        for rid in w.seen:
            owners.setdefault(rid.split("/")[0], set()).add(wi)
    assert all(len(o) == 1 for o in owners.values())  # every episode stayed on one worker
    assert sorted(len(w.seen) for w in workers) == [6, 6, 6]  # 2 episodes per worker


def test_inflight_bound_per_worker():
    workers = [Worker(0.02), Worker(0.02)]
    router = Router(workers, max_inflight_per_worker=3)

    async def main():
        await asyncio.gather(*(router.generate(GenerationRequest(f"r{i}", [1])) for i in range(20)))

    asyncio.run(main())
    assert max(w.max_inflight for w in workers) <= 3
    assert sum(len(w.seen) for w in workers) == 20
    router.release("nobody")  # releasing an unknown episode is harmless


def test_abort_reaches_the_right_worker_and_queued_requests():
    workers = [Worker(5.0), Worker(5.0)]
    router = Router(workers, max_inflight_per_worker=1)

    async def main():
        tasks = [asyncio.create_task(router.generate(req(f"e{i}", 0))) for i in range(3)]
        await asyncio.sleep(0.05)  # e0 and e1 run, e2 waits in the router for a slot
        await router.abort([f"e{i}/t0" for i in range(3)])
        return await asyncio.wait_for(asyncio.gather(*tasks), 2.0)

    results = asyncio.run(main())
    assert all(r.finish_reason == "abort" for r in results)
    assert sorted(workers[0].aborted + workers[1].aborted) == ["e0/t0", "e1/t0"]
    assert results[2].output_ids == []  # never reached an engine


class ActorDiedError(RuntimeError):
    """Named like Ray's: the router tells a dead worker by the exception's type name."""


class DyingWorker(Worker):
    """Dies on the first ``deaths`` calls, then (restarted) is not serving for ``not_ready`` calls."""

    def __init__(self, deaths=1, not_ready=0, **kw):
        super().__init__(**kw)
        self.deaths, self.not_ready = deaths, not_ready

    async def generate(self, r):
        if self.deaths:
            self.deaths -= 1
            self.seen.append(r.request_id)
            raise ActorDiedError("the actor died unexpectedly")
        if self.not_ready:
            self.not_ready -= 1
            self.seen.append(r.request_id)
            from roll.errors import WorkerUnavailableError

            raise WorkerUnavailableError("restarted: waiting for the current weights")
        return await super().generate(r)

    async def abort(self, ids):
        raise ActorDiedError("dead")


def test_a_dead_worker_fails_no_request_the_next_worker_serves_it():
    dying, healthy = DyingWorker(deaths=1), Worker()
    router = Router([dying, healthy])

    async def go():
        return await router.generate(req("e0", 0))

    out = asyncio.run(go())
    assert out.output_ids == [1, 2] and out.finish_reason == "stop"
    assert dying.seen == ["e0/t0"] and healthy.seen == ["e0/t0"]
    assert router.stats()["rollout/router/unavailable_retries"] == 1.0
    # the episode is now bound to the worker that served it
    asyncio.run(router.generate(req("e0", 1)))
    assert healthy.seen == ["e0/t0", "e0/t1"]


def test_a_restarted_worker_is_waited_for_until_it_serves():
    w = DyingWorker(deaths=1, not_ready=2)
    router = Router([w])
    out = asyncio.run(router.generate(req("e0", 0)))
    assert out.finish_reason == "stop" and len(w.seen) == 4
    assert router.unavailable_retries == 3


def test_unavailable_past_the_wait_raises_and_other_errors_are_not_retried():
    router = Router([DyingWorker(deaths=100)], unavailable_wait_s=0.3)
    with pytest.raises(ActorDiedError):
        asyncio.run(router.generate(req("e0", 0)))

    class Broken(Worker):
        async def generate(self, r):
            self.seen.append(r.request_id)
            raise ValueError("a bug, not a death")

    b = Broken()
    with pytest.raises(ValueError):
        asyncio.run(Router([b]).generate(req("e1", 0)))
    assert b.seen == ["e1/t0"]


def test_abort_while_waiting_to_retry_returns_an_aborted_result():
    router = Router([DyingWorker(deaths=100)])

    async def go():
        task = asyncio.create_task(router.generate(req("e0", 0)))
        await asyncio.sleep(0.05)  # the first attempt failed; waiting to send again
        await router.abort(["e0/t0"])  # the dead worker's abort error is not raised
        return await task

    out = asyncio.run(go())
    assert out.finish_reason == "abort" and out.output_ids == []
