"""Cluster: N Ray actors of one role, called as one.

``Cluster(role_name, worker_cls, worker_config, resource_pool)`` creates one actor per
worker slot the pool planned for the role (resources, placement-group bundle and device
visibility come from the pool, never from a hard-coded ``@ray.remote(num_gpus=...)``).
``worker_cls`` is a plain class (see roll/workers/base.py): constructed with
``(role, rank, world_size, worker_config, **worker_kwargs)``, then ``setup(master_addr,
master_port)`` is called on every rank at once (torch.distributed rendezvous, model load).
Classes with ``async def`` methods become Ray async actors with
``worker_config.max_concurrency`` concurrent calls (inference workers serve many
``generate`` calls at once) plus ``CONTROL_SLOTS`` more, so control calls (pause and publish
of a weight update, abort, version) always find a slot while generations fill the configured
concurrency; ``cluster.workers`` are the handles for such direct calls.

Calls: ``cluster.call(method, *args, mode=...)`` blocks, ``call_async`` returns a
:class:`ClusterFuture` (``.get(timeout)``). Dispatch modes:

- ``all``: same arguments to every rank, list of results;
- ``dp``: every :class:`Batch` argument is split into near-equal contiguous parts, one per
  data-parallel rank; every worker of one tensor/pipeline parallel group gets its group's
  rows (Megatron's rank order: rank = tp_rank + tp x (dp_rank + dp x pp_rank)); results are
  gathered from one worker per dp group (tp rank 0 of the last pipeline stage, which holds
  the loss metrics) in dp order (Batch -> ``Batch.concat``, tensors -> ``torch.cat``, else a
  list). The layout (``tp``, ``pp``, ``dp_size``) is the plan's
  (:func:`roll.distributed.resource_pool.worker_layout`);
- ``rank0``: rank 0 only, its result.

Faults: actors get ``max_restarts`` (Ray restarts a dead actor; ``max_task_retries=0``, so a
call that was running fails rather than silently re-running). A call fails with
:class:`WorkerDiedError` naming role and rank as soon as Ray reports the death, or with
:class:`CallTimeoutError` naming the ranks still busy after the timeout; nothing waits
forever. The next call first waits for restarted actors and runs ``setup`` again. A
``collective`` cluster (torch.distributed group, e.g. the trainer) cannot lose one member: the
survivors are killed too (Ray restarts them) and the whole group re-rendezvous; restarted
trainers start from the pretrained weights, so the policy pipelines stop the run there
(``on_restart`` callback; a resume continues from the last checkpoint; ``restarts`` counter).
A rank reported dead that still answers with its old process (unreachable for a while) is
killed, so that it restarts like a dead one.
"""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from roll.data.batch import Batch
from roll.errors import RollError
from roll.utils.logging import get_logger

logger = get_logger(__name__)

CONTROL_SLOTS = 8
"""Extra concurrent-call slots of an async worker, reserved in effect for control calls: a
weight update must be able to pause and publish while ``max_concurrency`` generations wait."""

DISPATCH_MODES = ("all", "dp", "rank0")


class WorkerError(RollError, RuntimeError):
    """A call to a cluster failed on one or more ranks."""

    def __init__(self, role: str, ranks: Sequence[int], message: str):
        self.role, self.ranks = role, list(ranks)
        super().__init__(f"{role} rank{'s' if len(self.ranks) != 1 else ''} {', '.join(map(str, self.ranks))}: {message}")


class WorkerDiedError(WorkerError):
    """The actor process died (killed, crashed, out of memory) during the call."""


class CallTimeoutError(WorkerError):
    """The call did not finish within its timeout."""


def split_batch(batch: Batch, n: int) -> list[Batch]:
    """Near-equal contiguous parts (the first ``len % n`` parts get one extra row)."""
    return [batch.select(idx) for idx in np.array_split(np.arange(len(batch)), n)]


