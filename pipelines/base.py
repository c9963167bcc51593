"""What every pipeline shares: run directory, seeding, Ray, tracker, checkpoints, an event
loop thread for asynchronous rollouts, and the step loop with progress display.

A concrete pipeline implements ``setup()``, ``train_step(step) -> metrics``, and the
checkpoint hooks ``save_state(dir)`` / ``load_state(dir, state)``; everything else is here.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import torch
import yaml

from roll.config.schema import PipelineConfig
from roll.config.validate import ConfigError, to_dict
from roll.errors import CheckpointError
from roll.tracking import create_tracker, resolve_trackers
from roll.utils.checkpoint import CheckpointManager, set_rng_state, verify_checkpoint
from roll.utils.console import (VERBOSE_ENV, RunConsole, copy_worker_logs, is_verbose, link_worker_logs,
                                own_worker_logs, run_done_line)
from roll.utils.logging import get_logger

logger = get_logger("roll.pipelines")


def seed_everything(seed: int, deterministic: bool = False) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


LOCAL_RAY_SYSTEM_CONFIG = {"enable_worker_prestart": False, "prestart_worker_first_driver": False}
"""Ray settings of a cluster this driver starts. Every roll worker is an actor with its own
runtime_env (role and rank variables), so the idle task workers Ray would start ahead for the
driver's job are never used: each costs a Python process (~45 MB, a second of CPU at start)."""


LEAN_NODE_SKIPS = ("monitor", "log_monitor")
"""Helper processes a local cluster of this driver goes without: the autoscaler monitor (a
fixed local node has nothing to scale) and, without ``--verbose``, the log monitor (it only
carries worker output to the driver's console; roll links the worker log files instead). Each
is a Python process of about 45-50 MB PSS and a second of CPU at start. The API server
(dashboard head) stays: the dashboard agent, which the raylet needs, polls for its address
and logs an error every second without it."""


@contextmanager
def _lean_local_node(log_monitor: bool) -> Iterator[None]:
    """While ``ray.init`` starts a local node: its ``Node`` without the helper processes of
    :data:`LEAN_NODE_SKIPS`. Ray has no public switch for them (``ray start`` has
    ``--no-monitor`` and ``--include-log-monitor``, ``ray.init`` none); a Ray without the
    methods this overrides starts its node unchanged."""
    from ray._private import node as ray_node

    original = ray_node.Node
    skip = [name for name in LEAN_NODE_SKIPS if not (log_monitor and name == "log_monitor")]
    if not all(callable(getattr(original, f"start_{name}", None)) for name in skip):
        yield
        return

    def skipped(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    lean = type("LeanLocalNode", (original,), {f"start_{name}": skipped for name in skip})
    ray_node.Node = lean
    try:
        yield
    finally:
        ray_node.Node = original


def lower_thread_priority(niceness: int = 10) -> None:
    """Lower the CPU priority of the calling thread (Linux, where a thread has its own nice
    value; elsewhere a no-op). For driver work that overlaps the local cluster's start: on an
    idle core it runs as fast as before, on a busy machine it yields to Ray's processes, whose
    node has 30 s to come up (a limit Ray hard-codes)."""
    import sys
    import threading

    if not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(niceness, os.getpriority(os.PRIO_PROCESS, tid)))
    except OSError as e:  # a lower priority is an optimisation; without it the work still runs
        logger.debug("could not lower the priority of thread %s: %s", threading.current_thread().name, e)


