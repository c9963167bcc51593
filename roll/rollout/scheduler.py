"""RolloutScheduler: per-sample episode lifecycle, group queues, staleness, suspend/resume.

Usage from a pipeline (all methods are coroutines on one event loop; ``ThreadedScheduler``
wraps them in blocking calls for synchronous drivers and keeps rollouts running in the
background between calls)::

    sched = RolloutScheduler(env_configs, train_env_manager, rollout_config, hosts,
                             pad_token_id=tok.pad_token_id, seed=cfg.seed)
    for step in range(max_steps):
        out = await sched.get_batch(rollout_batch_size)   # RolloutBatch: .batch, .trajectories, .metrics
        ... train on out.batch ...                         # async ratio > 0: rollouts continue meanwhile
        await sched.suspend()                              # gate closed; in-flight requests aborted
        ... sync weights to inference (version step+1) ...
        await sched.set_policy_version(step + 1)
        await sched.resume()                               # suspended turns continue under new weights

Modes (``RolloutConfig.mode``):
- ``sync``: lockstep baseline. Every episode of the batch advances turn by turn together
  (all generate, then all step), as simple frameworks do.
- ``async``: each episode runs at its own pace (per-sample scheduling). With
  ``async_generation_ratio`` r > 0, up to ceil(r x groups per batch) extra groups are kept in
  production while the pipeline trains, and a sample is used only if its oldest turn is at
  most ceil(r) versions behind the current policy (older ready groups are dropped and
  counted; running episodes that fall behind stop early as ``stale`` and restart). With
  r = 0, nothing runs between get_batch calls, and sync and async give identical batches.

Weight updates (``RolloutConfig.on_weight_update``): ``partial`` aborts in-flight
generation, keeps the partial tokens and the env state, and resumes the same turn under the
new weights (token and turn versions record it); ``discard`` aborts and restarts episodes;
``wait`` lets in-flight requests finish under the old weights.

Groups: ``group_size`` episodes share an env seed. Both modes act on the answers of the group
state machine (roll/rollout/groups.py): rerun a slot, drop the group, or make get_batch raise
``RunFailedError``. Lost groups are replaced up to ``max_group_refills`` per batch; past that
the batch is returned short (``rollout/short_batch``). All of it is counted and logged.
"""
from __future__ import annotations

import asyncio
import functools
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roll.config.rollout import EnvConfig, EnvManagerConfig, RolloutConfig, group_seed, groups_per_tag
from roll.data.batch import Batch
from roll.data.trajectory import FAILURE_TYPES, Trajectory, trajectories_to_batch
from roll.errors import RollError, RunFailedError
from roll.registry import FILTERS
from roll.rollout.env_manager import EpisodeSpec
from roll.rollout.failures import EpisodeVerdict, ErrorLog, one_line
from roll.rollout.groups import EpisodeGroup
from roll.rollout.hosts import HostPool
from roll.rollout.metrics import counter_metrics, episode_metrics
from roll.utils.logging import get_logger

logger = get_logger(__name__)


@dataclass
class RolloutBatch:
    """What get_batch returns."""

    batch: Batch | None
    """Collated tensors (None when no group could be filled)."""
    trajectories: list[Trajectory]
    metrics: dict[str, float]
    groups: list[str] = field(default_factory=list)
    failure_causes: Counter = field(default_factory=Counter)
    """``kind: message`` -> failed episodes since the previous batch (retries included)."""


_COUNTERS = {EpisodeVerdict.RESTART: "episode_restarts", EpisodeVerdict.RETRY: "episode_retries",
             EpisodeVerdict.DROP: "groups_dropped", EpisodeVerdict.FILTERED: "groups_filtered",
             EpisodeVerdict.PERMANENT: "failures/permanent"}
"""What each group answer counts (besides the failure itself)."""


def manager_envs(custom_envs: dict[str, EnvConfig], manager_config: EnvManagerConfig) -> dict[str, EnvConfig]:
    """The env configs of an env manager's tags, in its order (all of ``custom_envs`` when it names none)."""
    tags = list(manager_config.tags) or list(custom_envs)
    missing = [t for t in tags if t not in custom_envs]
    if missing:
        raise ValueError(f"env manager tags {missing} are not in custom_envs ({sorted(custom_envs)})")
    return {t: custom_envs[t] for t in tags}


