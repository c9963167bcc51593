"""The bounded pool: concurrency limit, thread safety, pickling, use from Ray workers."""
from __future__ import annotations

import pickle
import threading
import time

import pytest
from sandbox_helpers import ROOMY as LIMITS

from roll.sandbox import SandboxPool, get_pool


def test_concurrency_is_bounded():
    with SandboxPool(LIMITS, max_concurrency=2) as pool:
        start = time.monotonic()
        results = pool.map_python([{"code": "import time\ntime.sleep(0.3)\nprint('done')"} for _ in range(6)])
        elapsed = time.monotonic() - start
        assert all(r.ok and r.stdout == "done\n" for r in results)
        assert pool.stats["peak_in_flight"] == 2 and pool.stats["executions"] == 6
        assert elapsed >= 0.9  # three waves of two


def test_many_threads_share_one_pool():
    pool = SandboxPool(LIMITS, max_concurrency=2)
    outputs: dict[int, str] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            outputs[i] = pool.run_python("import sys\nprint(int(sys.stdin.read()) ** 2)", stdin=str(i)).stdout
        except Exception as e:  # noqa: BLE001  (collected and asserted below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert outputs == {i: f"{i * i}\n" for i in range(8)}
    assert pool.stats["peak_in_flight"] <= 2 and pool.stats["in_flight"] == 0


def test_pool_pickles_as_its_config_and_process_pools_are_shared():
    pool = SandboxPool(LIMITS, max_concurrency=3)
    clone = pickle.loads(pickle.dumps(pool))
    assert clone.config == pool.config and clone.max_concurrency == 3
    assert clone.run_python("print('clone')").stdout == "clone\n"
    assert get_pool(LIMITS, 2) is get_pool(LIMITS, 2)
    assert get_pool(LIMITS, 2) is not get_pool(LIMITS.replace(timeout_s=3), 2)


def test_closed_pool_refuses():
    pool = SandboxPool(LIMITS, max_concurrency=1)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.run_python("print(1)")


@pytest.mark.integration
def test_pool_from_ray_workers(ray_cluster):
    ray = ray_cluster

    @ray.remote
    def run_in_worker(pool: SandboxPool, n: int) -> str:
        return pool.run_python("import sys\nprint(sum(range(int(sys.argv[1]))))", args=[str(n)]).stdout

    pool = SandboxPool(LIMITS, max_concurrency=2)
    outs = ray.get([run_in_worker.remote(pool, n) for n in (10, 100, 1000)])
    assert outs == ["45\n", "4950\n", "499500\n"]
