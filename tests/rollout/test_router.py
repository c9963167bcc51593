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
