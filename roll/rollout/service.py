"""Building a RolloutScheduler from a PipelineConfig, and a blocking facade for pipelines.

``ThreadedScheduler`` runs a RolloutScheduler on its own event-loop thread: a synchronous
pipeline calls ``get_batch`` (blocking) and, while it trains, the loop keeps running the
episodes that ``async_generation_ratio`` allows ahead. Weight updates::

    with sched.weight_update(version=step + 1):   # suspend ... set_policy_version, resume
        model_update_group.update(version=step + 1)

Note on the in-flight bound: every environment worker has its own Router, so
``max_inflight_per_worker`` bounds the requests one environment worker has outstanding on
one inference worker; the bound an engine sees is that times ``num_env_workers``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from roll.rollout.failures import ENV_ERRORS_LOG, ErrorLog
from roll.rollout.scheduler import RolloutBatch, RolloutScheduler, manager_envs
from roll.utils.loop import LoopThread
from roll.workers.environment import EnvironmentWorker, create_env_workers


def build_rollout_scheduler(
    config: Any,
    inference_workers: Sequence[Any],
    tokenizer: Any,
    *,
    validation: bool = False,
    use_ray: bool = True,
    role: str | None = None,
    make_cluster: Callable[..., Any] | None = None,
) -> RolloutScheduler:
    """The train (or validation) scheduler of a PipelineConfig.

    ``inference_workers``: Ray actor handles of the inference role (or local strategy
    objects with ``use_ray=False``); ``tokenizer``: a model path (needed with Ray: each env
    worker loads it) or a tokenizer object (in-process). With Ray the env workers are a
    Cluster of ``role`` (default ``env.train`` / ``env.val``, the planner's names) built by
    ``make_cluster`` (a pipeline's: placed by its resource pool, shut down with it). Env
    failures are logged to ``<output_dir>/env_errors.log``."""
    mcfg = config.val_env_manager if validation else config.train_env_manager
    if mcfg is None:
        raise ValueError("validation needs val_env_manager in the config")
    envs = manager_envs(config.custom_envs, mcfg)
    kwargs = dict(
        env_configs=envs, manager_config=mcfg, generating_args=config.actor_infer.generating_args,
        tokenizer=tokenizer, inference_workers=list(inference_workers),
        max_inflight_per_worker=config.rollout.max_inflight_per_worker,
        on_weight_update=config.rollout.on_weight_update, imports=list(config.imports),
    )
    if use_ray:
        if make_cluster is None:
            raise ValueError("build_rollout_scheduler: Ray env workers need make_cluster (the pipeline's, which "
                             "places them in its resource pool and shuts them down)")
        role = role or ("env.val" if validation else "env.train")
        hosts = list(create_env_workers(role, mcfg, make_cluster, **kwargs).workers)
    else:
        hosts = [EnvironmentWorker(**kwargs)]
    tok = tokenizer
    if isinstance(tok, str):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    error_log = ErrorLog(Path(config.output_dir).resolve() / ENV_ERRORS_LOG) if getattr(config, "output_dir", None) else None
    return RolloutScheduler(envs, mcfg, config.rollout, hosts, pad_token_id=int(pad), seed=config.seed,
                            validation=validation, error_log=error_log)


class ThreadedScheduler:
    """Blocking calls into a RolloutScheduler that lives on a background event loop."""

    def __init__(self, make_scheduler: Callable[[], RolloutScheduler]):
        self._loop = LoopThread("rollout-loop")

        async def make() -> RolloutScheduler:  # asyncio objects of the scheduler belong to the loop that uses them
            return make_scheduler()

        self.scheduler: RolloutScheduler = self._loop.run(make())

    def get_batch(self, n: int, on_wait: Callable[[], None] | None = None) -> RolloutBatch:
        """A batch of ``n`` episodes; ``on_wait()`` runs on the calling thread every 5 s while it
        is produced (e.g. recovering crashed workers)."""
        if on_wait is None:
            return self._loop.run(self.scheduler.get_batch(n))
        return self._loop.run_watching(self.scheduler.get_batch(n), on_wait, 5.0)

    def set_policy_version(self, version: int) -> None:
        self._loop.run(self.scheduler.set_policy_version(version))

    @contextlib.contextmanager
    def weight_update(self, version: int) -> Iterator[None]:
        """Suspend rollouts around a weight sync; on success the new version is recorded."""
        self._loop.run(self.scheduler.suspend())
        try:
            yield
            self.set_policy_version(version)
        finally:
            self._loop.run(self.scheduler.resume())

    def close(self) -> None:
        if self._loop.running:
            self._loop.run(self.scheduler.shutdown())
        self._loop.close()
