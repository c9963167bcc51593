"""EnvironmentWorker: hosts many concurrent episodes (EnvManagers) on one event loop.

The same class runs in-process (the scheduler awaits its methods directly) or as a Ray
actor (``ray.remote(EnvironmentWorker)``, async actor, methods called with ``.remote``).
Each env instance has its own daemon thread, so a slow or hung env never blocks the other
episodes or the generation path; envs are pooled per tag and reused, except an env whose
call raised or timed out, which is discarded.

Per-sample mode calls ``run_episode``; the lockstep baseline calls ``start_episodes``,
``generate_turns``, ``step_envs`` and ``finish_episodes`` (each with every episode of the batch
this worker hosts) in turn. Weight updates go through ``suspend`` / ``set_policy_version`` / ``resume``.
"""
from __future__ import annotations

import asyncio
import importlib
import os
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.data.trajectory import Trajectory
from roll.rollout.chat import ChatRenderer
from roll.rollout.control import CallTimeout, RolloutControl, ThreadRunner
from roll.rollout.env_manager import EnvManager, EpisodeSpec
from roll.rollout.router import Router
from roll.utils.logging import get_logger

logger = get_logger(__name__)

ENVS_MODULE = "roll.envs"  # imported by name: roll/ never imports roll.envs statically


def make_env(env_id: str, env_kwargs: dict) -> Any:
    import gymnasium

    return gymnasium.make(env_id, **env_kwargs)


