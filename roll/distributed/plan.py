"""AutoDeviceMapping: plan roles onto a pool of device slots, validate, and print the plan.

A pool has ``pool_size`` device slots numbered 0..N-1: GPUs when the Ray cluster has them
(counted node by node in ``ray.nodes()`` order, so slot -> node is fixed by the plan),
otherwise (``resources.device: auto`` or ``cpu``) CPU slots. Each role's ``device_mapping``
("0-7", "0-3,8-11" or a list; parsed, never evaluated) picks slots; the mapping is split into
workers of ``num_gpus_per_worker`` slots. Roles whose mappings overlap are colocated (they
time-share the slots; offload/reload around phases), disjoint roles run concurrently. Roles
without a mapping are CPU-only workers (``world_size`` x ``num_cpus_per_worker``). A training
role's workers form dp x tp x pp (:func:`worker_layout`, the one place the dp size is
computed); a worker's devices and a tensor-parallel group never span nodes.

On CPU the slots are virtual when ``cpus_per_device_slot`` is 0: the pool is as large as the
highest mapped rank (or ``num_devices``), so a GPU YAML with "0-7" plans and runs on a laptop.

Public API (``roll plan`` and the pipelines use these):

- :func:`make_plan` (cfg) -> :class:`Plan` with every problem in ``plan.errors``;
- :func:`validate_plan` (cfg) -> Plan, raising ConfigError listing every problem (call it
  before launching anything);
- :func:`print_plan` (cfg) -> bool: prints the placement table (with the node of each slot)
  and batch arithmetic.

Ray placement of a plan is roll/distributed/resource_pool.py's :class:`ResourcePool`.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from roll.config.rollout import group_seed, groups_per_tag
from roll.config.validate import ConfigError
from roll.utils.logging import get_logger

logger = get_logger(__name__)

INFERENCE_STRATEGIES = {"hf_infer", "vllm", "sglang"}
#: roles whose workers run a training strategy (the reference scores with one, no optimizer step)
TRAINING_ROLES = {"actor_train", "critic", "reference"}
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_device_mapping(spec: Any) -> list[int]:
    """``"0-3,8-11"`` / ``[0, 1]`` / ``"5"`` -> sorted-as-given list of ranks; ValueError if malformed."""
    if spec is None:
        return []
    if isinstance(spec, (list, tuple)):
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in spec):
            raise ValueError(f"device_mapping list must hold non-negative integers, got {list(spec)!r}")
        return list(spec)
    if not isinstance(spec, str):
        # ValueError like every other malformed mapping: the planner collects them as config problems
        raise ValueError(f"device_mapping must be a list or a range string like '0-7', got {spec!r}")  # noqa: TRY004
    ranks: list[int] = []
    for part in spec.replace(" ", "").split(","):
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"device_mapping {spec!r}: {part!r} is not a rank or a range 'a-b'")
        lo, hi = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if hi < lo:
            raise ValueError(f"device_mapping {spec!r}: range {part!r} runs backwards")
        ranks.extend(range(lo, hi + 1))
    return ranks


def format_ranks(ranks: list[int]) -> str:
    """[0,1,2,3,8] -> "0-3,8"."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out) or "-"


@dataclass
class PoolInfo:
    """What the cluster offers: GPUs and CPUs per node."""

    gpus_per_node: list[int]
    cpus_per_node: list[float]
    source: str
    node_ids: list[str] = field(default_factory=list)
    """Ray node id of each node (same order), when read from a Ray cluster."""

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_per_node)

    @property
    def num_cpus(self) -> float:
        return sum(self.cpus_per_node)


def read_pool_info(num_cpus_hint: int | None = None) -> PoolInfo:
    """From the connected Ray cluster, else from this machine (``roll plan`` starts no cluster)."""
    ray = sys.modules.get("ray")  # a connected driver has imported it; `roll plan` never does
    if ray is not None and ray.is_initialized():
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        return PoolInfo([int(n["Resources"].get("GPU", 0)) for n in nodes],
                        [float(n["Resources"].get("CPU", 0)) for n in nodes], f"ray cluster ({len(nodes)} nodes)",
                        [n["NodeID"] for n in nodes])
    try:
        import torch

        gpus = torch.cuda.device_count()
    except ImportError:
        gpus = 0
    return PoolInfo([gpus], [float(num_cpus_hint or os.cpu_count() or 1)], "this machine")


