"""The policy side of an RL step, shared by the agentic and RLVR pipelines (composition, not
inheritance): the roles (actor_train, actor_infer, optional reference and critic), the weight
sync between them, the phases after rollouts, and their part of a checkpoint.

A pipeline calls the phases in order on a rollout batch (the batch contract of
`roll.data.trajectory.trajectories_to_batch`):

    reference_logprobs -> old_logprobs -> critic_values -> advantages -> train_critic -> train_actor

No algorithm maths lives here: advantages come from `roll.algorithms.compute_advantages`
(estimator chosen by name), losses from `make_actor_loss_fn` / `make_critic_loss_fn`.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

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
from roll.distributed.cluster import WorkerDiedError, WorkerError
from roll.distributed.model_update import ModelUpdateGroup
from roll.distributed.resource_pool import make_plan
from roll.utils.logging import get_logger
from roll.workers.actor import ActorWorker
from roll.workers.critic import CriticWorker
from roll.workers.inference import InferenceWorker
from roll.workers.reference import ReferenceWorker

logger = get_logger(__name__)


def optimizer_steps_per_step(cfg: PipelineConfig, plan: Any = None) -> dict[str, int]:
    """Optimizer steps each training role takes per pipeline step (for LR schedules), with
    the plan's data-parallel size (world / (tp x pp); roll/distributed/resource_pool.py)."""
    plan = plan if plan is not None else make_plan(cfg)
    out = {}
    for name, key, role in (("actor", "actor_train", cfg.actor_train), ("critic", "critic", cfg.critic)):
        if role is None:
            out[name] = 0
            continue
        if key not in plan.roles:
            raise ConfigError(plan.errors or [f"{key} is not in the placement plan"])
        ta = role.training_args
        per_step = ta.per_device_train_batch_size * ta.gradient_accumulation_steps * plan.roles[key].dp_size
        out[name] = max(1, -(-cfg.rollout_batch_size // per_step)) * cfg.algorithm.ppo_epochs
    return out


def mean_metrics(results: Any) -> dict[str, float]:
    """Per-rank metric dicts -> their mean (a single dict passes through)."""
    if isinstance(results, dict):
        return results
    keys = {k for r in results for k in r}
    return {k: float(np.mean([r[k] for r in results if k in r])) for k in keys}


def batch_advantages(batch: Batch, alg: Any, kl_ctl: Any) -> dict[str, float]:
    """Rewards -> ``advantages`` / ``returns`` on a rollout batch, then the sample masks
    (failed, overlong, too easy/hard) applied to ``response_mask``; ``kl_ctl`` gives the
    KL-in-reward coefficient and is updated with the batch's KL to the reference."""
    kl = None
    if "ref_logprobs" in batch:
        # also without use_kl_in_reward: the KL to the reference is reported (actor/ref_kl)
        kl = kl_for_reward(batch["old_logprobs"], batch["ref_logprobs"], batch["response_mask"], alg.kl_estimator)
    nt = batch.non_tensors
    inputs = AdvantageInputs(
        token_rewards=batch["token_rewards"], response_mask=batch["response_mask"],
        group_ids=list(nt["group_id"]), values=batch.tensors.get("values"), turn_ids=batch["turn_ids"],
        tags=list(nt["env_tag"]), kl=kl, state_keys=list(nt["state_key"]) if "state_key" in nt else None,
        episode_ids=list(nt["episode_id"]) if "episode_id" in nt else None,
        step_ids=list(nt["step_index"]) if "step_index" in nt else None,
        turn_valid=[list(v) for v in nt["turn_valid"]] if "turn_valid" in nt else None,
    )
    out = compute_advantages(inputs, alg, kl_coef=kl_ctl.value)
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
        mean_kl = float((kl * batch["response_mask"]).sum() / batch["response_mask"].sum().clamp(min=1))
        kl_ctl.update(mean_kl, len(batch))
        metrics["actor/ref_kl"] = mean_kl
    return metrics


def build_concurrently(builders: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run each builder in its own thread; their results by name. The first failure is raised
    after every builder has finished (a cluster built meanwhile is already registered with the
    pipeline, which shuts it down)."""
    if len(builders) == 1:
        return {name: fn() for name, fn in builders.items()}
    with concurrent.futures.ThreadPoolExecutor(len(builders), thread_name_prefix="build-role") as ex:
        futures = {name: ex.submit(fn) for name, fn in builders.items()}
        concurrent.futures.wait(futures.values())
    return {name: f.result() for name, f in futures.items()}


def _state_lost(cluster: Any) -> None:
    """A trainer group Ray restarted has lost its weights and optimizer state: stop the run (a
    resume from the last checkpoint continues it) rather than train on from the pretrained model."""
    raise WorkerDiedError(cluster.role, list(range(cluster.world_size)),
                          "restarted after a failure: its weights and optimizer state are gone; "
                          "resume from the last checkpoint (resume_from_checkpoint=true)")


class PolicyTrainer:
    """Builds the policy roles through ``make_cluster`` and runs the training phases."""

    def __init__(self, cfg: PipelineConfig, make_cluster: Callable[..., Any], timer: Callable[[str], ContextManager]):
        self.cfg = cfg
        self.timer = timer
        alg = cfg.algorithm
        self.kl_ctl = build_kl_controller(alg)
        self.actor_loss_fn = make_actor_loss_fn(alg)
        self.critic_loss_fn = make_critic_loss_fn(alg) if cfg.critic is not None else None
        plan = make_plan(cfg)
        steps = optimizer_steps_per_step(cfg, plan)
        # Start-up is spent in the worker processes (imports, model load, strategy setup) while
        # the driver waits: on CPU the roles are built at once, not one after another. On GPUs
        # one after another: an inference engine sizes its cache from the memory free when it
        # starts, which a colocated trainer loading at the same time would change under it.
        build = {"actor_train": lambda: make_cluster("actor_train", ActorWorker, cfg.actor_train,
                                                     num_training_steps=steps["actor"] * cfg.max_steps),
                 "actor_infer": lambda: make_cluster("actor_infer", InferenceWorker, cfg.actor_infer)}
        if cfg.reference is not None:
            build["reference"] = lambda: make_cluster("reference", ReferenceWorker, cfg.reference)
        if cfg.critic is not None:
            build["critic"] = lambda: make_cluster("critic", CriticWorker, cfg.critic,
                                                   num_training_steps=steps["critic"] * cfg.max_steps)
        built = build_concurrently(build) if plan.device != "gpu" else {name: fn() for name, fn in build.items()}
        self.actor_train, self.actor_infer = built["actor_train"], built["actor_infer"]
        self.reference, self.critic = built.get("reference"), built.get("critic")
        for cluster in (self.actor_train, self.critic):
            if cluster is not None:  # a restarted trainer holds pretrained weights: never train on from them
                cluster.on_restart = _state_lost
        self.model_update = ModelUpdateGroup(self.actor_train, [self.actor_infer], cfg.model_update_buffer_size_mb)
        self.version = 0
        """Weight version the inference workers serve (= training steps it includes)."""

    # ---- weight sync -------------------------------------------------------------------------
    def sync_weights(self, step: int, around: Optional[ContextManager] = None) -> dict[str, float]:
        """Push the trainer's weights (version = training steps so far) to the inference
        workers unless they already serve it; ``around`` wraps the transfer (e.g. the rollout
        scheduler's suspend/resume)."""
        if self.version == step:
            return {}
        with self.timer("model_update"), (around or contextlib.nullcontext()):
            try:
                out = self.model_update.update(version=step)
            except Exception as e:
                # An inference worker that died or hung during the transfer (named in the error,
                # or found dead now: the trainer's side of a broadcast fails when a peer dies) is
                # marked, and the retry restarts it, sets it up and relinks before sending again.
                # Anything else, a trainer failure above all, is not recoverable here.
                infer_failed = isinstance(e, WorkerError) and e.role == self.actor_infer.role
                if not (infer_failed or self.actor_infer.check_health()):
                    raise
                logger.warning("weight sync to version %d failed (%s); an inference worker restarted, retrying once",
                               step, e)
                out = self.model_update.update(version=step)
        self.version = step
        return {k if "/" in k else f"system/model_update_{k}": v for k, v in out.items()}

    def recover_inference(self, around: Optional[ContextManager] = None) -> list[int]:
        """Inference workers that crashed (Ray restarted them) serve nothing until they are set up
        and hold the current weights: find them, set them up and push the weights they lack.
        The rollout router holds their requests meanwhile. Returns the recovered ranks."""
        ranks = self.actor_infer.check_health()
        if ranks:
            logger.warning("actor_infer ranks %s restarted: setting them up with weights version %d", ranks, self.version)
            with self.timer("recovery"), (around or contextlib.nullcontext()):
                self.model_update.update(version=self.version)
        return ranks

    def restart_metrics(self) -> dict[str, float]:
        """``system/restarts/<role>``: worker restarts since the run started."""
        roles = [self.actor_train, self.actor_infer, self.reference, self.critic]
        return {f"system/restarts/{cl.role}": float(cl.restarts) for cl in roles if cl is not None}

    # ---- phases ----------------------------------------------------------------------------------
    def train_on(self, batch: Batch) -> dict[str, float]:
        """Every pipeline's training phases on a rollout batch, in order: reference_logprobs ->
        old_logprobs -> critic_values -> advantages -> train_critic -> train_actor."""
        metrics: dict[str, float] = {}
        for phase in (self.reference_logprobs, self.old_logprobs, self.critic_values, self.advantages,
                      self.train_critic, self.train_actor):
            metrics.update(phase(batch))
        return metrics

    def reference_logprobs(self, batch: Batch) -> dict[str, float]:
        if self.reference is None:
            return {}
        with self.timer("reference"):
            batch["ref_logprobs"] = self.reference.call("compute_logprobs", batch, "ref_logprobs", mode="dp")["ref_logprobs"]
        return {}

    def old_logprobs(self, batch: Batch) -> dict[str, float]:
        """Recomputed by the trainer (and compared with the inference logprobs), or taken from
        the inference engine when ``recompute_old_logprobs`` is off."""
        if not self.cfg.algorithm.recompute_old_logprobs:
            batch["old_logprobs"] = batch["infer_logprobs"]
            return {}
        with self.timer("old_logprobs"):
            batch["old_logprobs"] = self.actor_train.call("compute_logprobs", batch, "old_logprobs", mode="dp")["old_logprobs"]
        diff = (batch["old_logprobs"] - batch["infer_logprobs"]).abs()[batch["response_mask"].bool()]
        if diff.numel() == 0:
            return {}
        return {"rollout/train_infer_logprob_diff": float(diff.mean()),
                "rollout/train_infer_logprob_diff_max": float(diff.max())}

    def critic_values(self, batch: Batch) -> dict[str, float]:
        if self.critic is None:
            return {}
        with self.timer("critic_values"):
            values = self.critic.call("compute_values", batch, "values", mode="dp")["values"]
        batch["values"] = values
        batch["old_values"] = values
        return {}

    def advantages(self, batch: Batch) -> dict[str, float]:
        return batch_advantages(batch, self.cfg.algorithm, self.kl_ctl)

    def train_critic(self, batch: Batch) -> dict[str, float]:
        if self.critic is None:
            return {}
        with self.timer("critic_train"):
            return self._train(self.critic, self.cfg.critic, batch, self.critic_loss_fn)

    def train_actor(self, batch: Batch) -> dict[str, float]:
        with self.timer("actor_train"):
            return self._train(self.actor_train, self.cfg.actor_train, batch, self.actor_loss_fn,
                               early_stop_kl=self.cfg.algorithm.early_stop_kl)

    def _train(self, cluster: Any, role: Any, batch: Batch, loss_fn: Any, **kwargs: Any) -> dict[str, float]:
        # Step-mode and short batches need not divide evenly: pad with loss-masked copies so
        # every data-parallel rank gets the same number of micro-batches.
        padded, _ = batch.pad_rows_to_multiple(cluster.dp_size * role.training_args.per_device_train_batch_size)
        return mean_metrics(cluster.call("train", padded, loss_fn, self.cfg.algorithm.ppo_epochs, mode="dp", **kwargs))

    # ---- checkpoint ----------------------------------------------------------------------------
    def save(self, ckpt_dir: Path) -> dict[str, Any]:
        self.actor_train.call("save", str(ckpt_dir / "actor_train"))
        if self.critic is not None:
            self.critic.call("save", str(ckpt_dir / "critic"))
        return {"kl_coef": self.kl_ctl.state_dict()}

    def load(self, ckpt_dir: Path, state: dict[str, Any]) -> None:
        self.actor_train.call("load", str(ckpt_dir / "actor_train"))
        if self.critic is not None:
            self.critic.call("load", str(ckpt_dir / "critic"))
        self.kl_ctl.load_state_dict(state["kl_coef"])
        # self.version stays 0: the inference workers still hold the pretrained weights, so
        # the first step after a resume syncs the restored ones.