def init_ray(cfg: PipelineConfig) -> None:
    """Start or join the Ray cluster named by ``cfg.ray`` (idempotent).

    Workers' output reaches this console only with ``roll run --verbose``; a local cluster's
    worker logs are linked (and at the end copied) under ``<output_dir>/logs`` instead, and a
    worker's error still reaches the driver as the exception of the call that failed."""
    import logging

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        return
    # OMP_WAIT_POLICY: a worker's idle OpenMP threads sleep instead of spinning. Several torch
    # processes share the CPUs (trainer, inference, driver); spinning threads of one take the
    # cores the others need (on a busy 2-core machine, 5-20x the CPU per generation batch).
    env_vars = {"RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE"}
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ROLL_CACHE_DIR", "RAY_AUTH_MODE", "ROLL_LOG_LEVEL",
                "OMP_WAIT_POLICY", VERBOSE_ENV):
        if key in os.environ:
            env_vars[key] = os.environ[key]
    runtime_env = dict(cfg.ray.runtime_env)
    runtime_env["env_vars"] = {**env_vars, **runtime_env.get("env_vars", {})}
    verbose = is_verbose()
    kwargs: dict[str, Any] = dict(namespace=cfg.ray.namespace, runtime_env=runtime_env, log_to_driver=verbose,
                                  logging_level=logging.INFO if verbose else logging.WARNING)
    if cfg.ray.address:
        kwargs["address"] = cfg.ray.address
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        kwargs.update(address="local", include_dashboard=False, _system_config=LOCAL_RAY_SYSTEM_CONFIG)
        if cfg.ray.num_cpus is not None:
            kwargs["num_cpus"] = cfg.ray.num_cpus
    if cfg.ray.address:
        ray.init(**kwargs)
    else:
        with _lean_local_node(log_monitor=verbose):
            ray.init(**kwargs)
    if not cfg.ray.address:
        # This driver owns the local cluster: none of its processes may outlive the driver,
        # however it dies (see roll/utils/reaper.py for the ones Ray itself leaves for a minute).
        from roll.utils.reaper import start_reaper

        start_reaper()
        own_worker_logs()


class LearningSignal:
    """Whether any training step of a run had an advantage other than zero, and how many of its
    responses were cut at the token budget.

    Pipelines whose steps report ``reward/advantages_max`` / ``_min`` (agentic, rlvr) train on
    advantages; when every step's advantages were all zero (every group's episodes scored
    alike: a reward that never varies, or a policy that fails every episode the same way) the
    policy learnt nothing from the rewards. The run still ends normally (a smoke run of a
    random model often sees no reward at all) and says so in one warning, on the console and
    in ``run.log``. Responses cut at ``max_new_tokens`` without ending (agentic
    ``env/<tag>/cut_response_rate``, rlvr ``rollout/<tag>/truncated_rate``) are the commonest
    cause of a reward that never varies (an answer that cannot finish cannot be scored): half
    or more cut is named in that warning, and nine in ten cut is a warning of its own in a run
    that did learn something. It also watches each role's learning rate (``lr_problems``)."""

    CUT_KEYS = ("/cut_response_rate", "/truncated_rate")
    CUT_HINT_SHARE = 0.5
    CUT_WARN_SHARE = 0.9

    LR_KEYS = ("actor/lr", "critic/lr")

    def __init__(self) -> None:
        self.steps = 0
        self.nonzero = 0
        self.cut_sum = 0.0
        self.cut_steps = 0
        self.added = 0
        self.lr_positive: set[str] = set()
        self.lr_zero_since: dict[str, int] = {}  # role's lr key -> first step of its trailing run at lr 0

    def add(self, metrics: dict[str, float]) -> None:
        self.added += 1
        for key in self.LR_KEYS:
            if key not in metrics:
                continue
            if metrics[key] > 0:
                self.lr_positive.add(key)
                self.lr_zero_since.pop(key, None)
            elif key in self.lr_positive:  # a warmup's lr 0 at the start is no end of the schedule
                self.lr_zero_since.setdefault(key, self.added)
        cut = [v for k, v in metrics.items() if k.endswith(self.CUT_KEYS) and not k.startswith("val")]
        if cut:  # tags weigh alike
            self.cut_sum += sum(cut) / len(cut)
            self.cut_steps += 1
        if "reward/advantages_max" not in metrics:
            return
        self.steps += 1
        self.nonzero += int(max(abs(metrics["reward/advantages_max"]), abs(metrics.get("reward/advantages_min", 0.0))) > 0)

    @property
    def cut_share(self) -> float:
        return self.cut_sum / self.cut_steps if self.cut_steps else 0.0

    def _cut_text(self) -> str:
        return (f"{self.cut_share:.0%} of the training responses were cut at max_new_tokens without ending "
                f"(env/<tag>/cut_response_rate, rollout/<tag>/truncated_rate): raise "
                f"actor_infer.generating_args.max_new_tokens, or check that the model ends its answers")

    def lr_problems(self, start: int) -> list[str]:
        """A role whose LR schedule reached 0 before the run's end and stayed there (a
        ``num_training_steps`` shorter than the run's optimizer steps, say after ``max_steps``
        was raised): the steps after it trained nothing. A tail of one step, or under 5% of the
        run, is a schedule that ends with the run."""
        out = []
        for key, since in sorted(self.lr_zero_since.items()):
            tail = self.added - since + 1
            if tail >= max(2, 0.05 * self.added):
                role = "actor_train" if key.startswith("actor") else "critic"
                out.append(f"{key} reached 0 at step {start + since} and stayed 0 for the last {tail} of the run's "
                           f"{self.added} steps, which trained nothing: {role}.training_args.num_training_steps is "
                           f"shorter than the run's optimizer steps (the sum of {key.split('/')[0]}/optimizer_steps); "
                           f"set it to cover the run")
        return out

    def problem(self, start: int, end: int) -> Optional[str]:
        if not self.steps:
            return None
        if self.nonzero:
            return f"most responses never finished: {self._cut_text()}" if self.cut_share >= self.CUT_WARN_SHARE else None
        cause = f"; {self._cut_text()}" if self.cut_share >= self.CUT_HINT_SHARE else ""
        return (f"no learning signal: every advantage of steps {start + 1}-{end} was zero (in each group every "
                f"episode scored the same), so the policy learnt nothing from the rewards; see "
                f"reward/<tag>/zero_std_groups in the metrics and the episodes' rewards (roll view){cause}")