def dp_rank_of(rank: int, tp: int, dp: int) -> int:
    """Data-parallel rank of a worker rank in Megatron's order (tp fastest, then dp, then pp)."""
    return (rank // tp) % dp


def dp_leaders(tp: int, pp: int, dp: int) -> list[int]:
    """One worker per dp group, in dp order: tp rank 0 of the last pipeline stage."""
    return [(pp - 1) * dp * tp + d * tp for d in range(dp)]


def gather(results: list[Any]) -> Any:
    if results and all(isinstance(r, Batch) for r in results):
        return Batch.concat(results)
    if results and all(isinstance(r, torch.Tensor) for r in results):
        return torch.cat(results, dim=0)
    return results


class ClusterFuture:
    """Pending results of one cluster call; ``get`` raises WorkerError naming role and rank."""

    def __init__(self, cluster: Cluster, method: str, refs: list[Any], ranks: list[int], mode: str, timeout_s: float,
                 gather_ranks: list[int] | None = None):
        self.cluster, self.method, self.refs, self.ranks, self.mode = cluster, method, refs, ranks, mode
        self.timeout_s = timeout_s
        self.gather_ranks = ranks if gather_ranks is None else gather_ranks

    def get(self, timeout: float | None = None) -> Any:
        import ray
        from ray.exceptions import RayTaskError

        timeout = self.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        results: dict[int, Any] = {}
        pending = dict(zip(self.refs, self.ranks))
        role = self.cluster.role
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                self.cluster._mark_broken(sorted(pending.values()), died=False)
                raise CallTimeoutError(role, sorted(pending.values()), f"{self.method} did not finish within {timeout:g}s")
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            for ref in ready:
                rank = pending.pop(ref)
                try:
                    results[rank] = self._fetch(ref, rank)
                except RayTaskError as e:
                    # keep the original exception type (Ray makes it an instance of the cause's class)
                    e.add_note(f"raised by {role} rank {rank} in {self.method}")
                    if self.cluster.collective and pending:
                        self._settle_collective(pending, deadline)
                    raise
        ordered = [results[r] for r in self.ranks]
        if self.mode == "rank0":
            return ordered[0]
        if self.mode == "dp":
            return gather([results[r] for r in self.gather_ranks])
        return ordered

    def _fetch(self, ref: Any, rank: int) -> Any:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        try:
            return ray.get(ref)
        except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
            self.cluster._mark_broken([rank], died=True)
            raise WorkerDiedError(self.cluster.role, [rank], f"actor died during {self.method}: {type(e).__name__}") from e

    def _settle_collective(self, pending: dict, deadline: float, grace_s: float = 10.0) -> None:
        """One rank of a collective group raised: usually because a peer died under it (gloo
        "connection closed"). Name the dead peer if there is one; ranks still blocked after a
        grace period are marked broken so that the next call restarts the group."""
        import ray
        from ray.exceptions import RayTaskError

        wait_until = min(deadline, time.monotonic() + grace_s)
        while pending and time.monotonic() < wait_until:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, wait_until - time.monotonic()))
            for ref in ready:
                rank = pending.pop(ref)
                try:
                    self._fetch(ref, rank)
                except RayTaskError:
                    pass  # another collateral failure; the first error is the one raised
        if pending:
            self.cluster._mark_broken(sorted(pending.values()), died=False)


