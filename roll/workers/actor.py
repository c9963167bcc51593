"""ActorWorker: the policy-training role (``actor_train``), one rank of a data-parallel group.

Holds a training strategy (``strategy_args.strategy_name``, registered in STRATEGIES; the
constructor contract is ``cls(worker_config, model_path, critic=, seed=, num_training_steps=)``
plus ``setup()``, see roll/strategies/hf_train.py and torch_train.py). Call it through a Cluster:

- ``compute_logprobs(batch, key="old_logprobs")`` (dispatch ``dp``) -> Batch with ``key`` [B, T];
- ``train_step(batch, loss_fn)`` (``dp``): one optimizer step on this rank's share of a
  mini-batch; ``train(batch, loss_fn, epochs)`` (``dp``): every mini-batch of
  ``per_device_train_batch_size x gradient_accumulation_steps`` rows of this rank's share, for
  ``epochs`` passes, stopping early past ``early_stop_kl``. Metrics: the strategy's ``loss``, ``grad_norm``, ``lr``, ``nonfinite_grad_steps``
  under ``actor/``; the loss_fn's own (already namespaced) metrics as they are, averaged over
  the optimizer steps; with a loss that reports ``ppo_kl``, also ``ppo_kl_first`` (the first
  mini-batch's, before any update: the trainer/engine log-prob gap) and ``ppo_kl_max``;
- ``save(dir)`` / ``load(dir)`` (``all``), ``offload`` / ``reload``;
- ``weight_sync_*``: the trainer side of roll/distributed/model_update.py.
"""
from __future__ import annotations

from typing import Any

from roll.data.batch import Batch
from roll.distributed.model_update import WeightSender
from roll.registry import STRATEGIES
from roll.workers.base import Worker


class ActorWorker(Worker):
    collective = True
    metric_prefix = "actor"
    is_critic = False

    def __init__(self, role: str, rank: int, world_size: int, worker_config: Any, *,
                 num_training_steps: int | None = None, **kwargs: Any):
        super().__init__(role, rank, world_size, worker_config, **kwargs)
        self.num_training_steps = num_training_steps
        self.strategy = None
        self.senders: dict[str, WeightSender] = {}  # one per ModelUpdateGroup

    def setup(self, master_addr: str, master_port: int) -> None:
        from roll.strategies.hf_train import init_process_group

        init_process_group(self.rank, self.world_size, master_addr, master_port, self.worker_config.call_timeout_s)
        cls = STRATEGIES.get(self.worker_config.strategy_args.strategy_name)
        self.strategy = cls(self.worker_config, self.model_path, critic=self.is_critic, seed=self.seed,
                            num_training_steps=self.num_training_steps)
        self.strategy.setup()

    # ---- compute ----------------------------------------------------------------------------
    def compute_logprobs(self, batch: Batch, key: str = "old_logprobs") -> Batch:
        return Batch({key: self.strategy.logprobs(batch)})

    def _namespaced(self, metrics: dict[str, float]) -> dict[str, float]:
        return {k if "/" in k else f"{self.metric_prefix}/{k}": v for k, v in metrics.items()}

    def train_step(self, batch: Batch, loss_fn: Any) -> dict[str, float]:
        return self._namespaced(self.strategy.train_step(batch, loss_fn))

    def train(self, batch: Batch, loss_fn: Any, epochs: int = 1, early_stop_kl: float | None = None) -> dict[str, float]:
        """All optimizer steps of one rollout batch; metrics averaged over steps. With
        ``early_stop_kl``, training on the batch ends after the first mini-batch whose
        ``ppo_kl`` (averaged over ranks, so every rank stops at the same step) exceeds it."""
        ta = self.worker_config.training_args
        mini = ta.per_device_train_batch_size * ta.gradient_accumulation_steps
        sums: dict[str, float] = {}
        steps = 0
        stopped_kl = None
        kls: list[float] = []
        kl_key = f"{self.metric_prefix}/ppo_kl"
        for _ in range(epochs):
            for part in batch.split(mini):
                metrics = self.train_step(part, loss_fn)
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                steps += 1
                if kl_key in metrics:
                    kls.append(float(metrics[kl_key]))
                if early_stop_kl is not None:
                    kl = self._mean_over_ranks(metrics.get(kl_key))
                    if kl > early_stop_kl:
                        stopped_kl = kl
                        break
            if stopped_kl is not None:
                break
        out = {k: v / max(steps, 1) for k, v in sums.items()}
        out[f"{self.metric_prefix}/optimizer_steps"] = float(steps)
        if kls:
            # the first mini-batch runs before any update of this batch: its KL is the gap between the
            # trainer's log-probs and the old ones (the engine's without recompute_old_logprobs); the
            # largest shows one batch moving the policy far where the mean over mini-batches hides it
            out[f"{kl_key}_first"] = kls[0]
            out[f"{kl_key}_max"] = max(kls)
        if early_stop_kl is not None:
            out[f"{self.metric_prefix}/early_stopped"] = float(stopped_kl is not None)
            if stopped_kl is not None:
                out[f"{self.metric_prefix}/early_stop_ppo_kl"] = stopped_kl
        return out

    def _mean_over_ranks(self, value: float | None) -> float:
        """Mean of ``value`` over the ranks that have one (a Megatron rank off the last pipeline
        stage has no loss metrics); collective, so every rank takes the same decision."""
        import torch
        import torch.distributed as dist

        if not dist.is_initialized():
            if value is None:
                raise KeyError(f"early_stop_kl needs the loss_fn metric {self.metric_prefix}/ppo_kl")
            return float(value)
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        t = torch.tensor([0.0 if value is None else float(value), float(value is not None)], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        if t[1] == 0:
            raise KeyError(f"early_stop_kl needs the loss_fn metric {self.metric_prefix}/ppo_kl")
        return float(t[0] / t[1])

    def save(self, path: str) -> None:
        self.strategy.save(path)

    def load(self, path: str) -> None:
        self.strategy.load(path)

    # ---- weight sync (trainer side) -------------------------------------------------------------
    def weight_sync_reset(self, group: str) -> None:
        old = self.senders.pop(group, None)
        if old is not None:
            old.detach_shared()
        self.senders[group] = WeightSender()

    def weight_sync_attach_shared(self, group: str, layouts: list[dict]) -> dict[str, Any]:
        return self.senders[group].attach_shared(layouts)

    def weight_sync_set_ipc_receivers(self, group: str, receivers: list[Any]) -> None:
        self.senders[group].ipc_receivers = list(receivers)

    def weight_sync_init_broadcast(self, group: str, master_addr: str, master_port: int, world_size: int,
                                   receivers: list[Any], timeout_s: float) -> None:
        self.senders[group].init_broadcast(group, master_addr, master_port, world_size, receivers, timeout_s)

    def weight_sync_send(self, group: str, version: int, bucket_size_mb: int, publish: bool = False,
                         lock_timeout_s: float | None = None) -> dict[str, Any]:
        """``publish``: the one-call locked path (rank 0 locks the receivers' blocks, writes and
        sets their version); otherwise the driver pauses and publishes around this call."""
        if group not in self.senders:
            return {"linked": False}  # restarted since the links were built: the group rebuilds them
        buckets = self.strategy.named_parameters_for_sync(bucket_size_mb)
        sender = self.senders[group]  # ranks > 0 only drain the generator (FSDP gathers are collective)
        return sender.send(buckets, version, self.rank == 0, self.worker_config.call_timeout_s, publish, lock_timeout_s)
