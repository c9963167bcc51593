"""Agentic pipeline: multi-turn RL against Gym text environments.

One step (../shared/DESIGN.md section 3), each phase a method below:

    sync_weights -> collect_rollouts -> reference_logprobs -> old_logprobs -> critic_values
      -> advantages -> train_critic -> train_actor -> (checkpoint, validation: BasePipeline)

No algorithm maths lives here: advantages come from `roll.algorithms.compute_advantages`
(estimator chosen by name), losses from `make_actor_loss_fn` / `make_critic_loss_fn`.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from roll.algorithms import (
    AdvantageInputs,
    apply_sample_mask,
    build_kl_controller,
    build_sample_mask,
    compute_advantages,
    kl_for_reward,
    make_actor_loss_fn,
    make_critic_loss_fn,
)
from roll.config.schema import PipelineConfig
from roll.config.validate import ConfigError
from roll.data.batch import Batch
from roll.distributed.cluster import Cluster
from roll.distributed.model_update import ModelUpdateGroup
from roll.rollout.scheduler import RolloutBatch
from roll.rollout.service import ThreadedScheduler, build_rollout_scheduler
from roll.utils.logging import get_logger
from roll.workers.actor import ActorWorker
from roll.workers.base import resolve_model
from roll.workers.critic import CriticWorker
from roll.workers.inference import InferenceWorker
from roll.workers.reference import ReferenceWorker

from roll.pipelines.base import BasePipeline

logger = get_logger("roll.pipelines.agentic")


class AgenticPipeline(BasePipeline):
    """Trains ``actor_train`` on episodes that ``actor_infer`` plays in ``custom_envs``."""

    def __init__(self, cfg: PipelineConfig):
        super().__init__(cfg)
        if not cfg.custom_envs:
            raise ConfigError(["custom_envs: the agentic pipeline needs at least one environment tag"])
        self.kl_ctl = build_kl_controller(cfg.algorithm)
        self.actor_loss_fn = make_actor_loss_fn(cfg.algorithm)
        self.critic_loss_fn = make_critic_loss_fn(cfg.algorithm) if cfg.critic is not None else None
        self.model_path = resolve_model(cfg.pretrain)
        self.version = 0
        self.train_scheduler: Optional[ThreadedScheduler] = None
        self.val_schedulers: dict[str, ThreadedScheduler] = {}

    # ================================================================ setup
    def setup(self) -> None:
        cfg = self.cfg
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.make_pool()
        steps = self.optimizer_steps_per_step()
        self.actor_train = self.make_cluster("actor_train", ActorWorker, cfg.actor_train,
                                             num_training_steps=steps["actor"] * cfg.max_steps)
        self.actor_infer = self.make_cluster("actor_infer", InferenceWorker, cfg.actor_infer)
        self.reference = (self.make_cluster("reference", ReferenceWorker, cfg.reference)
                          if cfg.reference is not None else None)
        self.critic = (self.make_cluster("critic", CriticWorker, cfg.critic, num_training_steps=steps["critic"] * cfg.max_steps)
                       if cfg.critic is not None else None)
        self.model_update = ModelUpdateGroup(self.actor_train, [self.actor_infer], cfg.model_update_buffer_size_mb)
        self.train_scheduler = self._make_scheduler(validation=False)
        if cfg.val_env_manager is not None:
            self.val_schedulers = {mode: self._make_scheduler(validation=True, greedy=mode == "greedy")
                                   for mode in dict.fromkeys(cfg.val_decoding)}

    def optimizer_steps_per_step(self) -> dict[str, int]:
        """Optimizer steps each training role takes per pipeline step (for LR schedules)."""
        out = {}
        for name, role in (("actor", self.cfg.actor_train), ("critic", self.cfg.critic)):
            if role is None:
                out[name] = 0
                continue
            ta = role.training_args
            dp = max(1, self.dp_size(role))
            per_step = ta.per_device_train_batch_size * ta.gradient_accumulation_steps * dp
            out[name] = max(1, -(-self.cfg.rollout_batch_size // per_step)) * self.cfg.algorithm.ppo_epochs
        return out

    @staticmethod
    def dp_size(role: Any) -> int:
        from roll.distributed.resource_pool import parse_device_mapping

        if role.device_mapping is not None:
            return max(1, len(parse_device_mapping(role.device_mapping)) // max(1, role.num_gpus_per_worker))
        return int(role.world_size or 1)

    def _make_scheduler(self, validation: bool, greedy: bool = False) -> ThreadedScheduler:
        cfg = self.cfg
        if greedy:
            gen = dataclasses.replace(cfg.actor_infer.generating_args, do_sample=False)
            cfg = dataclasses.replace(cfg, actor_infer=dataclasses.replace(cfg.actor_infer, generating_args=gen))
        return ThreadedScheduler(lambda: build_rollout_scheduler(
            cfg, self.actor_infer.workers, self.model_path, validation=validation,
            use_ray=cfg.train_env_manager.num_env_workers > 0))

    # ================================================================ one step
    def train_step(self, step: int) -> dict[str, float]:
        metrics: dict[str, float] = {}
        metrics.update(self.sync_weights(step))
        rollout = self.collect_rollouts(step)
        metrics.update(rollout.metrics)
        if rollout.batch is None or len(rollout.batch) == 0:
            logger.warning("step %d: no usable episodes (all groups filtered or failed); skipping training", step)
            metrics["rollout/empty_batch"] = 1.0
            return metrics
        batch = rollout.batch
        metrics.update(self.reference_logprobs(batch))
        metrics.update(self.old_logprobs(batch))
        metrics.update(self.critic_values(batch))
        metrics.update(self.advantages(batch))
        metrics.update(self.train_critic(batch))
        metrics.update(self.train_actor(batch))
        self.dump_trajectories(step, rollout)
        return metrics

    def sync_weights(self, step: int) -> dict[str, float]:
        """Push the trainer's weights (version = training steps so far) to the inference
        workers, unless they already serve that version."""
        if self.version == step:
            return {}
        with self.timer("model_update"), self.train_scheduler.weight_update(version=step):
            out = self.model_update.update(version=step)
        self.version = step
        for sched in self.val_schedulers.values():
            sched.set_policy_version(step)
        return {k if "/" in k else f"system/model_update_{k}": v for k, v in out.items()}

    def collect_rollouts(self, step: int) -> RolloutBatch:
        with self.timer("rollout"):
            return self.train_scheduler.get_batch(self.cfg.rollout_batch_size)

    def reference_logprobs(self, batch: Batch) -> dict[str, float]:
        if self.reference is None:
            return {}
        with self.timer("reference"):
            out = self.reference.call("compute_logprobs", batch, "ref_logprobs", mode="dp")
        batch["ref_logprobs"] = out["ref_logprobs"]
        return {}

    def old_logprobs(self, batch: Batch) -> dict[str, float]:
        if not self.cfg.algorithm.recompute_old_logprobs:
            batch["old_logprobs"] = batch["infer_logprobs"]
            return {}
        with self.timer("old_logprobs"):
            out = self.actor_train.call("compute_logprobs", batch, "old_logprobs", mode="dp")
        batch["old_logprobs"] = out["old_logprobs"]
        mask = batch["response_mask"].bool()
        diff = (batch["old_logprobs"] - batch["infer_logprobs"]).abs()[mask]
        if diff.numel() == 0:
            return {}
        return {"rollout/train_infer_logprob_diff": float(diff.mean()),
                "rollout/train_infer_logprob_diff_max": float(diff.max())}

    def critic_values(self, batch: Batch) -> dict[str, float]:
        if self.critic is None:
            return {}
        with self.timer("critic_values"):
            out = self.critic.call("compute_values", batch, "values", mode="dp")
        batch["values"] = out["values"]
        batch["old_values"] = out["values"]
        return {}

    def advantages(self, batch: Batch) -> dict[str, float]:
        alg = self.cfg.algorithm
        kl = None
        if "ref_logprobs" in batch:
            kl = kl_for_reward(batch["old_logprobs"], batch["ref_logprobs"], batch["response_mask"],
                               alg.kl_estimator if alg.use_kl_in_reward else None)
        nt = batch.non_tensors
        inputs = AdvantageInputs(
            token_rewards=batch["token_rewards"], response_mask=batch["response_mask"],
            group_ids=list(nt["group_id"]), values=batch.tensors.get("values"), turn_ids=batch["turn_ids"],
            tags=list(nt["env_tag"]), kl=kl, state_keys=list(nt["state_key"]) if "state_key" in nt else None,
            episode_ids=list(nt["episode_id"]) if "episode_id" in nt else None,
            step_ids=list(nt["step_index"]) if "step_index" in nt else None,
        )
        out = compute_advantages(inputs, alg, kl_coef=self.kl_ctl.value)
        batch["advantages"] = out.advantages
        batch["returns"] = out.returns
        metrics = dict(out.metrics)
        truncated = torch.as_tensor([bool(x) for x in nt["truncated"]]) if "truncated" in nt else None
        success = torch.as_tensor([float(bool(x)) for x in nt["success"]]) if "success" in nt else None
        keep, mask_metrics = build_sample_mask(alg, group_ids=list(nt["group_id"]), success=success,
                                               truncated=truncated, batch_size=len(batch))
        batch["response_mask"] = apply_sample_mask(batch["response_mask"], keep)
        metrics.update(mask_metrics)
        if kl is not None:
            seq_kl = float((kl * batch["response_mask"]).sum() / batch["response_mask"].sum().clamp(min=1))
            self.kl_ctl.update(seq_kl, len(batch))
            metrics["actor/ref_kl"] = seq_kl
        return metrics

    def train_critic(self, batch: Batch) -> dict[str, float]:
        if self.critic is None:
            return {}
        with self.timer("critic_train"):
            return self._train(self.critic, self.cfg.critic, batch, self.critic_loss_fn)

    def train_actor(self, batch: Batch) -> dict[str, float]:
        with self.timer("actor_train"):
            return self._train(self.actor_train, self.cfg.actor_train, batch, self.actor_loss_fn)

    def _train(self, cluster: Cluster, role: Any, batch: Batch, loss_fn: Any) -> dict[str, float]:
        # Step-mode and short batches need not divide evenly: pad with loss-masked copies so
        # every data-parallel rank gets the same number of micro-batches.
        multiple = cluster.world_size * role.training_args.per_device_train_batch_size
        padded, _ = batch.pad_rows_to_multiple(multiple)
        results = cluster.call("train", padded, loss_fn, self.cfg.algorithm.ppo_epochs, mode="dp")
        return _mean_metrics(results)

    def dump_trajectories(self, step: int, rollout: RolloutBatch) -> None:
        n = self.cfg.tracking.dump_trajectories
        if n <= 0 or not rollout.trajectories:
            return
        texts = []
        for t in rollout.trajectories[:n]:
            body = self.tokenizer.decode(t.input_ids, skip_special_tokens=False)
            texts.append(f"## {t.episode_id} tag={t.env_tag} return={t.episode_return:.3f} success={t.success}\n{body}\n")
        text = "\n".join(texts)
        path = self.output_dir / "trajectories" / f"step-{step + 1:06d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.tracker.log_text("rollout/trajectories", text, step=step + 1)

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
        self.actor_train.call("save", str(ckpt_dir / "actor_train"))
        if self.critic is not None:
            self.critic.call("save", str(ckpt_dir / "critic"))
        return {"kl_coef": self.kl_ctl.state_dict(), "scheduler": self.train_scheduler.scheduler.state_dict(),
                "version": self.version}

    def load_state(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        self.actor_train.call("load", str(ckpt_dir / "actor_train"))
        if self.critic is not None:
            self.critic.call("load", str(ckpt_dir / "critic"))
        self.kl_ctl.load_state_dict(state["kl_coef"])
        self.train_scheduler.scheduler.load_state_dict(state["scheduler"])
        # self.version stays 0: the inference workers still hold the pretrained weights, so
        # the first step after resume syncs the restored ones.

    def shutdown(self) -> None:
        for sched in (self.train_scheduler, *self.val_schedulers.values()):
            if sched is not None:
                try:
                    sched.close()
                except Exception as e:  # closing must not hide the run's own error
                    logger.warning("rollout scheduler shutdown failed: %s", e)
                self.actors.extend(h for h in sched.scheduler.hosts if hasattr(h, "_actor_id"))
        super().shutdown()

    def status_line(self, metrics: dict[str, float]) -> str:
        keys = [k for k in metrics if k.startswith("env/") and k.endswith("/success")]
        parts = [f"{k.split('/')[1]} success {metrics[k]:.2f}" for k in keys[:3]]
        if "actor/loss" in metrics:
            parts.append(f"loss {metrics['actor/loss']:.3f}")
        return " | ".join(parts)


def _mean_metrics(results: Any) -> dict[str, float]:
    if isinstance(results, dict):
        return results
    keys = {k for r in results for k in r}
    return {k: float(np.mean([r[k] for r in results if k in r])) for k in keys}
