"""TorchTrainStrategy: training on plain torch, DDP or FSDP2 (gloo on CPU, NCCL on GPU).

Implements :class:`roll.strategies.base.TrainingStrategy`. Options under
``strategy_args.strategy_config``: ``parallel: ddp | fsdp2`` (default ddp),
``reshard_after_forward`` (fsdp2, default true).

The worker initialises torch.distributed (``init_process_group`` helper below) before
:meth:`TorchTrainStrategy.setup`; every rank of the data-parallel group calls every method
(collectives inside: gradient all-reduce, FSDP all-gathers, global token counts).

Contracts other parts rely on:

- ``logprobs(batch) -> [B, T]``: position t holds ``log p(input_ids[t] | input_ids[<t])``,
  position 0 is 0. When the batch has ``response_mask``, the LM head runs only from the
  column before the first one any row has a response token in (HF ``logits_to_keep``): the
  columns left of it are 0 (no loss or KL term reads them). Step-mode batches put every
  response at the end of a prompt of similar length, so this skips most of the [B, T, V]
  logits (bench/train_step.py: 1.5x on the tiny model). ``position_ids`` are taken from the
  batch or derived from ``attention_mask`` (cumsum - 1), so left and right padding both work.
  A batch with ``temperature`` [B] (the sampling temperature of each row, from
  ``trajectories_to_batch``) is scored under ``logits / temperature``, the distribution the
  rows were sampled from; greedy rows (0) at 1. Training, old and reference logprobs and the
  entropy all go through this, so train/infer parity holds at any temperature.
- ``values(batch) -> [B, T]`` (critic): value of the prefix ending at token t.
- ``train_step(batch, loss_fn)``: ``batch`` is this rank's share of ONE mini-batch (one
  optimizer step). It is split into micro-batches of ``per_device_train_batch_size``; each
  micro-batch's ``meta`` gets ``global_num_tokens`` (sum of ``response_mask`` over the whole
  mini-batch on all data-parallel ranks), ``global_num_seqs``, ``dp_size``,
  ``micro_batch_index`` and ``num_micro_batches``. Then
  ``loss, metrics = loss_fn(micro_batch, logprobs, extra)`` with ``logprobs`` [b, T] (None for
  the critic, whose second argument is the value predictions [b, T] instead) and ``extra``
  holding ``entropy`` [b, T] when ``loss_fn.needs_entropy`` is true (``values`` for the
  critic). Per the contract in roll/algorithms/losses.py the loss_fn normalises by the GLOBAL
  counts; this strategy multiplies each micro-batch loss by ``dp_size`` before backward, so
  summing micro-batch gradients (no division by the number of micro-batches) and the DDP/FSDP
  all-reduce MEAN give exactly the gradient of the whole mini-batch loss, whatever the
  data-parallel size and micro-batching (tests/strategies/test_data_parallel_invariance.py). Then
  gradient clipping (``max_grad_norm``), AdamW and the LR schedule step. A non-finite
  gradient norm skips the optimizer step (counted in ``skipped_steps``). Returns ``loss``
  (the mini-batch loss: sum over micro-batches and ranks), ``grad_norm``, ``lr``,
  ``skipped_steps`` and the loss_fn's metrics averaged over micro-batches and ranks.
- ``named_parameters_for_sync(bucket_size_mb)``: full (FSDP-gathered) parameters with their
  Hugging Face names, in buckets; a generator every rank must drain (FSDP gathers are
  collective), the tensors are only meaningful to send from rank 0.
- ``save(dir)`` / ``load(dir)``: the model in HF format (``save_pretrained``, loadable with
  ``from_pretrained``) plus ``trainer_state.pt`` (full optimizer and scheduler state, step),
  read back with ``torch.load(weights_only=True)``: tensors and plain containers only.
"""
from __future__ import annotations

import datetime
import functools
import inspect
import math
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from roll.data.batch import Batch
from roll.utils.logging import get_logger