class RolloutScheduler:
    """Produces training (or validation) batches of grouped episodes."""

    def __init__(
        self,
        env_configs: dict[str, EnvConfig],
        manager_config: EnvManagerConfig,
        rollout_config: RolloutConfig,
        hosts: Sequence[Any],
        pad_token_id: int,
        seed: int = 0,
        validation: bool = False,
        error_log: ErrorLog | None = None,
    ):
        self.env_configs = manager_envs(env_configs, manager_config)
        self.tags = list(self.env_configs)
        self.mcfg = manager_config
        self.rcfg = rollout_config
        self.pool = HostPool(hosts, name="validation" if validation else "training",
                             max_restarts=manager_config.max_worker_restarts)
        self.pad_token_id = pad_token_id
        self.seed = seed
        self.validation = validation
        if manager_config.num_groups_partition and len(manager_config.num_groups_partition) != len(self.tags):
            raise ValueError(f"num_groups_partition {manager_config.num_groups_partition} needs one entry per tag {self.tags}")
        self.mode = "async" if validation else rollout_config.mode
        self.ratio = 0.0 if (validation or self.mode == "sync") else float(rollout_config.async_generation_ratio)
        if self.ratio < 0:
            raise ValueError(f"async_generation_ratio must be >= 0, got {self.ratio}")
        self.max_staleness = math.ceil(self.ratio)
        self.group_filter = (functools.partial(FILTERS.get(manager_config.group_filter), **manager_config.group_filter_args)
                             if manager_config.group_filter and not validation else None)
        self.version = 0
        self._suspended = False
        self._next_group = Counter()
        self._episode_counter = 0
        self._groups: dict[str, EpisodeGroup] = {}
        self._ready: dict[str, deque] = {t: deque() for t in self.tags}
        self._demand: dict[str, int] = {}
        self._ahead: dict[str, int] = {t: 0 for t in self.tags}
        self._tasks: dict[str, asyncio.Task] = {}
        self._episode_host: dict[str, int] = {}
        # asyncio primitives bind to the loop that first waits on them (the scheduler's loop)
        self._sem = asyncio.Semaphore(max(1, manager_config.max_concurrent_episodes))
        self._changed = asyncio.Event()
        self._losses = 0
        self._error: BaseException | None = None
        self.counters: Counter = Counter()
        self.failures_by_tag: Counter = Counter()
        self.failure_causes: Counter = Counter()  # "kind: message" -> count, since the last batch
        self.error_log = error_log
        self._hosts_configured = False
        self._success_checked: set[str] = set()

    # ================================================================ public API
    async def get_batch(self, n: int) -> RolloutBatch:
        """``n`` episodes (``n / group_size`` groups split over tags) within
        ``get_batch_timeout_s``; step mode returns one sample per turn of those episodes."""
        await self._setup()
        t0 = time.monotonic()
        demand = self._split_groups(n)
        if self.validation:
            self._next_group = Counter()  # the same seeds every validation round
        self._losses = 0
        # both modes fill ``taken`` per tag up to the demand (less when refills run out)
        taken: dict[str, list[EpisodeGroup]] = {t: [] for t in self.tags}
        produce = self._lockstep_batch if self.mode == "sync" else self._per_sample_batch
        await produce(demand, taken, t0 + self.rcfg.get_batch_timeout_s)
        if any(len(taken[t]) < demand[t] for t in self.tags):
            self.counters["short_batch"] += 1
        return self._assemble([g for t in self.tags for g in taken[t]], demand, time.monotonic() - t0)

    async def prepare(self, n: int) -> None:
        """Pre-create the envs a batch of ``n`` episodes (plus redundancy and ahead work) needs,
        spread over the environment workers, so the first get_batch does not pay for env construction."""
        await self._setup()
        demand = self._split_groups(n)
        live = self.pool.live()
        factor = (1.0 + self.mcfg.redundancy) * (1.0 + self.ratio)
        per_host = {t: math.ceil(k * self.mcfg.group_size * factor / max(len(live), 1)) for t, k in demand.items()}
        await asyncio.gather(*(self.pool.call(i, "prepare", per_host) for i in live))

    async def suspend(self) -> None:
        """Before a weight update: no new generation; in-flight requests per on_weight_update."""
        await self._setup()
        self._suspended = True
        await self.pool.broadcast("suspend", remember="pause")

    async def set_policy_version(self, version: int) -> None:
        """The inference workers now serve ``version``; new requests (and resumed turns) record it."""
        await self._setup()
        self.version = int(version)
        await self.pool.broadcast("set_policy_version", self.version, remember="version")

    async def resume(self) -> None:
        """After a weight update: suspended turns continue, new episodes start."""
        await self._setup()
        self._suspended = False
        await self.pool.broadcast("resume", remember="pause")
        self._fill()

    def state_dict(self) -> dict[str, Any]:
        """Position of the env-seed streams, for resuming a run: the next group index per
        tag. Groups produced ahead of time (async ratio > 0) are not saved; a resumed run
        starts them again from the same seeds."""
        nxt = {t: self._next_group[t] for t in self.tags}
        for g in self._groups.values():  # started but not yet handed out: run them again
            nxt[g.tag] = min(nxt[g.tag], g.index)
        return {"next_group": nxt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._next_group = Counter({t: int(i) for t, i in state["next_group"].items()})

    async def shutdown(self) -> None:
        """Cancel every running episode and close idle envs."""
        for group in list(self._groups.values()):
            await self._cancel_group(group)
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.pool.broadcast("shutdown", tolerate=True)
        await self.pool.close()

    # ================================================================ setup
    async def _setup(self) -> None:
        if not self._hosts_configured:
            self._hosts_configured = True
            stale = self.max_staleness if self.mode == "async" else None
            await self.pool.broadcast("set_max_staleness", stale, remember="staleness")

    def _split_groups(self, n: int) -> dict[str, int]:
        g = self.mcfg.group_size
        if n <= 0 or n % g:
            raise ValueError(f"batch size {n} must be a positive multiple of group_size {g}")
        n_groups = n // g
        part = list(self.mcfg.num_groups_partition)
        if part and sum(part) != n_groups:
            raise ValueError(f"num_groups_partition {part} sums to {sum(part)} groups but the batch needs {n_groups} ({n} / group_size {g})")
        return groups_per_tag(self.tags, part, n_groups)

    # ================================================================ groups and episodes
    def _new_group(self, tag: str) -> EpisodeGroup:
        idx = self._next_group[tag]
        self._next_group[tag] += 1
        seed = group_seed(self.seed, self.mcfg.seed_offset, self.tags.index(tag), idx)
        group = EpisodeGroup(tag, idx, seed, self.mcfg.group_size, self.mcfg.max_episode_retries, self.group_filter)
        self._groups[group.group_id] = group
        return group

    def _spec(self, group: EpisodeGroup, slot: int) -> EpisodeSpec:
        attempt = group.attempts.get(slot, 0)
        self._episode_counter += 1
        eid = f"{group.group_id}/{slot}/a{attempt}#{self._episode_counter}"
        return EpisodeSpec(eid, group.tag, group.group_id, group.env_seed, slot, attempt)

    def _launch(self, group: EpisodeGroup, slot: int) -> None:
        spec = self._spec(group, slot)
        group.running[slot] = spec.episode_id
        self._tasks[spec.episode_id] = asyncio.create_task(self._run_one(group, slot, spec))

    async def _run_one(self, group: EpisodeGroup, slot: int, spec: EpisodeSpec) -> None:
        host = None
        try:
            async with self._sem:
                if group.dropped:
                    return
                host = await self.pool.acquire()
                self._episode_host[spec.episode_id] = host
                ok, trajs = await self.pool.call(host, "run_episode", spec)
                if not ok:  # the host died (it is restarting): a transient failure, retried
                    trajs = _worker_died(spec, f"environment worker {host} died: {trajs}")
            self._on_episode(group, slot, spec, trajs)
        except Exception as e:  # a bug, not an episode outcome: get_batch re-raises it
            logger.exception("episode %s crashed the scheduler", spec.episode_id)
            self._error = e
            self._changed.set()
        finally:
            if host is not None:
                self.pool.release(host)
            self._episode_host.pop(spec.episode_id, None)
            self._tasks.pop(spec.episode_id, None)

    def _on_episode(self, group: EpisodeGroup, slot: int, spec: EpisodeSpec, trajs: list[Trajectory]) -> None:
        if group.running.get(slot) == spec.episode_id:
            del group.running[slot]
        if isinstance(self._error, RollError):
            return  # after a permanent failure nothing is retried or refilled: get_batch raises
        answer = self._settle(group, slot, spec, trajs)
        if answer == EpisodeVerdict.IGNORED:
            return
        if answer in EpisodeVerdict.RERUN:
            self._launch(group, slot)
        elif answer in (EpisodeVerdict.DROP, EpisodeVerdict.PERMANENT) and group.running:
            asyncio.ensure_future(self._cancel_group(group))
        elif answer == EpisodeVerdict.READY:
            self._ready[group.tag].append(group)
        self._changed.set()  # after PERMANENT: get_batch raises the recorded RunFailedError
        if answer != EpisodeVerdict.PERMANENT:
            self._fill()

    def _settle(self, group: EpisodeGroup, slot: int, spec: EpisodeSpec, trajs: list[Trajectory]) -> str:
        """One finished episode slot, in both modes: the group answers, the answer is counted, a
        lost group uses one refill, a permanent failure is kept for get_batch to raise."""
        answer = group.record(slot, trajs)
        if answer == EpisodeVerdict.IGNORED:
            return answer
        failed = next((t for t in trajs if t.failure is not None), None)
        if failed is None:
            self.counters["episodes_finished"] += 1
        else:
            self._count_failure(spec.tag, failed.failure, trajs)
        if answer in _COUNTERS:
            self.counters[_COUNTERS[answer]] += 1
        if answer in EpisodeVerdict.LOST:
            self._losses += 1
        if answer in EpisodeVerdict.LOST or answer == EpisodeVerdict.READY:
            self._groups.pop(group.group_id, None)
        if answer == EpisodeVerdict.PERMANENT and self._error is None:
            self._error = self._permanent_error(spec, failed)
        return answer

    def _permanent_error(self, spec: EpisodeSpec, failed: Trajectory) -> RunFailedError:
        env_id = self.env_configs[spec.tag].env_id
        why = ("" if failed.failure_permanent  # else the same error twice: permanent by repetition
               else f" (the same error at turn {failed.num_turns + 1} twice from env seed {spec.env_seed})")
        where = f"; traceback in {self.error_log}" if self.error_log is not None and failed.failure_traceback else ""
        if self.error_log is None and failed.failure_traceback:
            logger.error("env tag %s (%s) failed permanently:\n%s", spec.tag, env_id, failed.failure_traceback)
        return RunFailedError(f"env tag {spec.tag!r} (env id {env_id!r}) fails permanently: "
                              f"{one_line(failed.failure_detail)}{why}{where}")

    def _count_failure(self, tag: str, failure: str, trajs: list[Trajectory]) -> None:
        if failure in FAILURE_TYPES:
            t = trajs[0]
            self.counters[f"failures/{failure}"] += 1
            self.failures_by_tag[(tag, failure)] += 1
            self.failure_causes[f"{failure}: {t.failure_detail}"] += 1
            logger.warning("episode %s failed (%s): %s", t.episode_id, failure, t.failure_detail)
            if self.error_log is not None:
                self.error_log.record(f"episode {t.episode_id} tag={tag} env={self.env_configs[tag].env_id} "
                                      f"seed={t.env_seed} turn={t.num_turns + 1}", failure, t.failure_detail,
                                      t.failure_traceback)
        else:
            self.counters[f"restarts/{failure}"] += 1  # stale / discarded: restarted, not failed

    async def _cancel_group(self, group: EpisodeGroup) -> None:
        group.drop()
        self._groups.pop(group.group_id, None)
        by_host: dict[int, list[str]] = {}
        for eid in group.running.values():
            if eid in self._episode_host:
                by_host.setdefault(self._episode_host[eid], []).append(eid)
            elif eid in self._tasks:
                self._tasks[eid].cancel()  # still waiting for a concurrency slot
        await asyncio.gather(*(self.pool.call(h, "cancel", ids) for h, ids in by_host.items()))

    def _raise_recorded_error(self) -> None:
        """A permanent failure (RunFailedError) or a scheduler bug recorded by an episode."""
        error, self._error = self._error, None
        if isinstance(error, RollError):
            raise error
        if error is not None:
            raise RuntimeError(f"rollout failed: {error}") from error

    def _open_groups(self, tag: str) -> int:
        return sum(1 for g in self._groups.values() if g.tag == tag)

    def _fill(self) -> None:
        """Launch groups until each tag has its demand (plus redundancy) and ahead share in flight."""
        if self._suspended or self.mode == "sync" or self._losses > self.mcfg.max_group_refills:
            return
        for tag in self.tags:
            demand = self._demand.get(tag, 0)
            # lost groups leave self._groups, so they are replaced here (refills) within the budget
            want = math.ceil(demand * (1.0 + self.mcfg.redundancy)) + self._ahead[tag]
            for _ in range(want - len(self._ready[tag]) - self._open_groups(tag)):
                group = self._new_group(tag)
                for slot in range(group.size):
                    self._launch(group, slot)

    def _take_ready(self, tag: str, k: int) -> list[EpisodeGroup]:
        out = []
        q = self._ready[tag]
        while q and len(out) < k:
            group = q.popleft()
            if 0 <= group.min_version() < self.version - self.max_staleness:
                self.counters["stale_groups_dropped"] += 1
                self._losses += 1
                continue
            out.append(group)
        return out

    # ================================================================ async (per-sample)
    async def _per_sample_batch(self, demand: dict[str, int], taken: dict[str, list[EpisodeGroup]], deadline: float) -> None:
        self._ahead = {t: math.ceil(self.ratio * k) for t, k in demand.items()}
        try:
            while True:
                self._raise_recorded_error()
                for tag in self.tags:
                    taken[tag] += self._take_ready(tag, demand[tag] - len(taken[tag]))
                    self._demand[tag] = demand[tag] - len(taken[tag])
                if all(len(taken[t]) >= demand[t] for t in self.tags):
                    break
                self._fill()
                if all(self._open_groups(t) == 0 and not self._ready[t] for t in self.tags if len(taken[t]) < demand[t]):
                    if self._suspended:
                        raise RuntimeError("get_batch called while the scheduler is suspended; call resume() first")
                    logger.error("group refills exhausted (%d losses): returning a short batch", self._losses)
                    break
                self._changed.clear()
                try:  # a deadline already past times out at once
                    await asyncio.wait_for(self._changed.wait(), timeout=deadline - time.monotonic())
                except TimeoutError:
                    raise TimeoutError(self._timeout_message(demand, taken)) from None
        finally:
            self._demand = {}
        if self.ratio == 0:
            # nothing may run between batches at ratio 0: redundant groups are cancelled
            leftovers = list(self._groups.values())
            if discarded := len(leftovers) + sum(len(q) for q in self._ready.values()):
                self.counters["redundant_groups_discarded"] += discarded
            for group in leftovers:
                await self._cancel_group(group)
            for tag in self.tags:
                self._ready[tag].clear()
        else:
            self._fill()  # keep producing ahead while the pipeline trains

    def _timeout_message(self, demand: dict[str, int], taken: dict[str, list]) -> str:
        have = {t: len(taken[t]) for t in self.tags}
        return (f"get_batch timed out: groups per tag {have} of {demand}; {len(self._tasks)} episodes running, "
                f"failures so far {dict(self.counters)}")

    # ================================================================ sync (lockstep)
    async def _lockstep_batch(self, demand: dict[str, int], taken: dict[str, list[EpisodeGroup]], deadline: float) -> None:
        while True:
            for tag in self.tags:  # the demand at first, then lost groups within the refill budget
                if self._losses <= self.mcfg.max_group_refills:
                    for _ in range(demand[tag] - len(taken[tag]) - self._open_groups(tag)):
                        self._new_group(tag)
            # every open group's unfinished slots: new groups, reruns (retry, restart)
            pending = [(g, s) for g in self._groups.values() for s in range(g.size) if s not in g.done]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(self._timeout_message(demand, taken))
            results = await asyncio.wait_for(self._lockstep_round(pending), timeout=max(deadline - time.monotonic(), 0.001))
            for group, slot, spec, trajs in results:
                if self._settle(group, slot, spec, trajs) == EpisodeVerdict.READY:
                    taken[group.tag].append(group)
                if self._error is not None:
                    break
            self._raise_recorded_error()

    async def _lockstep_round(self, items: list[tuple[EpisodeGroup, int]]) -> list[tuple[EpisodeGroup, int, EpisodeSpec, list[Trajectory]]]:
        """All episodes advance together: reset all, then (generate all, step all) per turn."""
        specs = []
        for group, slot in items:
            host = await self.pool.acquire()
            # (host, its incarnation): an episode never continues on a restarted process
            specs.append((group, slot, self._spec(group, slot), (host, self.pool.epoch[host])))
        active = await self._lockstep_each(specs, "start_episodes", lambda s: s)
        live = [x for x, ok in zip(specs, active) if ok]
        while live:
            ok = await self._lockstep_each(live, "generate_turns", lambda s: s.episode_id)
            ok2 = await self._lockstep_each(live, "step_envs", lambda s: s.episode_id)
            live = [x for x, a, b in zip(live, ok, ok2) if a and b]
        out = []
        finished = await self._lockstep_each(specs, "finish_episodes", lambda s: s.episode_id)
        for (group, slot, spec, host), trajs in zip(specs, finished):
            if trajs is False:  # the worker died: the episode is an infrastructure failure
                trajs = _worker_died(spec, f"environment worker {host[0]} died during the episode")
            self.pool.release(host[0])
            out.append((group, slot, spec, trajs))
        return out

    async def _lockstep_each(self, items: list[tuple[EpisodeGroup, int, EpisodeSpec, tuple[int, int]]], method: str,
                             arg: Callable[[EpisodeSpec], Any]) -> list[Any]:
        """``method`` for every item's episode, one call per host with all of its items (a Ray
        round trip per host and phase, not per episode); False for an item whose host died."""
        by_host: dict[tuple[int, int], list[int]] = {}
        for k, (_, _, spec, host) in enumerate(items):
            by_host.setdefault(host, []).append(k)
        out: list[Any] = [False] * len(items)

        async def one(host: tuple[int, int], ks: list[int]) -> None:
            results = await self._lockstep_call(host, method, [arg(items[k][2]) for k in ks])
            if results is not False:
                for k, r in zip(ks, results, strict=True):
                    out[k] = r

        await asyncio.gather(*(one(h, ks) for h, ks in by_host.items()))
        return out

    async def _lockstep_call(self, host: tuple[int, int], method: str, *args: Any) -> Any:
        """The call's result, or False when the episode's host died (now or earlier)."""
        ok, result = await self.pool.call(host[0], method, *args, epoch=host[1])
        return result if ok else False

    # ================================================================ batch
    def _check_success_reported(self, trajs: list[Trajectory]) -> None:
        """Once per tag, on its first finished episodes: warn where none of them had ``success``
        in any step's info. ``env/<tag>/success`` (and the console's and validation's success) then
        reads 0 whatever the episodes did, which looks like a policy that never succeeds."""
        flags: dict[str, dict[str, float]] = {}  # tag -> episode -> reported (step mode: a sample per turn)
        for t in trajs:
            if t.env_tag not in self._success_checked:
                flags.setdefault(t.env_tag, {})[t.episode_id] = t.metrics.get("success_reported", 1.0)
        for tag, reported in flags.items():
            self._success_checked.add(tag)
            if not any(reported.values()):
                logger.warning("env %s (%s): none of its %d episodes reported info['success'], so its success "
                               "rate reads 0 whatever the episodes did; set info['success'] (a bool) in step(), at "
                               "least on the step that ends an episode (docs/adding_an_env.md)",
                               tag, self.env_configs[tag].env_id, len(reported))

    def _assemble(self, groups: list[EpisodeGroup], demand: dict[str, int], elapsed: float) -> RolloutBatch:
        groups = sorted(groups, key=lambda g: (self.tags.index(g.tag), g.index))
        trajs = [t for g in groups for t in g.trajectories()]
        self._check_success_reported(trajs)
        failed = sum(v for k, v in self.counters.items() if k.startswith("failures/") and k != "failures/permanent")
        attempted = failed + self.counters["episodes_finished"]
        metrics = {**episode_metrics(trajs, self.version), **counter_metrics(self.counters, self.failures_by_tag),
                   **self.pool.metrics(),
                   "rollout/episodes_failed": float(failed),
                   "rollout/failed_episode_share": failed / attempted if attempted else 0.0,
                   "timing/rollout/get_batch_s": elapsed,
                   "rollout/throughput/trajectories_per_s": len({t.episode_id for t in trajs}) / max(elapsed, 1e-9),
                   "rollout/throughput/tokens_per_s": sum(t.num_model_tokens for t in trajs) / max(elapsed, 1e-9),
                   "rollout/groups": float(len(groups)),
                   "rollout/groups_requested": float(sum(demand.values())),
                   "rollout/policy_version": float(self.version)}
        causes = self.failure_causes  # since the previous batch: the counts start again
        self.counters, self.failures_by_tag, self.failure_causes = Counter(), Counter(), Counter()
        batch = trajectories_to_batch(trajs, self.pad_token_id) if trajs else None
        if batch is not None:
            batch.meta["metrics"] = dict(metrics)
            batch.meta["policy_version"] = self.version
        return RolloutBatch(batch, trajs, metrics, [g.group_id for g in groups], causes)


def _worker_died(spec: EpisodeSpec, detail: str) -> list[Trajectory]:
    """The outcome of an episode whose environment worker died (it is restarting): a transient
    infrastructure failure, retried like any other."""
    return [Trajectory(failure="worker_died", failure_detail=detail, env_tag=spec.tag, group_id=spec.group_id,
                       env_seed=spec.env_seed, episode_id=spec.episode_id)]