class EnvironmentWorker:
    """Runs episodes of the configured env tags against a Router over inference workers."""

    def __init__(
        self,
        env_configs: dict[str, EnvConfig],
        manager_config: EnvManagerConfig,
        generating_args: GeneratingArgs,
        tokenizer: Any,
        inference_workers: Sequence[Any],
        max_inflight_per_worker: int = 64,
        on_weight_update: str = "partial",
        max_staleness: int | None = None,
        imports: Sequence[str] = (),
        setup: Callable[[], Any] | None = None,
        name: str = "env-worker",
    ):
        try:
            importlib.import_module(ENVS_MODULE)
        except ModuleNotFoundError as e:
            if e.name != ENVS_MODULE:
                raise
        for module in imports:
            importlib.import_module(module)
        if setup is not None:
            setup()  # e.g. registers a user's env in a fresh Ray worker process
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.tokenizer = tokenizer
        self.env_configs = dict(env_configs)
        self.mcfg = manager_config
        self.gen = generating_args
        self.name = name
        self._renderers = {tag: ChatRenderer(tokenizer, cfg.system_prompt) for tag, cfg in self.env_configs.items()}
        self._inference_workers = list(inference_workers)
        self._max_inflight = max_inflight_per_worker
        self._on_update = on_weight_update
        self._max_staleness = max_staleness
        self._router: Router | None = None
        self._control: RolloutControl | None = None
        self._idle_envs: dict[str, list[tuple[Any, ThreadRunner]]] = {tag: [] for tag in self.env_configs}
        self._active: dict[str, EnvManager] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._failed_starts: dict[str, Trajectory] = {}
        # set once a tag's first env construction has returned (see _make_env)
        self._first_built: dict[str, asyncio.Event] = {}
        self.counters: Counter = Counter()

    # built on first use, inside the event loop that runs the episodes
    @property
    def router(self) -> Router:
        if self._router is None:
            self._router = Router(self._inference_workers, self._max_inflight)
        return self._router

    @property
    def control(self) -> RolloutControl:
        if self._control is None:
            self._control = RolloutControl(0, self._max_staleness, self._on_update)
        return self._control

    def num_active(self) -> int:
        return len(self._active)

    # ---- per-sample -------------------------------------------------------------------
    async def run_episode(self, spec: EpisodeSpec) -> list[Trajectory]:
        manager = await self._create(spec)
        if not isinstance(manager, EnvManager):
            return [manager]
        self._active[spec.episode_id] = manager
        task = asyncio.current_task()
        if task is not None:
            self._tasks[spec.episode_id] = task
        try:
            return await manager.run()
        except asyncio.CancelledError:
            # cancel() asked for it (a redundant or dropped group); report, do not raise,
            # so a Ray caller sees a normal return
            self.counters["episodes_cancelled"] += 1
            manager.failure, manager.done = "cancelled", True
            return manager.trajectories()
        finally:
            self._tasks.pop(spec.episode_id, None)
            self._release(manager)

    async def cancel(self, episode_ids: list[str]) -> None:
        """Stop these per-sample episodes; their run_episode returns failure ``cancelled``."""
        for eid in episode_ids:
            task = self._tasks.get(eid)
            if task is not None:
                task.cancel()

    # ---- lockstep ---------------------------------------------------------------------
    async def start_episode(self, spec: EpisodeSpec) -> bool:
        manager = await self._create(spec)
        if not isinstance(manager, EnvManager):
            self._failed_starts[spec.episode_id] = manager
            return False
        self._active[spec.episode_id] = manager
        await manager.reset()
        return not manager.done

    async def generate_turn(self, episode_id: str) -> bool:
        manager = self._active.get(episode_id)
        if manager is not None:
            await manager.generate_turn()
        return manager is not None and not manager.done

    async def step_env(self, episode_id: str) -> bool:
        manager = self._active.get(episode_id)
        if manager is not None:
            await manager.step_env()
        return manager is not None and not manager.done

    async def finish_episode(self, episode_id: str) -> list[Trajectory]:
        failed = self._failed_starts.pop(episode_id, None)
        if failed is not None:
            return [failed]
        manager = self._active[episode_id]
        self._release(manager)
        return manager.trajectories()

    # one call per host and phase for a lockstep batch: one Ray round trip instead of one per
    # episode (the episodes of the call still run concurrently here)
    async def start_episodes(self, specs: list[EpisodeSpec]) -> list[bool]:
        return list(await asyncio.gather(*(self.start_episode(s) for s in specs)))

    async def generate_turns(self, episode_ids: list[str]) -> list[bool]:
        return list(await asyncio.gather(*(self.generate_turn(e) for e in episode_ids)))

    async def step_envs(self, episode_ids: list[str]) -> list[bool]:
        return list(await asyncio.gather(*(self.step_env(e) for e in episode_ids)))

    async def finish_episodes(self, episode_ids: list[str]) -> list[list[Trajectory]]:
        return [await self.finish_episode(e) for e in episode_ids]

    async def prepare(self, counts: dict[str, int]) -> int:
        """Create idle envs ahead of time (``counts[tag]`` per tag), so the first batch does not
        pay for env construction. Returns the number of idle envs."""
        async def one(tag: str) -> None:
            cfg = self.env_configs[tag]
            runner = ThreadRunner(f"{self.name}-{tag}-env")
            try:
                env = await self._make_env(tag, runner)
            except Exception as e:  # the episode that needs it will report the failure
                runner.close()
                logger.warning("pre-creating env %s failed: %s", cfg.env_id, e)
                return
            self.counters["envs_created"] += 1
            self._idle_envs[tag].append((env, runner))

        await asyncio.gather(*(one(tag) for tag, n in counts.items() for _ in range(max(0, n - len(self._idle_envs[tag])))))
        return sum(len(v) for v in self._idle_envs.values())

    # ---- weight updates ---------------------------------------------------------------
    async def suspend(self) -> None:
        await self.control.suspend(self.router.abort)

    async def resume(self) -> None:
        self.control.resume()

    async def set_policy_version(self, version: int) -> None:
        self.control.version = int(version)

    async def set_max_staleness(self, max_staleness: int | None) -> None:
        self.control.max_staleness = max_staleness

    async def ping(self) -> dict[str, int]:
        """Liveness (the host pool waits on it for a restarted worker)."""
        return {"pid": os.getpid()}

    async def stats(self) -> dict[str, float]:
        out = {f"rollout/env_worker/{k}": float(v) for k, v in self.counters.items()}
        out.update(self.router.stats())
        return out

    async def shutdown(self) -> None:
        for envs in self._idle_envs.values():
            for env, runner in envs:
                runner.close()
                _close_quietly(env)
            envs.clear()

    # ---- env pool ---------------------------------------------------------------------
    async def _make_env(self, tag: str, runner: ThreadRunner) -> Any:
        """A new env of ``tag``, built on ``runner``'s thread within the tag's timeout.

        A tag's first construction runs alone; constructions asked for meanwhile wait for it
        (without their timeout running) and then go on side by side. Envs commonly load shared
        data once per process behind a cache (a catalog, a dataset, an index): dozens of first
        constructions at once would each load it, under one GIL, and time out together."""
        cfg = self.env_configs[tag]
        first = tag not in self._first_built
        if first:
            self._first_built[tag] = asyncio.Event()
        else:
            await self._first_built[tag].wait()
        try:
            return await runner.call(make_env, cfg.env_id, dict(cfg.env_kwargs), timeout=max(cfg.step_timeout_s, 60.0))
        finally:
            if first:
                self._first_built[tag].set()  # failed or not: the others try for themselves

    async def _create(self, spec: EpisodeSpec) -> EnvManager | Trajectory:
        """An EnvManager on a pooled or new env, or the failed trajectory of an env that could
        not be created: a constructor error or unknown id is permanent (it will recur), a
        constructor that timed out is not."""
        if spec.tag not in self.env_configs:
            raise KeyError(f"unknown env tag {spec.tag!r}; configured: {sorted(self.env_configs)}")
        cfg = self.env_configs[spec.tag]
        pool = self._idle_envs[spec.tag]
        if pool:
            env, runner = pool.pop()
        else:
            runner = ThreadRunner(f"{self.name}-{spec.tag}-env")
            try:
                env = await self._make_env(spec.tag, runner)
            except Exception as e:  # counted as an env failure of this episode
                runner.close()
                self.counters["env_create_failures"] += 1
                logger.warning("creating env %s for tag %s failed: %s", cfg.env_id, spec.tag, e)
                timed_out = isinstance(e, CallTimeout)
                return Trajectory(
                    failure="env_timeout" if timed_out else "env_error",
                    failure_detail=f"creating env {cfg.env_id!r} (tag {spec.tag!r}) failed: {type(e).__name__}: {e}",
                    failure_traceback="" if timed_out else "".join(traceback.format_exception(e)),
                    failure_permanent=not timed_out, env_tag=spec.tag, env_id=cfg.env_id,
                    group_id=spec.group_id, env_seed=spec.env_seed, episode_id=spec.episode_id)
            self.counters["envs_created"] += 1
        return EnvManager(spec, env, runner, cfg, self.mcfg, self.gen, self._renderers[spec.tag], self.router, self.control)

    def _release(self, manager: EnvManager) -> None:
        self._active.pop(manager.spec.episode_id, None)
        self.router.release(manager.spec.episode_id)
        if manager.env_broken or manager.runner.broken:
            manager.runner.close()
            self.counters["envs_discarded"] += 1
            if not manager.runner.broken:
                _close_quietly(manager.env)
        else:
            self._idle_envs[manager.spec.tag].append((manager.env, manager.runner))


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception as e:  # closing is best effort; a broken env is already discarded
        logger.debug("env.close failed: %s", e)