logger = get_logger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---- shared forward helpers (also used by hf_infer for train/infer parity) --------------------
def position_ids_for(batch: Batch) -> torch.Tensor:
    if "position_ids" in batch.tensors:
        return batch["position_ids"]
    return (batch["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)


def sampling_temperatures(batch: Batch) -> torch.Tensor | None:
    """[B] temperature each row was sampled with (``batch["temperature"]``), or None when the
    batch has none or every row is at 1. A greedy row (0) is scored at 1, as hf_infer reports it."""
    if "temperature" not in batch.tensors:
        return None
    t = batch["temperature"].float()
    t = torch.where(t > 0, t, torch.ones_like(t))
    return None if bool((t == 1).all()) else t


def _tempered(logits: torch.Tensor, temperature: torch.Tensor | None) -> torch.Tensor:
    logits = logits.float()
    return logits if temperature is None else logits / temperature.to(logits.device)[:, None, None]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: torch.Tensor | None = None) -> torch.Tensor:
    """logits [B, T, V] (position t predicts t+1), input_ids [B, T] -> [B, T], column 0 is 0.
    ``temperature`` [B]: score each row under logits / temperature (the sampling distribution)."""
    logits = _tempered(logits[:, :-1], temperature)
    target = input_ids[:, 1:]
    lp = logits.gather(-1, target[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return F.pad(lp, (1, 0))


def token_entropy(logits: torch.Tensor, temperature: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of the distribution that predicted each token, aligned like token_logprobs."""
    logp = _tempered(logits[:, :-1], temperature).log_softmax(-1)
    return F.pad(-(logp.exp() * logp).sum(-1), (1, 0))


def forward_logprobs(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    return model_forward(model, batch)[0]


_KEEPS_LOGITS: dict[type, bool] = {}


def _accepts_logits_to_keep(model: Any) -> bool:
    """Whether the causal LM under the DDP / DeepSpeed wrapper takes ``logits_to_keep``."""
    inner = model
    while hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):
        inner = inner.module
    cls = type(inner)
    if cls not in _KEEPS_LOGITS:
        _KEEPS_LOGITS[cls] = "logits_to_keep" in inspect.signature(inner.forward).parameters
    return _KEEPS_LOGITS[cls]


def logits_start(batch: Batch) -> int:
    """First column whose logits a loss token needs (column t predicts token t+1): the one
    before the first column holding a response token in any row; 0 without ``response_mask``
    or when it is empty."""
    if "response_mask" not in batch.tensors:
        return 0
    cols = batch["response_mask"].bool().any(0).nonzero()
    return max(int(cols[0]) - 1, 0) if len(cols) else 0


def model_forward(model: Any, batch: Batch, critic: bool = False, entropy: bool = False) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """One forward of a (wrapped) causal LM: ``(logprobs [B, T], extra)``; a critic returns
    ``(None, {"values": [B, T]})`` (the first logit is the value head); ``extra["entropy"]``
    when asked. The LM head runs from :func:`logits_start` on (earlier columns are 0). Shared
    by the torch and DeepSpeed strategies."""
    start = 0 if critic or not _accepts_logits_to_keep(model) else logits_start(batch)
    ids = batch["input_ids"]
    kwargs = {"logits_to_keep": ids.shape[1] - start} if start > 0 else {}
    out = model(input_ids=ids, attention_mask=batch["attention_mask"],
                position_ids=position_ids_for(batch), use_cache=False, **kwargs)
    if critic:
        return None, {"values": out.logits[..., 0].float()}
    temp = sampling_temperatures(batch)
    extra = {"entropy": F.pad(token_entropy(out.logits, temp), (start, 0))} if entropy else {}
    return F.pad(token_logprobs(out.logits, ids[:, start:], temp), (start, 0)), extra


def max_micro_batches(n_local: int, size: int, device: Any) -> int:
    """Sharded forwards (FSDP, ZeRO-3) are collective: every rank must run as many
    micro-batches as the busiest rank."""
    n = torch.tensor([math.ceil(n_local / size)], device=device)
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    return int(n.item())

def global_loss_normalizers(batch: Batch, device: Any) -> tuple[float, float]:
    """Loss tokens, and sequences with at least one loss token, of the mini-batch summed over
    every data-parallel rank (see roll.algorithms.aggregation.loss_normalizers)."""
    mask = batch["response_mask"] if "response_mask" in batch.tensors else batch["attention_mask"]
    totals = torch.tensor([float(mask.sum()), float(mask.bool().any(-1).sum())], dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    return float(totals[0]), float(totals[1])


def reduce_step_metrics(metric_sums: dict[str, float], n_micro: int, dp_size: int, device: Any) -> dict[str, float]:
    """The loss_fn's metrics: mean over micro-batches, then over data-parallel ranks."""
    keys = sorted(metric_sums)
    reduced = torch.tensor([metric_sums[k] / n_micro for k in keys], dtype=torch.float64, device=device)
    if len(reduced):
        dist.all_reduce(reduced)
        reduced /= dp_size
    return {k: float(v) for k, v in zip(keys, reduced.tolist())}



def lr_factor(step: int, kind: str, warmup_steps: int, num_training_steps: int | None) -> float:
    """LR multiplier after ``step`` optimizer steps: linear warmup from 0 over ``warmup_steps``,
    then constant, or a linear / cosine decay that reaches 0 at ``num_training_steps`` and stays
    there (a schedule that runs past its length does not restart, as a periodic cosine would)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    if kind == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, num_training_steps - warmup_steps))
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown lr_scheduler_type {kind!r}; choose constant, linear or cosine")


def make_lr_scheduler(optimizer: torch.optim.Optimizer, args: Any, num_training_steps: int | None) -> torch.optim.lr_scheduler.LambdaLR:
    """The role's LR schedule (``training_args.lr_scheduler_type``), stepped once per optimizer step."""
    kind = args.lr_scheduler_type
    if kind != "constant" and not num_training_steps:
        raise ValueError(f"lr_scheduler_type {kind!r} needs training_args.num_training_steps (or the pipeline's max_steps)")
    fn = functools.partial(lr_factor, kind=kind, warmup_steps=args.warmup_steps, num_training_steps=num_training_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


def init_process_group(rank: int, world_size: int, master_addr: str, master_port: int, timeout_s: float = 600.0) -> None:
    """(Re)create the default process group: NCCL when CUDA is present, else gloo."""
    if dist.is_initialized():
        dist.destroy_process_group()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{master_addr}:{master_port}", rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


class TorchTrainStrategy:
    """DDP / FSDP2 trainer of a HF causal LM (or its value-head critic); see module docstring."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, critic: bool = False,
                 seed: int = 42, num_training_steps: int | None = None, device: str | None = None):
        opts = dict(worker_config.strategy_args.strategy_config)
        self.parallel = opts.pop("parallel", "ddp")
        self.reshard_after_forward = bool(opts.pop("reshard_after_forward", True))
        if opts:
            raise ValueError(f"torch_train: unknown strategy_config keys {sorted(opts)}; valid: parallel, reshard_after_forward")
        if self.parallel not in ("ddp", "fsdp2"):
            raise ValueError(f"torch_train: strategy_config.parallel must be ddp or fsdp2, got {self.parallel!r}")
        self.cfg = worker_config
        self.args = worker_config.training_args
        self.model_path = model_path or worker_config.model_name_or_path
        if not self.model_path:
            raise ValueError("torch_train: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.critic = critic
        self.seed = seed
        self.num_training_steps = self.args.num_training_steps or num_training_steps
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model: torch.nn.Module | None = None
        self.step = 0
        self.skipped_steps = 0

    # ---- setup ------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def dp_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    def _load_hf(self) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

        dtype = _DTYPES[self.cfg.dtype]
        torch.manual_seed(self.seed)  # a freshly initialised value head is identical on every rank
        if self.critic:
            model = AutoModelForTokenClassification.from_pretrained(self.model_path, num_labels=1, dtype=dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        if self.args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return model.to(self.device)

    def setup(self) -> None:
        """Load, wrap (DDP/FSDP2), build AdamW and the LR schedule. Needs the process group."""
        if not dist.is_initialized():
            raise RuntimeError("torch_train: call init_process_group before setup (the worker does it)")
        model = self._load_hf()
        if self.parallel == "ddp":
            self.model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if self.device == "cuda" else None)
        else:
            from torch.distributed.fsdp import fully_shard

            layers = getattr(getattr(model, "model", None), "layers", None)
            for layer in layers if layers is not None else []:
                fully_shard(layer, reshard_after_forward=self.reshard_after_forward)
            fully_shard(model, reshard_after_forward=self.reshard_after_forward)
            self.model = model
        a = self.args
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=a.lr, betas=tuple(a.adam_betas),
                                           eps=a.adam_eps, weight_decay=a.weight_decay)
        self.scheduler = self._make_scheduler()

    def _make_scheduler(self):
        return make_lr_scheduler(self.optimizer, self.args, self.num_training_steps)

    @property
    def hf_model(self) -> torch.nn.Module:
        return _unwrap(self.model)

    # ---- forward ----------------------------------------------------------------------------
    def _forward(self, batch: Batch, entropy: bool = False) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        return model_forward(self.model, batch, self.critic, entropy)

    def _micro_batches_in_step(self, n_local: int, size: int) -> int:
        return max_micro_batches(n_local, size, self.device)

    @torch.no_grad()
    def _forward_only(self, batch: Batch, key: str) -> torch.Tensor:
        self.model.eval()
        size = max(1, self.cfg.infer_batch_size)
        parts = batch.to(self.device).split(size) if len(batch) else []
        n_steps = self._micro_batches_in_step(len(batch), size)
        outs = []
        for i in range(n_steps):
            # a rank with fewer rows (or none) runs a throw-away micro-batch to keep collectives in step
            mb = parts[i] if i < len(parts) else (parts[0] if parts else self._dummy_batch())
            lp, extra = self._forward(mb)
            if i < len(parts):
                outs.append((extra["values"] if key == "values" else lp).cpu())
        self.model.train()
        if not outs:
            return torch.zeros_like(batch["input_ids"], dtype=torch.float32)
        width = batch["input_ids"].shape[1]
        return torch.cat([F.pad(o, (0, width - o.shape[1])) for o in outs], dim=0)

    def _dummy_batch(self) -> Batch:
        one = torch.zeros((1, 2), dtype=torch.long, device=self.device)
        return Batch({"input_ids": one, "attention_mask": torch.ones_like(one)})

    def logprobs(self, batch: Batch) -> torch.Tensor:
        if self.critic:
            raise RuntimeError("logprobs() on a critic; use values()")
        return self._forward_only(batch, "logprobs")

    def values(self, batch: Batch) -> torch.Tensor:
        if not self.critic:
            raise RuntimeError("values() needs the critic variant (critic=True)")
        return self._forward_only(batch, "values")

    # ---- training -----------------------------------------------------------------------------
    def train_step(self, batch: Batch, loss_fn: Any) -> dict[str, float]:
        if len(batch) == 0:
            raise ValueError("train_step on an empty batch")
        batch = batch.to(self.device)
        micro = batch.split(max(1, self.args.per_device_train_batch_size))
        n_micro = self._micro_batches_in_step(len(batch), max(1, self.args.per_device_train_batch_size))
        if n_micro != len(micro):
            raise ValueError(f"train_step: ranks got different numbers of micro-batches ({len(micro)} here, {n_micro} max); "
                             "the mini-batch must split evenly across data-parallel ranks")
        global_tokens, global_seqs = global_loss_normalizers(batch, self.device)
        need_entropy = bool(getattr(loss_fn, "needs_entropy", False))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        metric_sums: dict[str, float] = {}
        for i, mb in enumerate(micro):
            mb.meta.update(global_num_tokens=global_tokens, global_num_seqs=global_seqs, dp_size=self.dp_size,
                           micro_batch_index=i, num_micro_batches=len(micro))
            last = i == len(micro) - 1
            self._set_grad_sync(last)  # all-reduce / reduce-scatter gradients once, on the last micro-batch
            logprobs, extra = self._forward(mb, entropy=need_entropy)
            loss, metrics = loss_fn(mb, extra["values"] if self.critic else logprobs, extra)
            # The loss is this rank's share of the mini-batch loss (global normalisers); DDP and
            # FSDP average gradients over ranks, so scale by dp_size to get their sum.
            (loss * self.dp_size).backward()
            loss_sum += loss.detach().double()
            for k, v in (metrics or {}).items():
                metric_sums[k] = metric_sums.get(k, 0.0) + float(v)
        grad_norm = self._clip_grad_norm()
        if math.isfinite(grad_norm):
            self.optimizer.step()
        else:
            self.skipped_steps += 1
            logger.warning("non-finite grad norm %s at step %d: optimizer step skipped", grad_norm, self.step)
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        self.step += 1
        dist.all_reduce(loss_sum)  # the ranks' shares add up to the mini-batch loss
        out = reduce_step_metrics(metric_sums, len(micro), self.dp_size, self.device)
        out.update(loss=float(loss_sum), grad_norm=grad_norm, lr=lr, skipped_steps=float(self.skipped_steps))
        return out

    def _set_grad_sync(self, enabled: bool) -> None:
        if self.parallel == "ddp":
            self.model.require_backward_grad_sync = enabled
        else:
            self.model.set_requires_gradient_sync(enabled)

    def _clip_grad_norm(self) -> float:
        max_norm = self.args.max_grad_norm if self.args.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        return float(norm)

    # ---- weight sync ----------------------------------------------------------------------------
    def named_parameters_for_sync(self, bucket_size_mb: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
        limit = max(1, int(bucket_size_mb)) * 1024 * 1024
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0
        with torch.no_grad():
            for name, p in self.hf_model.named_parameters():
                t = p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
                nbytes = t.numel() * t.element_size()
                if bucket and size + nbytes > limit:
                    yield bucket
                    bucket, size = [], 0
                bucket.append((name, t))
                size += nbytes
        if bucket:
            yield bucket

    def num_parameter_bytes(self) -> int:
        # DTensor.numel() is the global (unsharded) size, so this is the full model under FSDP too
        return sum(p.numel() * p.element_size() for p in self.hf_model.parameters())

    # ---- checkpoints -----------------------------------------------------------------------------
    def _state_options(self):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=True)

    def save(self, path: str) -> None:
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        model_sd = get_model_state_dict(self.model, options=self._state_options())
        optim_sd = get_optimizer_state_dict(self.model, self.optimizer, options=self._state_options())
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            self.hf_model.save_pretrained(path, state_dict=model_sd)
            torch.save({"optimizer": optim_sd, "scheduler": self.scheduler.state_dict(), "step": self.step,
                        "skipped_steps": self.skipped_steps}, os.path.join(path, "trainer_state.pt"))
        dist.barrier()

    def load(self, path: str) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        from roll.utils.checkpoint import safe_torch_load

        # from_pretrained restores tied weights that save_pretrained de-duplicated
        full = type(self.hf_model).from_pretrained(path, dtype=_DTYPES[self.cfg.dtype]).state_dict()
        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, full, options=opts)
        # tensors and plain containers only: a crafted trainer_state.pt cannot run code
        state = safe_torch_load(os.path.join(path, "trainer_state.pt"))
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"], options=opts)
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.skipped_steps = int(state.get("skipped_steps", 0))

    # ---- colocation ----------------------------------------------------------------------------
    def offload(self) -> None:
        """Move weights and optimizer state to host memory while a colocated role runs (no-op on CPU)."""
        if self.device != "cpu":
            self._move("cpu")
            torch.cuda.empty_cache()

    def reload(self) -> None:
        if self.device != "cpu":
            self._move(self.device)

    def _move(self, device: str) -> None:
        self.model.to(device)
        for state in self.optimizer.state.values():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    state[k] = v.to(device)