@dataclass
class RolePlacement:
    """Where one role's workers go."""

    role: str
    num_workers: int
    devices: list[list[int]] = field(default_factory=list)
    """Device slots of each worker (empty for CPU-only roles)."""
    num_gpus_per_worker: int = 0
    num_cpus_per_worker: float = 1.0
    strategy: str = ""
    dp_size: int = 1
    colocated_with: list[str] = field(default_factory=list)
    tp: int = 1
    pp: int = 1
    """Workers per tensor / pipeline parallel group (Megatron's rank order: tp fastest, then dp,
    then pp); 1 x 1 when a worker holds its whole model (DDP, ZeRO, an inference engine)."""

    @property
    def on_device_slots(self) -> bool:
        return bool(self.devices)

    @property
    def slots(self) -> list[int]:
        return [d for w in self.devices for d in w]


@dataclass
class Plan:
    device: str
    pool_size: int
    pool: PoolInfo
    roles: dict[str, RolePlacement] = field(default_factory=dict)
    batch: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    virtual_slots: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors

    def node_of(self, slot: int) -> str:
        """Index of the node holding GPU slot ``slot`` (slots count the nodes' GPUs in order)."""
        if self.device != "gpu":
            return "0"
        start = 0
        for i, n in enumerate(self.pool.gpus_per_node):
            if slot < start + n:
                return str(i)
            start += n
        return "?"

    def slots_by_node(self, slots: list[int]) -> str:
        """``"0-3 (node 0), 4-7 (node 1)"``: where each slot is."""
        runs: list[tuple[str, list[int]]] = []
        for s in slots:
            node = self.node_of(s)
            if runs and runs[-1][0] == node:
                runs[-1][1].append(s)
            else:
                runs.append((node, [s]))
        return ", ".join(f"{format_ranks(r)} (node {node})" for node, r in runs)


def _tp(strategy_config: dict) -> tuple[int, int]:
    tp = strategy_config.get("tensor_parallel_size", strategy_config.get("tensor_model_parallel_size", 1))
    pp = strategy_config.get("pipeline_parallel_size", strategy_config.get("pipeline_model_parallel_size", 1))
    return int(tp or 1), int(pp or 1)


def worker_layout(wc: Any, n_workers: int) -> tuple[int, int, int]:
    """(tp, pp, dp) across a role's workers: a training strategy with one device (or a CPU slot)
    per worker spreads each tensor x pipeline group over tp x pp workers and has
    ``n_workers / (tp x pp)`` data-parallel ranks; an inference engine, or a worker holding
    several devices, keeps its model parallelism inside the worker (1, 1, n_workers). The one
    place the dp size is computed (the planner, the Cluster's dispatch and the LR schedule
    length all read it). ValueError when tp x pp does not divide the workers."""
    tp, pp = _tp(wc.strategy_args.strategy_config)
    if wc.strategy_args.strategy_name in INFERENCE_STRATEGIES or wc.num_gpus_per_worker > 1 and wc.device_mapping is not None:
        return 1, 1, n_workers
    if tp < 1 or pp < 1 or n_workers % (tp * pp):
        raise ValueError(f"tensor {tp} x pipeline {pp} parallel does not divide the {n_workers} training devices "
                         "(one per worker)")
    return tp, pp, n_workers // (tp * pp)


def plan_roles(resources: Any, roles: dict[str, Any], pool: PoolInfo, cpu_roles: dict[str, tuple[int, float]] | None = None) -> Plan:
    """Place ``roles`` (name -> WorkerConfig) on the pool; every problem goes to ``plan.errors``:
    parse the mappings, size the pool, place each role (device slots or CPU workers, with its
    dp x tp x pp layout), then colocation, memory shares and the CPU demand."""
    errors: list[str] = []
    mappings = _parse_mappings(roles, errors)
    plan = _size_pool(resources, pool, mappings, errors)
    for name, wc in roles.items():
        _check_strategy(name, wc, errors)
        ranks = mappings.get(name)
        placement = None if ranks is None else _place_on_devices(plan, name, wc, ranks) if ranks else _place_on_cpus(plan, name, wc)
        if placement is not None:
            plan.roles[name] = placement
    for name, (n, cpus) in (cpu_roles or {}).items():
        plan.roles[name] = RolePlacement(name, n, [], 0, cpus, "", n)
    _colocate(plan)
    errors.extend(_memory_fraction_problems(plan, roles))
    _check_cpu_demand(plan, resources)
    return plan