class Cluster:
    """N Ray actors of one role (see module docstring)."""

    def __init__(self, role_name: str, worker_cls: type, worker_config: Any, resource_pool: Any = None, *,
                 worker_kwargs: dict | None = None, collective: bool | None = None,
                 max_restarts: int | None = None, on_restart: Callable[[Cluster], None] | None = None,
                 setup_timeout_s: float | None = None):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.role = role_name
        self.worker_cls = worker_cls
        self.worker_config = worker_config
        self.collective = bool(getattr(worker_cls, "collective", False) if collective is None else collective)
        self.call_timeout_s = float(worker_config.call_timeout_s)
        self.setup_timeout_s = float(setup_timeout_s or max(self.call_timeout_s, 120.0))
        self.on_restart = on_restart
        self.restarts = 0
        self.max_restarts = worker_config.max_restarts if max_restarts is None else max_restarts
        self.is_async = any(inspect.iscoroutinefunction(f) for _, f in inspect.getmembers(worker_cls, inspect.isfunction))
        if resource_pool is not None:
            self.slots = resource_pool.worker_slots(role_name, worker_config)
        else:
            self.slots = None
        self.world_size = len(self.slots) if self.slots is not None else int(worker_config.world_size or 1)
        placement = resource_pool.plan.roles.get(role_name) if resource_pool is not None else None
        if placement is not None:
            self.tp, self.pp, self.dp_size = placement.tp, placement.pp, placement.dp_size
        else:
            from roll.distributed.resource_pool import worker_layout

            self.tp, self.pp, self.dp_size = worker_layout(worker_config, self.world_size)
        restarts = self.max_restarts
        remote_cls = ray.remote(worker_cls)
        self.workers = []
        for rank in range(self.world_size):
            opts: dict[str, Any] = {"max_restarts": restarts, "max_task_retries": 0,
                                    "max_concurrency": worker_config.max_concurrency + CONTROL_SLOTS if self.is_async else 1}
            env = {"ROLL_ROLE": role_name, "ROLL_RANK": str(rank)}
            if self.slots is not None:
                slot = self.slots[rank]
                opts.update(num_cpus=slot.num_cpus, num_gpus=slot.num_gpus,
                            scheduling_strategy=PlacementGroupSchedulingStrategy(slot.placement_group, slot.bundle_index))
                env.update(slot.env_vars)
            else:
                opts.update(num_cpus=worker_config.num_cpus_per_worker)
            opts["runtime_env"] = {"env_vars": env}
            handle = remote_cls.options(**opts).remote(role_name, rank, self.world_size, worker_config, **(worker_kwargs or {}))
            self.workers.append(handle)
        self._broken: set[int] = set()
        self._dead: set[int] = set()  # died: Ray restarts these on its own
        self._group_broken = False
        self._pids: list[int | None] = [None] * self.world_size
        self._rank_restarts = [0] * self.world_size
        try:
            self._setup_all()
        except BaseException:
            self.shutdown()  # no half-built cluster left holding pool resources
            raise

    # ---- lifecycle ------------------------------------------------------------------------
    @property
    def devices(self) -> list[list[int]]:
        """Device slots of each rank (empty lists for CPU-only workers)."""
        return [s.devices for s in self.slots] if self.slots is not None else [[] for _ in range(self.world_size)]

    def rank_of(self, handle: Any) -> int:
        for i, w in enumerate(self.workers):
            if w._actor_id == handle._actor_id:
                return i
        raise KeyError(f"actor {handle} is not a worker of {self.role}")

    def _setup_all(self) -> None:
        addr, port = self._submit("master_address", [0], (), {}).get(self.setup_timeout_s)[0]
        self._submit("setup", list(range(self.world_size)), (addr, port), {}).get(self.setup_timeout_s)
        self._record_pids(range(self.world_size))
        self._broken.clear()
        self._dead.clear()
        self._group_broken = False

    def _record_pids(self, ranks) -> None:
        ranks = list(ranks)
        for rank, info in zip(ranks, self._submit("ping", ranks, (), {}).get(self.setup_timeout_s)):
            self._pids[rank] = info["pid"]

    def _mark_broken(self, ranks: list[int], died: bool) -> None:
        self._broken.update(ranks)
        if died:
            self._dead.update(ranks)
        if self.collective:
            self._group_broken = True

    def _recover(self) -> None:
        """Before the next call after a failure: restart what must restart, wait, set up again."""
        import ray

        # a dead actor is restarting already; a busy one (timed out, or a collective survivor
        # blocked on the dead rank) is killed so that Ray restarts it as well
        to_kill = set(range(self.world_size)) if self.collective else set(self._broken)
        for rank in sorted(to_kill - self._dead):
            ray.kill(self.workers[rank], no_restart=False)
        self.restarts += 1
        logger.warning("%s: restarting ranks %s (restart #%d)", self.role,
                       "all" if self.collective else sorted(self._broken), self.restarts)
        restarted = set(range(self.world_size)) if self.collective else set(self._broken)
        for rank in restarted:
            self._rank_restarts[rank] += 1
            if 0 <= self.max_restarts < self._rank_restarts[rank]:
                raise WorkerDiedError(self.role, [rank], f"out of restarts (max_restarts={self.max_restarts})")
        deadline = time.monotonic() + self.setup_timeout_s
        for rank in sorted(restarted):
            # wait for the NEW process: a killed actor may still answer once before it goes
            old_answers = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerDiedError(self.role, [rank], f"actor did not come back within {self.setup_timeout_s:g}s")
                try:
                    info = ray.get(self.workers[rank].ping.remote(), timeout=max(1.0, left))
                    if info["pid"] != self._pids[rank]:
                        break
                    old_answers += 1
                    if old_answers == 5 and rank in self._dead:
                        # reported dead (ActorUnavailableError: unreachable for a while, e.g. on an
                        # overloaded machine) but alive: Ray will not restart it, so do it now;
                        # its state after the failed call is not trusted
                        logger.warning("%s rank %d was reported dead but answers: restarting it", self.role, rank)
                        ray.kill(self.workers[rank], no_restart=False)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                    pass
                except ray.exceptions.GetTimeoutError as e:
                    raise CallTimeoutError(self.role, [rank], "restarted actor did not answer ping") from e
                time.sleep(0.2)
        if self.collective:
            self._setup_all()
        else:
            addr, port = self._submit("master_address", [0], (), {}).get(self.setup_timeout_s)[0]
            self._submit("setup", sorted(self._broken), (addr, port), {}).get(self.setup_timeout_s)
            self._record_pids(sorted(self._broken))
            self._broken.clear()
            self._dead.clear()
        if self.on_restart is not None:
            self.on_restart(self)

    def ensure_ready(self) -> None:
        """Recover from an earlier failure (restart, wait, set up again); a no-op when healthy."""
        if self._broken or self._group_broken:
            self._recover()

    def check_health(self, timeout_s: float = 5.0) -> list[int]:
        """Ranks whose process died or was replaced since they were set up (Ray restarted a
        crashed actor, which then holds no setup); they are marked so that the next call or
        ``ensure_ready()`` sets them up again. For async clusters whose workers others call
        directly (inference workers under the rollout router): a sync actor busy in a long call
        cannot answer a ping, and a rank that does not answer in time is left for the next check."""
        import ray

        refs = [w.ping.remote() for w in self.workers]
        changed = []
        for rank, ref in enumerate(refs):
            try:
                pid = ray.get(ref, timeout=timeout_s)["pid"]
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                changed.append(rank)
                continue
            except ray.exceptions.GetTimeoutError:
                continue
            if pid != self._pids[rank]:
                changed.append(rank)
        if changed:
            self._mark_broken(changed, died=True)
        return changed

    def report_dead(self, worker: Any) -> None:
        """For callers that use ``cluster.workers`` directly (e.g. the rollout scheduler's
        ``generate`` calls): a RayActorError there marks the rank, the next cluster call or
        ``ensure_ready()`` waits for its restart and sets it up again."""
        rank = worker if isinstance(worker, int) else self.rank_of(worker)
        self._mark_broken([rank], died=True)

    # ---- calls -----------------------------------------------------------------------------
    def _submit(self, method: str, ranks: list[int], args: tuple, kwargs: dict, per_rank_args: list[tuple] | None = None,
                mode: str = "all", timeout_s: float | None = None, gather_ranks: list[int] | None = None) -> ClusterFuture:
        refs = []
        for i, rank in enumerate(ranks):
            a = per_rank_args[i] if per_rank_args is not None else args
            refs.append(getattr(self.workers[rank], method).remote(*a, **kwargs))
        return ClusterFuture(self, method, refs, ranks, mode, self.call_timeout_s if timeout_s is None else timeout_s,
                             gather_ranks)

    def call_async(self, method: str, *args: Any, mode: str = "all", timeout_s: float | None = None, **kwargs: Any) -> ClusterFuture:
        if mode not in DISPATCH_MODES:
            raise ValueError(f"unknown dispatch mode {mode!r}; choose one of {', '.join(DISPATCH_MODES)}")
        self.ensure_ready()
        if mode == "rank0":
            return self._submit(method, [0], args, kwargs, mode=mode, timeout_s=timeout_s)
        ranks = list(range(self.world_size))
        if mode == "dp":
            per_rank: list[list[Any]] = [[] for _ in ranks]
            for a in args:
                parts = split_batch(a, self.dp_size) if isinstance(a, Batch) else [a] * self.dp_size
                for r in ranks:
                    per_rank[r].append(parts[dp_rank_of(r, self.tp, self.dp_size)])
            return self._submit(method, ranks, args, kwargs, [tuple(p) for p in per_rank], mode=mode, timeout_s=timeout_s,
                                gather_ranks=dp_leaders(self.tp, self.pp, self.dp_size))
        return self._submit(method, ranks, args, kwargs, mode=mode, timeout_s=timeout_s)

    def call(self, method: str, *args: Any, mode: str = "all", timeout_s: float | None = None, **kwargs: Any) -> Any:
        return self.call_async(method, *args, mode=mode, timeout_s=timeout_s, **kwargs).get()

    def offload(self) -> None:
        self.call("offload")

    def reload(self) -> None:
        self.call("reload")

    def shutdown(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []
