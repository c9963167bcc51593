"""ResourcePool: Ray placement groups for a plan (roll/distributed/plan.py): one bundle per
device slot (shared by colocated roles; on several nodes each bundle pinned to the node the plan
gives its slot) and one group per CPU-only role. ``worker_slots(role)`` gives each worker's
bundle, Ray resources and environment (device visibility) for
:class:`roll.distributed.cluster.Cluster`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roll.config.validate import ConfigError

# the planning API lived here first; callers still import it from here
from roll.distributed.plan import (  # noqa: F401
    INFERENCE_STRATEGIES,
    TRAINING_ROLES,
    Plan,
    PoolInfo,
    RolePlacement,
    _config_roles,
    env_roles,
    format_ranks,
    make_plan,
    parse_device_mapping,
    plan_roles,
    print_plan,
    read_pool_info,
    validate_plan,
    worker_layout,
)


# ---- runtime: Ray placement groups ----------------------------------------------------------
@dataclass
class WorkerSlot:
    """Where one worker (Ray actor) goes and what it gets."""

    placement_group: Any
    bundle_index: int
    num_cpus: float
    num_gpus: float
    devices: list[int]
    env_vars: dict[str, str] = field(default_factory=dict)


class ResourcePool:
    """Ray placement groups for a plan: one bundle per device slot (shared by colocated roles)
    and one group per CPU-only role. Use ``ResourcePool.from_config(cfg)`` in pipelines, or
    ``ResourcePool(resources, {role: WorkerConfig})`` directly."""

    def __init__(self, resources: Any, roles: dict[str, Any], *, pool: PoolInfo | None = None, timeout_s: float = 60.0,
                 cpu_roles: dict[str, tuple[int, float]] | None = None):
        import ray

        if not ray.is_initialized():
            raise RuntimeError("ResourcePool needs ray.init() first")
        self.resources = resources
        self.timeout_s = timeout_s
        self.plan = plan_roles(resources, roles, pool or read_pool_info(), cpu_roles)
        if self.plan.errors:
            raise ConfigError(self.plan.errors)
        self._role_pgs: dict[str, Any] = {}
        self._slot_gpu_ids: dict[int, list[str]] = {}
        self.device_pg = None
        used = sorted({s for r in self.plan.roles.values() for s in r.slots})
        if used:
            slot_cpu = max(resources.cpus_per_device_slot, 0.01)  # Ray bundles cannot be empty
            bundle = {"GPU": 1, "CPU": slot_cpu} if self.plan.device == "gpu" else {"CPU": slot_cpu}
            self.device_pg = self._make_pg([dict(bundle) for _ in range(self.plan.pool_size)], "device slots",
                                           self._slot_nodes())
            if self.plan.device == "gpu":
                self._probe_gpu_ids(used)

    @classmethod
    def from_config(cls, cfg: Any, timeout_s: float = 60.0) -> ResourcePool:
        roles, cpu_roles = _config_roles(cfg)
        return cls(cfg.resources, roles, timeout_s=timeout_s, cpu_roles=cpu_roles)

    def _slot_nodes(self) -> list[dict[str, str]] | None:
        """Per GPU slot, a label selector pinning its bundle to the node the plan puts it on
        (slots count the nodes' GPUs in ``ray.nodes()`` order); None on one node or CPU slots."""
        pool = self.plan.pool
        if self.plan.device != "gpu" or sum(1 for n in pool.gpus_per_node if n) < 2 or not pool.node_ids:
            return None
        return [{"ray.io/node-id": pool.node_ids[int(self.plan.node_of(s))]} for s in range(self.plan.pool_size)]

    def _make_pg(self, bundles: list[dict], what: str, label_selector: list[dict[str, str]] | None = None):
        import ray
        from ray.util.placement_group import placement_group

        pg = (placement_group(bundles, strategy="PACK") if label_selector is None
              else placement_group(bundles, strategy="PACK", bundle_label_selector=label_selector))
        if not pg.wait(self.timeout_s):
            ray.util.remove_placement_group(pg)
            raise RuntimeError(f"placement group for {what} ({len(bundles)} x {bundles[0]}) not ready after {self.timeout_s:g}s; "
                               f"the cluster offers {ray.available_resources()}")
        return pg

    def _probe_gpu_ids(self, slots: list[int]) -> None:
        """Ask each used GPU bundle which physical GPU it holds, so a worker spanning several
        slots (tensor parallel) can be given all of them through CUDA_VISIBLE_DEVICES."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        @ray.remote(num_gpus=0.001, num_cpus=0)
        def gpu_ids():
            return [str(i) for i in ray.get_gpu_ids()]

        refs = {s: gpu_ids.options(scheduling_strategy=PlacementGroupSchedulingStrategy(self.device_pg, s)).remote() for s in slots}
        self._slot_gpu_ids = {s: ray.get(ref, timeout=self.timeout_s) for s, ref in refs.items()}

    def worker_slots(self, role: str, worker_config: Any = None) -> list[WorkerSlot]:
        placement = self.plan.roles.get(role)
        if placement is None:
            if worker_config is None:
                raise KeyError(f"role {role!r} is not in the resource pool's plan ({', '.join(self.plan.roles)})")
            n = worker_config.world_size or 1
            tp, pp, dp = worker_layout(worker_config, n)
            placement = RolePlacement(role, n, [], 0, worker_config.num_cpus_per_worker, dp_size=dp, tp=tp, pp=pp)
            self.plan.roles[role] = placement
        if not placement.on_device_slots:
            if role not in self._role_pgs:
                cpus = max(placement.num_cpus_per_worker, 0.01)
                self._role_pgs[role] = self._make_pg([{"CPU": cpus} for _ in range(placement.num_workers)], f"role {role}")
            pg = self._role_pgs[role]
            return [WorkerSlot(pg, i, max(placement.num_cpus_per_worker, 0.01), 0, []) for i in range(placement.num_workers)]
        # colocated roles share a slot's bundle: each takes an equal fraction of it
        share = 1 + max((len([o for o in self.plan.roles.values() if o.on_device_slots and s in o.slots]) - 1)
                        for s in placement.slots)
        slot_cpu = max(self.resources.cpus_per_device_slot, 0.01)
        out = []
        for devices in placement.devices:
            env: dict[str, str] = {}
            num_gpus = 0.0
            if self.plan.device == "gpu":
                num_gpus = 1.0 / share if len(devices) == 1 else 0.001
                env["CUDA_VISIBLE_DEVICES"] = ",".join(g for s in devices for g in self._slot_gpu_ids.get(s, []))
                env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] = "1"
            out.append(WorkerSlot(self.device_pg, devices[0], slot_cpu / share, num_gpus, list(devices), env))
        return out

    def shutdown(self) -> None:
        import ray

        for pg in [self.device_pg, *self._role_pgs.values()]:
            if pg is not None:
                ray.util.remove_placement_group(pg)
        self.device_pg, self._role_pgs = None, {}
