"""Agentic pipeline: multi-turn RL against Gym text environments.

One step (docs/architecture.md, "One agentic step"), each phase a named method (here or in the shared
`PolicyTrainer`, pipelines/policy.py):

    sync_weights -> collect_rollouts -> reference_logprobs -> old_logprobs -> critic_values
      -> advantages -> train_critic -> train_actor -> (checkpoint, validation: BasePipeline)

No algorithm maths lives here.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
from pathlib import Path
from typing import Any, Optional

from roll.config.schema import PipelineConfig
from roll.config.validate import ConfigError
from roll.errors import RunFailedError
from roll.rollout.failures import check_step
from roll.rollout.scheduler import RolloutBatch
from roll.rollout.service import ThreadedScheduler, build_rollout_scheduler
from roll.utils.logging import get_logger
from roll.viewer.records import agentic_records, log_records, write_step
from roll.workers.base import resolve_model

from roll.pipelines.base import BasePipeline, lower_thread_priority
from roll.pipelines.policy import PolicyTrainer

logger = get_logger("roll.pipelines.agentic")


def _load_tokenizer(model_path: str) -> Any:
    lower_thread_priority()  # it overlaps the cluster's start (pipelines/base.py)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


class AgenticPipeline(BasePipeline):
    """Trains ``actor_train`` on episodes that ``actor_infer`` plays in ``custom_envs``."""

    def __init__(self, cfg: PipelineConfig):
        super().__init__(cfg)
        if not cfg.custom_envs:
            raise ConfigError(["custom_envs: the agentic pipeline needs at least one environment tag"])
        if cfg.train_env_manager.mode == "step" and cfg.algorithm.adv_estimator in ("grpo", "rloo", "reinforce", "reinforce_pp"):
            # A step-mode sample holds one turn, so these estimators score it by that turn's own
            # reward: an episode's outcome reaches only its last turn.
            logger.warning("train_env_manager.mode is step: %s credits each turn with its own reward only; "
                           "for episode-level credit use adv_estimator gigpo (step_weight 0 is GRPO over episode returns)",
                           cfg.algorithm.adv_estimator)
        self.model_path = resolve_model(cfg.pretrain)
        self.policy: Optional[PolicyTrainer] = None
        self.train_scheduler: Optional[ThreadedScheduler] = None
        self.val_schedulers: dict[str, ThreadedScheduler] = {}

    # ================================================================ setup
    def setup(self) -> None:
        cfg = self.cfg
        # the tokenizer (transformers' import: Python in this process, at a lower CPU priority)
        # loads while the local Ray cluster starts (mostly its own processes), not one after the other
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentic-tokenizer") as ex:
            tokenizer = ex.submit(_load_tokenizer, self.model_path)
            self.make_pool()
            self.tokenizer = tokenizer.result()
        self.policy = PolicyTrainer(cfg, self.make_cluster, self.timer)
        self.train_scheduler = self._make_scheduler(validation=False)
        if cfg.val_env_manager is not None:
            self.val_schedulers = {mode: self._make_scheduler(validation=True, greedy=mode == "greedy")
                                   for mode in dict.fromkeys(cfg.val_decoding)}

    def _make_scheduler(self, validation: bool, greedy: bool = False) -> ThreadedScheduler:
        cfg = self.cfg
        if greedy:
            gen = dataclasses.replace(cfg.actor_infer.generating_args, do_sample=False)
            cfg = dataclasses.replace(cfg, actor_infer=dataclasses.replace(cfg.actor_infer, generating_args=gen))
        role = "env.train" if not validation else "env.val_greedy" if greedy else "env.val"  # the planner's names
        return ThreadedScheduler(lambda: build_rollout_scheduler(
            cfg, self.policy.actor_infer.workers, self.model_path, validation=validation,
            use_ray=cfg.train_env_manager.num_env_workers > 0, role=role, make_cluster=self.make_cluster))

    # ================================================================ one step
    def train_step(self, step: int) -> dict[str, float]:
        metrics: dict[str, float] = {}
        metrics.update(self.sync_weights(step))
        rollout = self.collect_rollouts(step)
        metrics.update(rollout.metrics)
        self.check_rollout(step, rollout, metrics)
        metrics.update(self.policy.train_on(rollout.batch))
        metrics.update(self.policy.restart_metrics())
        self.dump_trajectories(step, rollout)
        return metrics

    def check_rollout(self, step: int, rollout: RolloutBatch, metrics: dict[str, float]) -> None:
        """Stop the run (RunFailedError, after logging the step's metrics) when the step has no
        trainable sample or more than ``rollout.max_failed_share`` of its episodes failed."""
        m = rollout.metrics
        failed = int(m.get("rollout/episodes_failed", 0))
        filtered = int(m.get("rollout/groups_filtered", 0))
        note = f"{filtered} groups filtered by {self.cfg.train_env_manager.group_filter}" if filtered else ""
        try:
            check_step(step, what="episodes", attempted=failed + int(m.get("rollout/episodes_finished", 0)),
                       failed=failed, trainable=0 if rollout.batch is None else len(rollout.batch),
                       limit=self.cfg.rollout.max_failed_share, causes=rollout.failure_causes,
                       log=self.train_scheduler.scheduler.error_log, note=note)
        except RunFailedError:
            metrics["rollout/empty_batch"] = float(rollout.batch is None)
            self.tracker.log(metrics, step=step + 1)
            raise

    def sync_weights(self, step: int) -> dict[str, float]:
        """New weights for the inference workers, with rollouts suspended around the transfer
        (in-flight turns continue per ``rollout.on_weight_update``)."""
        if self.policy.version == step:
            return {}
        metrics = self.policy.sync_weights(step, around=self.train_scheduler.weight_update(version=step))
        for sched in self.val_schedulers.values():
            sched.set_policy_version(step)
        return metrics

    def collect_rollouts(self, step: int) -> RolloutBatch:
        with self.timer("rollout"):
            return self.train_scheduler.get_batch(self.cfg.rollout_batch_size, on_wait=self.recover_workers)

    def recover_workers(self) -> None:
        """While rollouts run: inference workers that crashed get set up and the current weights
        (their requests wait in the router meanwhile), so the step completes."""
        self.policy.recover_inference(around=self.train_scheduler.weight_update(version=self.policy.version))

    def dump_trajectories(self, step: int, rollout: RolloutBatch) -> None:
        """Up to ``tracking.dump_trajectories`` episodes (whole groups) with their turns,
        advantages and token view to ``trajectories/step-NNNNNN.jsonl.gz`` (schema:
        roll/viewer/records.py), as text to the trackers and as a table to those taking one."""
        n = self.cfg.tracking.dump_trajectories
        if n <= 0 or not rollout.trajectories:
            return
        batch = rollout.batch
        advantages = batch.tensors.get("advantages") if batch is not None else None
        trained = batch.tensors.get("response_mask") if advantages is not None else None
        records = agentic_records(step + 1, rollout.trajectories, n, self.tokenizer, advantages, trained)
        write_step(self.output_dir, step + 1, records)
        log_records(self.tracker, records, step=step + 1)

    # ================================================================ validation
    def validate(self, step: int) -> dict[str, float]:
        """Held-out episodes under the current weights: ``val/`` (sampled) and ``val_greedy/``."""
        metrics: dict[str, float] = {}
        if self.val_schedulers:
            self.sync_weights(step)
        for mode, sched in self.val_schedulers.items():
            rollout = sched.get_batch(self.cfg.val_batch_size)
            prefix = "val" if mode == "sampled" else f"val_{mode}"
            metrics.update({f"{prefix}/{k}": v for k, v in rollout.metrics.items()})
        return metrics

    # ================================================================ checkpoint
    def save_state(self, ckpt_dir: Path) -> dict[str, Any]:
        return {**self.policy.save(ckpt_dir), "scheduler": self.train_scheduler.scheduler.state_dict()}

    def load_state(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        self.policy.load(ckpt_dir, state)
        self.train_scheduler.scheduler.load_state_dict(state["scheduler"])

    def shutdown(self) -> None:
        for sched in (self.train_scheduler, *self.val_schedulers.values()):
            if sched is not None:
                try:
                    sched.close()
                except Exception as e:  # closing must not hide the run's own error
                    logger.warning("rollout scheduler shutdown failed: %s", e)
        super().shutdown()

    def status_line(self, metrics: dict[str, float]) -> str:
        keys = [k for k in metrics if k.startswith("env/") and k.endswith("/success")]
        parts = [f"{k.split('/')[1]} success {metrics[k]:.2f}" for k in keys[:3]]
        if "actor/loss" in metrics:
            parts.append(f"loss {metrics['actor/loss']:.3f}")
        return " | ".join(parts)