class EnvironmentWorkerActor(EnvironmentWorker):
    """The Ray actor form, created through :class:`roll.distributed.cluster.Cluster` (placement
    and CPUs from the resource pool). Its arguments arrive as one object put by the creator,
    which keeps it referenced for as long as the workers live: Ray restarts an actor from its
    creation arguments, and arguments that Ray itself moved to the object store (large ones) can
    be evicted and make a restart fail; an object the creator holds cannot. Small arguments (the
    usual case: configs, a tokenizer path, the inference workers' handles) come as bytes pickled
    by the creator instead: Ray keeps them inline in the creation task, so a restart always has
    them, and they hold no reference Ray can see (an actor handle is one), about which it logs an
    error for every restartable actor (ray-project/ray#53727). The handles inside stay valid:
    their actors belong to the driver for the whole run."""

    def __init__(self, role: str, rank: int, world_size: int, worker_config: Any, *,
                 creation_args: dict[str, Any] | bytes, model_path: str | None = None, seed: int = 0):
        if isinstance(creation_args, bytes):
            from ray import cloudpickle

            creation_args = cloudpickle.loads(creation_args)  # pickled by create_env_workers in the driver
        # model_path / seed are the pipeline's usual worker arguments: the tokenizer comes in
        # creation_args and seeds come with each episode
        super().__init__(name=f"{role}-{rank}", **creation_args)

    async def master_address(self) -> tuple[str, int]:
        return "", 0  # env workers form no process group

    async def setup(self, master_addr: str, master_port: int) -> None:
        """Everything is built in __init__ (again on a restart); the host pool replays settings."""


