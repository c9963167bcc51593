"""Router.generate_batch: one call per batch to a worker that takes batches, per-request
fallback for workers that do not and for a worker found unavailable."""
import asyncio

from roll.errors import WorkerUnavailableError
from roll.rollout.router import Router
from roll.strategies.base import GenerationRequest, GenerationResult


class PlainWorker:
    def __init__(self):
        self.calls: list[str] = []

    async def generate(self, r: GenerationRequest) -> GenerationResult:
        self.calls.append(r.request_id)
        await asyncio.sleep(0)
        return GenerationResult(r.request_id, [len(r.request_id)], [-0.1], "stop")

    async def abort(self, ids):
        pass


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
    assert batcher.batches == [] and len(out) == 3


def test_unavailable_worker_batch_is_sent_again():
    worker = BatchWorker(fail_batches=1)
    router = Router([worker], max_inflight_per_worker=8)
    out = asyncio.run(router.generate_batch(group(4)))
    assert [r.finish_reason for r in out] == ["stop"] * 4
    assert router.unavailable_retries >= 1
    assert sorted(worker.calls) == [f"g-{i}" for i in range(4)]  # each request served once, after the failure
