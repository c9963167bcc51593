"""Cluster dispatch, timeouts and restarts with a light worker (no model) on the local Ray cluster."""
from __future__ import annotations

import sys
import time

import pytest
import torch

from roll.config.roles import WorkerConfig
from roll.config.schema import ResourcesConfig
from roll.data.batch import Batch
from roll.workers.base import Worker

pytestmark = pytest.mark.integration


class EchoWorker(Worker):
    """Doubles its share of a batch; naps on request (to exercise timeouts)."""

    def double(self, batch: Batch) -> Batch:
        self.last_rows = batch["x"].tolist()
        return Batch({"x": batch["x"] * 2, "rank": torch.full((len(batch),), self.rank)})

    def nap(self, seconds: float) -> int:
        time.sleep(seconds)
        return self.rank

    def rows_seen(self) -> list[int]:
        return self.last_rows

    def whoami(self) -> tuple[int, int]:
        return self.rank, self.world_size

    def fail_on(self, rank: int) -> int:
        if self.rank == rank:
            raise ValueError(f"bad input on rank {rank}")
        return self.rank


@pytest.fixture(scope="module")
def echo(ray_cluster):
    from ray import cloudpickle

    from roll.distributed.cluster import Cluster
    from roll.distributed.resource_pool import ResourcePool

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import test modules
    cfg = WorkerConfig(world_size=2, num_cpus_per_worker=0.01, call_timeout_s=20)
    pool = ResourcePool(ResourcesConfig(device="cpu"), {"echo": cfg})
    cluster = Cluster("echo", EchoWorker, cfg, pool)
    yield cluster
    cluster.shutdown()
    pool.shutdown()


def test_dispatch_modes(echo):
    assert echo.call("whoami") == [(0, 2), (1, 2)]
    assert echo.call("whoami", mode="rank0") == (0, 2)
    out = echo.call("double", Batch({"x": torch.arange(5)}), mode="dp")  # 5 rows over 2 ranks: 3, 2
    assert out["x"].tolist() == [2 * i for i in range(5)]
    assert out["rank"].tolist() == [0, 0, 0, 1, 1]
    fut = echo.call_async("nap", 0.0)
    assert fut.get() == [0, 1]
    with pytest.raises(ValueError, match="dispatch mode"):
        echo.call("whoami", mode="some")
    with pytest.raises(ValueError, match="bad input on rank 1") as err:  # the worker's own exception type
        echo.call("fail_on", 1)
    assert "raised by echo rank 1 in fail_on" in "".join(getattr(err.value, "__notes__", []))
    assert echo.call("whoami", mode="rank0") == (0, 2)  # a plain exception needs no restart


def test_timeout_names_rank_then_recovers(echo):
    from roll.distributed.cluster import CallTimeoutError

    t0 = time.monotonic()
    with pytest.raises(CallTimeoutError, match=r"echo ranks 0, 1: nap did not finish within 1s"):
        echo.call("nap", 60.0, timeout_s=1.0)
    assert time.monotonic() - t0 < 5
    # the busy ranks are restarted (not left sleeping) and the next call is served
    assert echo.call("whoami", mode="rank0") == (0, 2)
    assert echo.restarts == 1


def test_dp_dispatch_replicates_rows_inside_a_tensor_parallel_group(ray_cluster):
    """tp=2 x dp=2 on four CPU workers (Megatron's rank order: tp fastest): both ranks of a TP
    group get the same rows, the two dp groups split the batch, results come from one rank per
    dp group. dp_size is the plan's (world / (tp x pp)), not the worker count."""
    from ray import cloudpickle

    from roll.distributed.cluster import Cluster
    from roll.distributed.resource_pool import ResourcePool

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cfg = WorkerConfig(world_size=4, num_cpus_per_worker=0.01, call_timeout_s=20)
    cfg.strategy_args.strategy_name = "megatron"
    cfg.strategy_args.strategy_config = {"tensor_model_parallel_size": 2}
    pool = ResourcePool(ResourcesConfig(device="cpu"), {"tp_echo": cfg})
    cluster = Cluster("tp_echo", EchoWorker, cfg, pool)
    try:
        out = cluster.call("double", Batch({"x": torch.arange(6)}), mode="dp")
        assert cluster.call("rows_seen") == [[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]]
        assert out["x"].tolist() == [0, 2, 4, 6, 8, 10]  # each row once: one rank per dp group
        assert out["rank"].tolist() == [0, 0, 0, 2, 2, 2]
        assert pool.plan.roles["tp_echo"].dp_size == 2 and cluster.dp_size == 2
    finally:
        cluster.shutdown()
        pool.shutdown()