INLINE_ARGS_BYTES = 64 * 1024
"""Creation arguments pickled smaller than this go as bytes (below Ray's 100 KiB inline limit)."""

_CREATION_ARGS: dict[str, Any] = {}
"""Actor id -> the ObjectRef of its creation arguments (see EnvironmentWorkerActor)."""


def release_creation_args(handle: Any) -> None:
    """The worker is gone for good: its creation arguments may be freed."""
    _CREATION_ARGS.pop(getattr(getattr(handle, "_actor_id", None), "hex", lambda: "")(), None)


def env_worker_config(mcfg: Any) -> Any:
    """The Cluster settings of an env manager's workers: ``num_env_workers`` actors of
    ``num_cpus_per_env_worker`` CPUs, restarted by Ray up to ``max_worker_restarts`` times, each
    taking as many concurrent calls as episodes may run at once."""
    from roll.config.roles import WorkerConfig

    return WorkerConfig(world_size=mcfg.num_env_workers, num_cpus_per_worker=mcfg.num_cpus_per_env_worker,
                        max_concurrency=mcfg.max_concurrent_episodes, max_restarts=mcfg.max_worker_restarts)


def create_env_workers(role: str, mcfg: Any, make_cluster: Any = None, **worker_kwargs: Any) -> Any:
    """The env manager ``mcfg``'s EnvironmentWorker actors as a Cluster of ``role`` (async
    actors: many episodes each); ``cluster.workers`` are the scheduler's hosts.

    ``worker_kwargs`` are EnvironmentWorker's arguments; pass the tokenizer as a model path
    and inference workers as Ray actor handles. ``make_cluster`` (a pipeline's: placed by its
    resource pool, shut down with it) builds the Cluster; without it the workers get their CPUs
    without a pool and the caller shuts the cluster down. A crashed worker is restarted by Ray
    up to ``max_worker_restarts`` times; the scheduler's host pool replays its settings, and
    episodes that were running on it are retried."""
    import pickle

    import ray
    from ray import cloudpickle

    from roll.distributed.cluster import Cluster

    wc = env_worker_config(mcfg)
    try:
        args: Any = cloudpickle.dumps(worker_kwargs)
    except (pickle.PicklingError, TypeError, AttributeError):  # Ray's own serializer may still manage
        args = b""
    small = 0 < len(args) < INLINE_ARGS_BYTES
    if not small:
        args = ray.put(worker_kwargs)
    if make_cluster is not None:
        cluster = make_cluster(role, EnvironmentWorkerActor, wc, creation_args=args)
    else:
        cluster = Cluster(role, EnvironmentWorkerActor, wc, None, worker_kwargs={"creation_args": args}, collective=False)
    for h in cluster.workers:
        if not small:
            _CREATION_ARGS[h._actor_id.hex()] = args
    return cluster