def _parse_mappings(roles: dict[str, Any], errors: list[str]) -> dict[str, list[int]]:
    mappings: dict[str, list[int]] = {}
    for name, wc in roles.items():
        try:
            mappings[name] = parse_device_mapping(wc.device_mapping)
        except ValueError as e:
            errors.append(f"{name}.device_mapping: {e}")
    return mappings


def _size_pool(resources: Any, pool: PoolInfo, mappings: dict[str, list[int]], errors: list[str]) -> Plan:
    """GPU slots when the cluster has GPUs (and device allows), else CPU slots: as many as
    ``cpus_per_device_slot`` allows, or virtual ones up to the highest mapped rank."""
    device = resources.device
    if device == "gpu" and pool.num_gpus == 0:
        errors.append(f"resources.device: gpu, but {pool.source} has no GPUs (use device: auto to fall back to CPU slots)")
    use_gpu = pool.num_gpus > 0 and device in ("auto", "gpu")
    virtual = False
    if resources.num_devices is not None:
        pool_size = int(resources.num_devices)
        if use_gpu and pool_size > pool.num_gpus:
            errors.append(f"resources.num_devices: {pool_size} GPUs requested, {pool.source} has {pool.num_gpus}")
    elif use_gpu:
        pool_size = pool.num_gpus
    elif resources.cpus_per_device_slot > 0:
        pool_size = int(pool.num_cpus // resources.cpus_per_device_slot)
    else:
        pool_size, virtual = max((max(m) for m in mappings.values() if m), default=-1) + 1, True
    return Plan("gpu" if use_gpu else "cpu", pool_size, pool, errors=errors, virtual_slots=virtual)


def _check_strategy(name: str, wc: Any, errors: list[str]) -> None:
    strategy = wc.strategy_args.strategy_name
    if name in TRAINING_ROLES and strategy in INFERENCE_STRATEGIES:
        errors.append(f"{name}.strategy_args.strategy_name: {strategy!r} is an inference engine; {name} scores "
                      f"or trains with a training strategy (torch_train, deepspeed or megatron)")


def _place_on_cpus(plan: Plan, name: str, wc: Any) -> RolePlacement:
    n = wc.world_size if wc.world_size is not None else 1
    if n < 1:
        plan.errors.append(f"{name}.world_size: must be >= 1, got {n}")
    tp, pp, dp = _layout(name, wc, max(n, 1), plan.errors)
    return RolePlacement(name, max(n, 0), [], 0, wc.num_cpus_per_worker, wc.strategy_args.strategy_name, dp, tp=tp, pp=pp)


def _place_on_devices(plan: Plan, name: str, wc: Any, ranks: list[int]) -> RolePlacement | None:
    """Workers of ``num_gpus_per_worker`` slots each; None when the mapping cannot be split."""
    errors, g, strategy = plan.errors, wc.num_gpus_per_worker, wc.strategy_args.strategy_name
    dups = sorted({r for r in ranks if ranks.count(r) > 1})
    if dups:
        errors.append(f"{name}.device_mapping: ranks listed twice: {format_ranks(dups)}")
    outside = sorted({r for r in ranks if r >= plan.pool_size})
    if outside:
        errors.append(f"{name}.device_mapping: ranks {format_ranks(outside)} are outside the pool of {plan.pool_size} "
                      f"device slots ({plan.device}, {plan.pool.source}); valid ranks are 0-{plan.pool_size - 1}")
    if g < 1:
        errors.append(f"{name}.num_gpus_per_worker: must be >= 1 with a device_mapping, got {g}")
        return None
    if len(ranks) % g:
        errors.append(f"{name}.device_mapping: {len(ranks)} devices are not divisible by num_gpus_per_worker={g}")
        return None
    n_workers = len(ranks) // g
    if wc.world_size is not None and wc.world_size != n_workers:
        errors.append(f"{name}.world_size: {wc.world_size} disagrees with device_mapping "
                      f"({len(ranks)} devices / {g} per worker = {n_workers} workers)")
    groups = [ranks[i * g:(i + 1) * g] for i in range(n_workers)]
    tp, pp = _tp(wc.strategy_args.strategy_config)
    if strategy in INFERENCE_STRATEGIES:
        if tp * pp > g or g % (tp * pp):
            errors.append(f"{name}: tensor_parallel_size {tp} x pipeline {pp} does not fit num_gpus_per_worker={g} "
                          f"(each inference worker is one engine holding its devices)")
    elif g > 1 and (n_workers * g) % (tp * pp):
        errors.append(f"{name}: tensor {tp} x pipeline {pp} parallel does not divide the {n_workers * g} training devices")
    wtp, wpp, dp = _layout(name, wc, n_workers, errors)
    if plan.device == "gpu":
        _check_nodes(plan, name, groups, ranks, wtp)
    return RolePlacement(name, n_workers, groups, g, wc.num_cpus_per_worker, strategy, dp, tp=wtp, pp=wpp)


def _check_nodes(plan: Plan, name: str, groups: list[list[int]], ranks: list[int], tp: int) -> None:
    """One worker's devices, and one tensor-parallel group of workers, on one node: their
    collectives run every layer and need the node's links."""
    for grp in groups:
        if len({plan.node_of(s) for s in grp}) > 1:
            plan.errors.append(f"{name}: worker devices {format_ranks(grp)} span several nodes; one worker's devices must share a node")
    for i in range(0, len(ranks) - tp + 1, tp) if tp > 1 else ():
        grp = ranks[i:i + tp]
        if len({plan.node_of(s) for s in grp}) > 1:
            plan.errors.append(f"{name}: tensor-parallel group on devices {format_ranks(grp)} spans several "
                               f"nodes; put each group of {tp} devices on one node")


def _colocate(plan: Plan) -> None:
    placed = [r for r in plan.roles.values() if r.on_device_slots]
    for a in placed:
        a.colocated_with = [b.role for b in placed if b is not a and set(a.slots) & set(b.slots)]


def _check_cpu_demand(plan: Plan, resources: Any) -> None:
    used = {s for r in plan.roles.values() for s in r.slots}
    cpu_demand = sum(r.num_workers * r.num_cpus_per_worker for r in plan.roles.values() if not r.on_device_slots)
    cpu_demand += (plan.pool_size if plan.device != "gpu" else len(used)) * max(resources.cpus_per_device_slot, 0)
    if cpu_demand > plan.pool.num_cpus:
        plan.warnings.append(f"the plan reserves {cpu_demand:g} CPUs, {plan.pool.source} has {plan.pool.num_cpus:g}: Ray will "
                             f"wait for resources and the launch fails after its placement timeout")


def _layout(name: str, wc: Any, n_workers: int, errors: list[str]) -> tuple[int, int, int]:
    try:
        return worker_layout(wc, n_workers)
    except ValueError as e:
        errors.append(f"{name}: {e}")
        return 1, 1, max(n_workers, 1)


#: the engine option holding the share of each GPU's memory an inference engine reserves, and
#: its default when unset (None: the engine sizes it itself, so nothing can be summed)
MEMORY_FRACTION_OPTIONS = {"vllm": ("gpu_memory_utilization", 0.9), "sglang": ("mem_fraction_static", None)}


def _memory_fraction_problems(plan: Plan, roles: dict[str, Any]) -> list[str]:
    """Inference engines that share a device each reserve a fixed share of its memory at
    start-up: shares adding up past 1.0 make the last engine to start fail (out of memory)."""
    errors: list[str] = []
    shares: dict[str, tuple[str, float]] = {}
    for name, placement in plan.roles.items():
        option = MEMORY_FRACTION_OPTIONS.get(placement.strategy)
        if option is None or not placement.on_device_slots or name not in roles:
            continue
        key, default = option
        value = roles[name].strategy_args.strategy_config.get(key, default)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            errors.append(f"{name}.strategy_args.strategy_config.{key}: must be a share of the device memory in (0, 1], got {value!r}")
            continue
        shares[name] = (key, float(value))
    by_slots: dict[tuple[str, ...], list[int]] = {}
    for slot in range(plan.pool_size):
        users = tuple(n for n in shares if slot in plan.roles[n].slots)
        if sum(shares[n][1] for n in users) > 1.0 + 1e-9:
            by_slots.setdefault(users, []).append(slot)
    for users, slots in by_slots.items():
        parts = " + ".join(f"{n} {shares[n][1]:g} ({shares[n][0]})" for n in users)
        total = sum(shares[n][1] for n in users)
        errors.append(f"device slots {format_ranks(slots)}: colocated inference engines reserve {parts} = {total:g} of "
                      f"the device memory, more than 1.0; lower their fractions so they add up to at most 1.0")
    return errors


def _config_roles(cfg: Any) -> tuple[dict[str, Any], dict[str, tuple[int, float]]]:
    roles = {"actor_train": cfg.actor_train, "actor_infer": cfg.actor_infer}
    for name in ("reference", "critic"):
        if getattr(cfg, name) is not None:
            roles[name] = getattr(cfg, name)
    cpu_roles: dict[str, tuple[int, float]] = {}
    for name, rc in cfg.rewards.items():
        cpu_roles[f"reward.{name}"] = (rc.world_size, 1.0)
        if rc.judge is not None:
            roles[f"reward.{name}.judge"] = rc.judge
    if cfg.pipeline == "agentic":
        for name, mcfg in env_roles(cfg).items():
            cpu_roles[name] = (mcfg.num_env_workers, mcfg.num_cpus_per_env_worker)
    return roles, cpu_roles


def env_roles(cfg: Any) -> dict[str, Any]:
    """Role name -> env manager config of an agentic pipeline's env-worker clusters: ``env.train``,
    and per validation decoding mode ``env.val`` (sampled) / ``env.val_greedy`` (each
    validation scheduler has its own workers)."""
    if not cfg.train_env_manager.num_env_workers:
        return {}  # env managers run in the driver process
    roles = {"env.train": cfg.train_env_manager}
    if cfg.val_env_manager is not None:
        for mode in dict.fromkeys(cfg.val_decoding):
            roles["env.val" if mode == "sampled" else f"env.val_{mode}"] = cfg.val_env_manager
    return roles


def _check_tag_groups(cfg: Any, plan: Plan) -> None:
    """Each env manager's batch splits into whole groups that match its ``num_groups_partition``
    (a validation batch that does not would fail its first round, after start-up), and every tag
    gets groups in each batch: an even split over more tags than groups leaves tags out of every
    batch (an error: never trained, or never validated); a partition entry of 0 leaves its tag out
    on purpose (a warning)."""
    managers = [("train_env_manager", cfg.train_env_manager, "rollout_batch_size", cfg.rollout_batch_size,
                 "a batch", "trained")]
    if cfg.val_env_manager is not None and cfg.eval_steps:
        vbs, vg = cfg.val_batch_size, cfg.val_env_manager.group_size
        if vg < 1 or vbs % vg:
            plan.errors.append(f"val_batch_size {vbs} is not a multiple of val_env_manager.group_size {vg}")
        else:
            managers.append(("val_env_manager", cfg.val_env_manager, "val_batch_size", vbs, "a validation batch",
                             "validated"))
    for where, mcfg, size_key, size, batch, done in managers:
        g = mcfg.group_size
        n_groups, part = size // g, mcfg.num_groups_partition
        bad = False
        if part and sum(part) != n_groups:
            plan.errors.append(f"{where}.num_groups_partition sums to {sum(part)}, but {batch} has {size} / {g} = "
                               f"{n_groups} groups")
            bad = True
        if part and len(part) != len(mcfg.tags):
            plan.errors.append(f"{where}.num_groups_partition has {len(part)} entries for {len(mcfg.tags)} tags")
            bad = True
        left_out = [] if bad else [t for t, n in groups_per_tag(mcfg.tags, part, n_groups).items() if n < 1]
        if left_out and part:
            plan.warnings.append(f"{where}.num_groups_partition gives {', '.join(map(repr, left_out))} no groups: "
                                 f"never {done}")
        elif left_out:
            plan.errors.append(f"{where}: {n_groups} group(s) per batch ({size_key} / group_size) split evenly over "
                               f"{len(mcfg.tags)} tags leaves {', '.join(map(repr, left_out))} with none: never "
                               f"{done}; raise {size_key} or list fewer tags")


def _check_val_seeds(cfg: Any, plan: Plan, train_groups: int) -> None:
    """Warn when a validation tag's env seeds fall in the range training draws from over the
    run (its first max_steps x groups-per-step groups): validation would replay training
    episodes (harmless only for an env whose episodes do not depend on the seed)."""
    train, val = cfg.train_env_manager, cfg.val_env_manager
    if val is None or not cfg.eval_steps or val.group_size < 1 or cfg.val_batch_size % val.group_size:
        return
    per_train = groups_per_tag(train.tags, train.num_groups_partition, train_groups)
    per_val = groups_per_tag(val.tags, val.num_groups_partition, cfg.val_batch_size // val.group_size)
    for tag, n_val in per_val.items():
        if tag not in per_train or n_val < 1:
            continue
        t0 = group_seed(cfg.seed, train.seed_offset, train.tags.index(tag), 0)
        t1 = t0 + cfg.max_steps * per_train[tag]
        v0 = group_seed(cfg.seed, val.seed_offset, val.tags.index(tag), 0)
        v1 = v0 + n_val
        if v0 < t1 and t0 < v1:
            plan.warnings.append(
                f"val_env_manager: validation of tag {tag!r} uses env seeds {v0}-{v1 - 1}, which training draws from too "
                f"({t0}-{t1 - 1} over {cfg.max_steps} steps): it would replay training episodes; set "
                f"val_env_manager.seed_offset past them (the shipped configs use 100000)")

def _batch_arithmetic(cfg: Any, plan: Plan) -> None:
    rows, errors = plan.batch, plan.errors
    rbs = cfg.rollout_batch_size
    rows.append(("rollout_batch_size", str(rbs)))
    if cfg.pipeline == "agentic":
        g = cfg.train_env_manager.group_size
        rows.append(("group_size (train_env_manager)", str(g)))
    elif cfg.pipeline == "rlvr":
        g = cfg.actor_infer.generating_args.num_return_sequences
        rows.append(("group_size (num_return_sequences)", str(g)))
    else:
        g = 1
    if g < 1 or rbs % g:
        errors.append(f"rollout_batch_size {rbs} is not a multiple of the group size {g}")
    elif cfg.pipeline == "agentic":
        groups = rbs // g
        rows.append(("groups per batch", str(groups)))
        _check_tag_groups(cfg, plan)
        _check_val_seeds(cfg, plan, groups)
    step_mode = cfg.pipeline == "agentic" and cfg.train_env_manager.mode == "step"
    for name in ("actor_train", "critic"):
        p = plan.roles.get(name)
        wc = getattr(cfg, name)
        if p is None or wc is None:
            continue
        ta = wc.training_args
        mini = p.dp_size * ta.per_device_train_batch_size * ta.gradient_accumulation_steps
        rows.append((f"{name}: dp x micro x grad_accum", f"{p.dp_size} x {ta.per_device_train_batch_size} x {ta.gradient_accumulation_steps} = {mini} per optimizer step"))
        if ta.per_device_train_batch_size < 1 or ta.gradient_accumulation_steps < 1:
            errors.append(f"{name}.training_args: per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
        elif rbs % mini:
            errors.append(f"{name}: rollout_batch_size {rbs} is not a multiple of dp {p.dp_size} x per_device_train_batch_size "
                          f"{ta.per_device_train_batch_size} x gradient_accumulation_steps {ta.gradient_accumulation_steps} = {mini}")
        if step_mode and mini >= 1:
            # one sample per turn: between rollout_batch_size and rollout_batch_size x max_turns samples
            turns = max((cfg.custom_envs[t].max_turns for t in cfg.train_env_manager.tags if t in cfg.custom_envs), default=1)
            rows.append((f"{name}: optimizer steps per pipeline step",
                         f"{max(1, rbs // mini)} to {-(-rbs * turns // mini)} (step mode: one sample per turn, "
                         f"up to {turns} turns) x ppo_epochs {cfg.algorithm.ppo_epochs}"))
        elif mini >= 1 and rbs % mini == 0:
            rows.append((f"{name}: optimizer steps per pipeline step", f"{rbs // mini} x ppo_epochs {cfg.algorithm.ppo_epochs}"))
        if step_mode and ta.lr_scheduler_type != "constant" and ta.num_training_steps is None:
            # the schedule length is derived as (optimizer steps per pipeline step) x max_steps,
            # which holds only when a batch has rollout_batch_size samples
            errors.append(f"{name}.training_args.lr_scheduler_type {ta.lr_scheduler_type}: in step mode a rollout batch holds "
                          "one sample per turn, so the optimizer steps per pipeline step vary and the schedule length "
                          "cannot be derived from max_steps; set training_args.num_training_steps (total optimizer "
                          "steps; `actor/optimizer_steps` in the metrics gives the count per step) or use a constant schedule")
    for name in ("actor_train", "reference", "critic"):
        p = plan.roles.get(name)
        if p is not None and rbs % p.dp_size:
            errors.append(f"{name}: rollout_batch_size {rbs} does not split evenly over its {p.dp_size} data-parallel ranks")


def make_plan(cfg: Any, pool: PoolInfo | None = None) -> Plan:
    """The placement and batch arithmetic of a PipelineConfig, with every problem listed."""
    pool = pool or read_pool_info(cfg.ray.num_cpus)
    roles, cpu_roles = _config_roles(cfg)
    plan = plan_roles(cfg.resources, roles, pool, cpu_roles)
    _batch_arithmetic(cfg, plan)
    return plan


def validate_plan(cfg: Any, pool: PoolInfo | None = None) -> Plan:
    """Run before launch: raises ConfigError naming every placement and batch problem."""
    plan = make_plan(cfg, pool)
    if plan.errors:
        raise ConfigError(plan.errors)
    for w in plan.warnings:
        logger.warning(w)
    return plan


def env_tool_rows(env_id: str, env_kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """``roll plan``'s rows for an env whose class describes its tools (``describe_tools``, as
    roll/Tools-v0 does); empty for other envs. Reads the config only: no env is built and no
    MCP server started."""
    try:
        import gymnasium
        from gymnasium.envs.registration import load_env_creator

        spec = gymnasium.spec(env_id)
        creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    except Exception:  # noqa: BLE001  (an unknown or broken env is a pre-flight problem, listed with the others)
        return []
    describe = getattr(creator, "describe_tools", None)
    return describe({**dict(spec.kwargs or {}), **env_kwargs}) if callable(describe) else []


def _print_tools_and_lora(console: Any, cfg: Any) -> None:
    from dataclasses import asdict, is_dataclass

    from rich.table import Table

    for tag, env in (getattr(cfg, "custom_envs", None) or {}).items():
        rows = env_tool_rows(env.env_id, dict(env.env_kwargs or {}))
        if rows:
            table = Table(title=f"tools of env {tag} ({env.env_id})")
            table.add_column("setting")
            table.add_column("value")
            for k, v in rows:
                table.add_row(k, v)
            console.print(table)
    for role in ("actor_train", "actor_infer", "reference", "critic"):
        lora = getattr(getattr(cfg, role, None), "lora", None)
        if lora:  # LoRA settings of a role's model, however the model args hold them
            fields = asdict(lora) if is_dataclass(lora) else dict(lora) if isinstance(lora, dict) else vars(lora)
            console.print(f"{role} LoRA: " + ", ".join(f"{k}={v}" for k, v in fields.items()), markup=False, highlight=False)


def print_plan(cfg: Any, pool: PoolInfo | None = None, problems: list[str] | tuple[str, ...] = ()) -> bool:
    """``roll plan``: print the placement table and batch arithmetic; False if the plan is
    invalid. ``problems`` (the pre-flight's) are listed first among the plan's own."""
    from rich.console import Console
    from rich.table import Table

    plan = make_plan(cfg, pool)
    plan.errors[:0] = list(problems)
    console = Console()
    console = Console(width=max(console.width, 150))  # a placement table folded into 80 columns is unreadable
    virtual = " (virtual CPU slots: ranks map onto this machine's CPUs)" if plan.virtual_slots else ""
    console.print(f"pool: {plan.pool_size} {plan.device} device slots from {plan.pool.source}{virtual}")
    table = Table(title="placement")
    for col in ("role", "workers", "devices / worker", "device slots (node)", "cpus / worker", "dp x tp x pp",
                "colocated with", "strategy"):
        table.add_column(col)
    for r in plan.roles.values():
        table.add_row(r.role, str(r.num_workers), str(r.num_gpus_per_worker) if r.on_device_slots else "cpu",
                      plan.slots_by_node(r.slots) if r.on_device_slots else "- (any node)", f"{r.num_cpus_per_worker:g}",
                      f"{r.dp_size} x {r.tp} x {r.pp}", ", ".join(r.colocated_with) or "-", r.strategy or "-")
    console.print(table)
    batch = Table(title="batch arithmetic")
    batch.add_column("quantity")
    batch.add_column("value")
    for k, v in plan.batch:
        batch.add_row(k, v)
    console.print(batch)
    _print_tools_and_lora(console, cfg)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    if plan.errors:
        console.print(f"[red]{len(plan.errors)} problem{'s' if len(plan.errors) != 1 else ''}:[/red]")
        for e in plan.errors:
            console.print(f"  - {e}", markup=False, highlight=False)
        return False
    console.print("[green]plan OK[/green]")
    return True
