"""Router.generate_batch: one call per batch to a worker that takes batches, per-request
fallback for workers that do not and for a worker found unavailable."""
import asyncio

from roll.errors import WorkerUnavailableError
from roll.rollout.router import Router
from roll.strategies.base import GenerationRequest, GenerationResult


class PlainWorker:
    def __init__(self):
        self.calls: list[str] = []
        self.aborted: list[str] = []

    async def generate(self, r: GenerationRequest) -> GenerationResult:
        self.calls.append(r.request_id)
        await asyncio.sleep(0)
        return GenerationResult(r.request_id, [len(r.request_id)], [-0.1], "stop")

    async def abort(self, ids):
        self.aborted += list(ids)


class BatchWorker(PlainWorker):
    def __init__(self, fail_batches: int = 0):
        super().__init__()
        self.batches: list[list[str]] = []
        self.fail_batches = fail_batches

    async def generate_batch(self, requests):
        if self.fail_batches:
            self.fail_batches -= 1
            raise WorkerUnavailableError("restarted: waiting for the current weights")
        self.batches.append([r.request_id for r in requests])
        return list(reversed([await self.generate(r) for r in reversed(requests)]))  # answered out of order inside


def group(n, prefix="g"):
    return [GenerationRequest(f"{prefix}-{i}", [1, 2, 3]) for i in range(n)]


def test_one_call_per_batch_in_request_order():
    worker = BatchWorker()
    router = Router([worker], max_inflight_per_worker=8)
    out = asyncio.run(router.generate_batch(group(8)))
    assert worker.batches == [[f"g-{i}" for i in range(8)]]
    assert [r.request_id for r in out] == [f"g-{i}" for i in range(8)]
    assert router.stats()["rollout/router/worker0/served"] == 8
    assert router._where == {} and router._running == set()


def test_batches_spread_over_workers():
    workers = [BatchWorker(), BatchWorker()]
    router = Router(workers, max_inflight_per_worker=8)

    async def main():
        return await asyncio.gather(*(router.generate_batch(group(4, f"p{k}")) for k in range(4)))

    asyncio.run(main())
    assert [len(w.batches) for w in workers] == [2, 2]


def test_worker_without_batches_and_oversized_batches_go_one_by_one():
    plain = PlainWorker()
    out = asyncio.run(Router([plain]).generate_batch(group(3)))
    assert [r.request_id for r in out] == ["g-0", "g-1", "g-2"] and len(plain.calls) == 3
    batcher = BatchWorker()
    out = asyncio.run(Router([batcher], max_inflight_per_worker=2).generate_batch(group(3)))
    # one by one through the bound: the two admitted together leave in one call, the third after
    assert batcher.batches == [["g-0", "g-1"], ["g-2"]] and [r.request_id for r in out] == ["g-0", "g-1", "g-2"]


def test_unavailable_worker_batch_is_sent_again():
    worker = BatchWorker(fail_batches=1)
    router = Router([worker], max_inflight_per_worker=8)
    out = asyncio.run(router.generate_batch(group(4)))
    assert [r.finish_reason for r in out] == ["stop"] * 4
    assert router.unavailable_retries >= 1
    assert sorted(worker.calls) == [f"g-{i}" for i in range(4)]  # each request served once, after the failure


def test_single_requests_of_one_pass_leave_in_one_batch_call():
    """A lockstep turn's requests (one per episode) reach a batching worker in one call, each
    caller gets its own result, and the stickiness and bounds still hold per request."""
    worker = BatchWorker()
    router = Router([worker], max_inflight_per_worker=8)
    reqs = [GenerationRequest(f"ep{i}/t0", [1, 2, 3], meta={"episode_id": f"ep{i}"}) for i in range(6)]

    async def main():
        return await asyncio.gather(*(router.generate(r) for r in reqs))

    out = asyncio.run(main())
    assert worker.batches == [[r.request_id for r in reqs]]
    assert [r.request_id for r in out] == [r.request_id for r in reqs]
    assert [r.output_ids for r in out] == [[len(r.request_id)] for r in reqs]
    assert router.stats()["rollout/router/requests_per_call"] == 6.0
    assert router._running == set() and router._where == {}


def test_request_aborted_before_its_batch_leaves_is_not_sent():
    worker = BatchWorker()
    router = Router([worker], max_inflight_per_worker=8)
    a, b = GenerationRequest("a", [1], meta={"episode_id": "A"}), GenerationRequest("b", [1], meta={"episode_id": "B"})

    async def main():
        ta, tb = asyncio.ensure_future(router.generate(a)), asyncio.ensure_future(router.generate(b))
        await asyncio.sleep(0)  # both admitted and waiting for the batch call, which has not left
        await router.abort(["a"])
        return await ta, await tb

    ra, rb = asyncio.run(main())
    assert ra.finish_reason == "abort" and ra.output_ids == []
    assert rb.finish_reason == "stop"
    assert worker.batches == [["b"]]
    assert worker.aborted == []  # the engine never saw it, so it is not told to abort it
    assert router._unsent == set() and router._aborted == set()


def test_one_bad_request_in_a_batch_call_fails_only_itself():
    """The engine rejects a whole batch call for one bad prompt; the router then sends each
    request alone, so the other episodes of the turn are unaffected."""

    class Picky(BatchWorker):
        async def generate(self, r):
            if not r.prompt_ids:
                raise ValueError(f"request {r.request_id}: empty prompt_ids")
            return await super().generate(r)

        async def generate_batch(self, requests):
            if any(not r.prompt_ids for r in requests):
                raise ValueError("empty prompt_ids")
            return await super().generate_batch(requests)

    worker = Picky()
    router = Router([worker], max_inflight_per_worker=8)
    reqs = [GenerationRequest(f"e{i}", [] if i == 2 else [1, 2], meta={"episode_id": f"E{i}"}) for i in range(4)]

    async def main():
        return await asyncio.gather(*(router.generate(r) for r in reqs), return_exceptions=True)

    out = asyncio.run(main())
    assert isinstance(out[2], ValueError) and "e2" in str(out[2])
    assert [o.request_id for k, o in enumerate(out) if k != 2] == ["e0", "e1", "e3"]
    assert sorted(worker.calls) == ["e0", "e1", "e3"]  # each good request served once
    assert router._running == set() and router._where == {}