RESUME_QUIET_KEYS = ("resume_from_checkpoint", "max_steps", "output_dir", "show_progress", "source_path")
"""Settings a resume changes as a matter of course (continuing longer, from another directory or YAML file):
their changes are logged at info level; any other changed setting is a warning."""


def config_changes(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(dotted key, old value, new value)`` for every leaf setting that differs between two
    resolved configs (plain data, as ``to_dict`` gives and JSON keeps); a key only one has counts."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(old) | set(new), key=str):
            out += config_changes(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [(prefix[:-1], old, new)]


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class BasePipeline:
    """The step loop, run directory, tracking and checkpoint/resume."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.output_dir = Path(cfg.output_dir).resolve()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints = CheckpointManager(self.output_dir / "checkpoints", cfg.max_ckpt_to_keep)
        self.start_step = 0
        # Verified here, in the driver, before Ray starts or anything is written: a damaged or
        # unsafe checkpoint is skipped (or refused) by name, never handed to a worker.
        self.resume_state: dict[str, Any] = {}
        self.resume_from: Optional[Path] = self._find_resume_checkpoint()
        if self.resume_from is not None:
            self._log_config_changes()
        (self.output_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        seed_everything(cfg.seed, cfg.deterministic)
        self.tracker = None
        self.timings: dict[str, float] = {}
        self.startup_timings: dict[str, float] = {}
        """``timing/startup/<phase>`` seconds of this process's start-up (a pipeline logs them
        with its first step): where the time to the first step goes."""
        self.pool = None
        self.clusters: list[Any] = []
        self.actors: list[Any] = []  # other Ray actors to kill at shutdown (env workers, ...)

    def make_pool(self) -> None:
        """Validate the placement plan (every problem listed) and reserve the pool on Ray."""
        from roll.distributed.resource_pool import ResourcePool, validate_plan

        init_ray(self.cfg)
        link_worker_logs(self.output_dir)
        validate_plan(self.cfg)
        self.pool = ResourcePool.from_config(self.cfg)

    def make_cluster(self, role: str, worker_cls: type, worker_cfg: Any, **worker_kwargs: Any) -> Any:
        """A Cluster of ``role`` placed by the pool; shut down with the pipeline."""
        from roll.distributed.cluster import Cluster

        kwargs = dict(model_path=getattr(self, "model_path", None), seed=self.cfg.seed)
        kwargs.update(worker_kwargs)
        cluster = Cluster(role, worker_cls, worker_cfg, self.pool, worker_kwargs=kwargs)
        self.clusters.append(cluster)
        return cluster

    # ---- hooks ------------------------------------------------------------------------
    def setup(self) -> None:
        raise NotImplementedError

    def train_step(self, step: int) -> dict[str, float]:
        raise NotImplementedError

    def save_state(self, ckpt_dir: Path) -> dict[str, Any]:
        """Write role states into ``ckpt_dir``; return extra JSON state for the driver."""
        raise NotImplementedError

    def load_state(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def validate(self, step: int) -> dict[str, float]:
        return {}

    final_role = "actor_train"
    """The role whose last checkpoint becomes ``final_model``."""

    def finalize(self) -> None:
        """Copy the trained role of the last checkpoint to ``<output_dir>/final_model``: an
        ordinary Hugging Face model directory with the tokenizer."""
        latest = self.checkpoints.latest()
        if latest is None or not (latest / self.final_role).exists():
            return
        final = self.output_dir / "final_model"
        if final.exists():
            shutil.rmtree(final)
        shutil.copytree(latest / self.final_role, final, ignore=shutil.ignore_patterns("trainer_state.*", "deepspeed"))
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(final))
        logger.info("final model (Hugging Face format): %s", final)

    def shutdown(self) -> None:
        """Kill this run's actors and free its placement groups (a run inside a longer-lived
        Ray cluster, e.g. a test session or `ray.address: auto`, leaves nothing behind)."""
        import ray

        if not ray.is_initialized():
            return
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as e:  # an actor that already died is fine; anything else is logged
                logger.warning("could not kill actor %s: %s", actor, e)
        for cluster in self.clusters:
            try:
                cluster.shutdown()
            except Exception as e:
                logger.warning("could not shut down cluster %s: %s", cluster.role, e)
        if self.pool is not None:
            self.pool.shutdown()

    # ---- machinery ----------------------------------------------------------------------
    @contextmanager
    def startup_phase(self, name: str) -> Iterator[None]:
        """Time one start-up phase into ``startup_timings`` (``timing/startup/<name>``)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.startup_timings[f"timing/startup/{name}"] = time.perf_counter() - t0

    def record_process_start(self) -> None:
        """``timing/startup/process``: from the driver process's start to now (interpreter,
        imports, config loading and checks), read from the process's own start time."""
        import psutil

        self.startup_timings["timing/startup/process"] = max(0.0, time.time() - psutil.Process().create_time())

    def record_startup_total(self) -> None:
        """``timing/startup/total``: from the driver process's start to the end of ``setup``
        (the phases overlap, so this is not their sum)."""
        import psutil

        self.startup_timings["timing/startup/total"] = max(0.0, time.time() - psutil.Process().create_time())

    @contextmanager
    def timer(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[f"timing/{name}"] = self.timings.get(f"timing/{name}", 0.0) + time.perf_counter() - t0

    def _find_resume_checkpoint(self) -> Optional[Path]:
        """The checkpoint to resume from, verified (its state in ``resume_state``), or None.

        ``true``: the newest good checkpoint of this run (damaged ones are skipped with a
        warning naming them); a path: exactly that checkpoint, or a CheckpointError saying
        why not. ``max_steps`` must lie above the checkpoint's step: a resume never writes a
        step at or below the one it restored."""
        r = self.cfg.resume_from_checkpoint
        if r is False:
            return None
        if r is True:
            found = self.checkpoints.find_resumable()
            if found is None:
                logger.info("resume_from_checkpoint: no checkpoint in %s yet; starting fresh", self.checkpoints.root)
                return None
            path, self.resume_state = found
        else:
            path = Path(str(r))
            if not path.exists():
                raise ConfigError([f"resume_from_checkpoint: {path} does not exist"])
            self.resume_state = verify_checkpoint(path)
        step = int(self.resume_state["step"])
        if self.cfg.max_steps <= step:
            raise CheckpointError(
                f"resume_from_checkpoint: {path} is at step {step} and max_steps={self.cfg.max_steps} is not above "
                f"it, so there is nothing to train (resuming would overwrite later checkpoints with this state); "
                f"set max_steps above {step} to continue this run")
        return path

    def _restore(self) -> None:
        assert self.resume_from is not None
        state = self.resume_state
        self.load_state(self.resume_from, state)
        set_rng_state(state["rng"])
        self.start_step = int(state["step"])
        logger.info("resumed from %s at step %d", self.resume_from, self.start_step)

    def _config_record(self) -> dict[str, Any]:
        """The resolved config as JSON keeps it (what a checkpoint records of the run that wrote it)."""
        return json.loads(json.dumps(to_dict(self.cfg), default=str))

    def _log_config_changes(self) -> None:
        """Name, before Ray starts, every setting in which this run differs from the run that wrote
        the checkpoint it resumes. Changing settings on resume is allowed (a lower lr for a run that
        diverged, more steps); each takes this config's value, including the optimizer's
        hyperparameters (the training strategies put them back over the optimizer state), while the
        weights, optimizer moments, data position and random state come from the checkpoint."""
        recorded = self.resume_state.get("config")
        if not isinstance(recorded, dict):
            logger.info("resume: %s does not record its run's config (an older checkpoint); changed settings are "
                        "not listed", self.resume_from)
            return
        changes = config_changes(recorded, self._config_record())
        quiet = [c for c in changes if c[0] in RESUME_QUIET_KEYS]
        loud = [c for c in changes if c[0] not in RESUME_QUIET_KEYS]
        for key, old, new in quiet:
            if key != "resume_from_checkpoint":
                logger.info("resume: %s %s -> %s", key, _short(old), _short(new))
        if loud:
            listed = "; ".join(f"{k}: {_short(o)} -> {_short(n)}" for k, o, n in loud)
            logger.warning("resuming %s with %d setting(s) other than the run that wrote it: %s. They take this "
                           "config's values (the optimizer's lr, betas, eps and weight decay too); weights, optimizer "
                           "moments, data position and random state are the checkpoint's", self.resume_from,
                           len(loud), listed)

    def save_checkpoint(self, step: int) -> None:
        if self.resume_from is not None and step <= self.start_step:
            raise CheckpointError(f"refusing to write checkpoint step-{step}: this run resumed at step "
                                  f"{self.start_step} and must not overwrite it or an earlier one")
        self.checkpoints.save(step, self.save_state, state={"config": self._config_record()})

    def _make_tracker(self) -> None:
        log_dir = Path(self.cfg.tracking.log_dir or self.output_dir / "logs")
        # Called only after a resume restored its state: a resumed run continues the tracker
        # at the checkpoint's step (records after it are dropped: the resumed run writes them
        # again), and a resume that fails leaves the files as they were.
        resume_step = self.start_step if self.resume_from is not None else None
        self.tracker = create_tracker(self.cfg.tracking, run_name=self.cfg.exp_name, log_dir=str(log_dir),
                                      config_dict=to_dict(self.cfg), resume_step=resume_step)

    def run(self) -> None:
        cfg = self.cfg
        t_run = time.perf_counter()
        resolve_trackers(cfg.tracking)  # a missing tracker package fails at start-up, before setup
        try:
            self.setup()
            if self.resume_from is not None:
                self._restore()
            self._make_tracker()
            console = RunConsole(cfg.exp_name, total=cfg.max_steps, start=self.start_step, bar=cfg.show_progress)
            if self.resume_from is not None:
                console.print(f"resumed from {self.resume_from} at step {self.start_step}")
            if cfg.eval_steps and self.start_step == 0:
                with self.timer("validation"):
                    metrics = {**self.validate(0), **self.timings}
                self.tracker.log(metrics, step=0)
                console.validation(0, metrics)
            signal = LearningSignal()
            with console:
                for step in range(self.start_step, cfg.max_steps):
                    self.timings = {}
                    t0 = time.perf_counter()
                    metrics = self.train_step(step)
                    signal.add(metrics)
                    done = step + 1
                    if cfg.save_steps and done % cfg.save_steps == 0 and done < cfg.max_steps:
                        with self.timer("checkpoint"):
                            self.save_checkpoint(done)
                    # the final model is validated even where eval_steps does not divide max_steps
                    if cfg.eval_steps and (done % cfg.eval_steps == 0 or done == cfg.max_steps):
                        with self.timer("validation"):
                            metrics.update(self.validate(done))
                    metrics.update(self.timings)
                    metrics["timing/step"] = time.perf_counter() - t0
                    if done % max(1, cfg.logging_steps) == 0 or done == cfg.max_steps:
                        self.tracker.log(metrics, step=done)
                    console.step(done, metrics, status=self.status_line(metrics))
            self.save_checkpoint(cfg.max_steps)
            self.finalize()
            for problem in [signal.problem(self.start_step, cfg.max_steps), *signal.lr_problems(self.start_step)]:
                if problem:
                    logger.warning(problem)
        finally:
            self.shutdown()
            if self.tracker is not None:
                self.tracker.finish()
            self.write_plots()
            copy_worker_logs(self.output_dir)
        print(run_done_line(self.output_dir, cfg.max_steps - self.start_step, time.perf_counter() - t_run), flush=True)

    def write_plots(self) -> None:
        """PNG learning curves in ``<output_dir>/plots`` (``roll plot`` redraws them), also
        after a failed run, whose curves help find the failure. A plotting problem is logged,
        never raised: the run's own result or error stands."""
        try:
            from roll.viewer.plots import write_plots

            written = write_plots(self.output_dir)
        except Exception as e:  # see the docstring; the message says how to retry
            logger.warning("could not write plots into %s: %s: %s (retry with: roll plot %s)",
                           self.output_dir / "plots", type(e).__name__, e, self.output_dir)
            return
        if written:
            logger.info("learning curves: %s (HTML report: roll view %s)", written[0].parent, self.output_dir)

    def status_line(self, metrics: dict[str, float]) -> str:
        return ""
