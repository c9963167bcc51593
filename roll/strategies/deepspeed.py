"""DeepSpeedStrategy: ZeRO-2/3 training behind :class:`roll.strategies.base.TrainingStrategy`.

Same constructor, call pattern and contracts as :mod:`roll.strategies.torch_train` (read its
docstring: logprobs alignment, ``train_step`` micro-batching and the global-count loss
normalisation, bucketed HF-named sync, HF-format checkpoints). Runs on GPU (NCCL) and on CPU
over gloo (the worker creates the process group; DeepSpeed adopts it).

``strategy_args.strategy_config`` IS a DeepSpeed config (passed through), plus one roll
shorthand, ``zero_stage`` (default 2). roll fills only what the config leaves unset:
``train_micro_batch_size_per_gpu`` (``per_device_train_batch_size``), ``gradient_clipping``
(``max_grad_norm``), ``bf16``/``fp16`` from the role's ``dtype``, and
``managed_gradient_accumulation: false`` with ``gradient_accumulation_steps: 1``: the strategy
owns accumulation (one ``engine.step()`` per ``train_step`` over however many micro-batches the
mini-batch has; ``backward`` is not scaled by the accumulation count, per the loss contract).
The optimizer is torch AdamW (no compiled DeepSpeed op needed on CPU) with roll's LR schedule,
both handed to ``deepspeed.initialize`` so its checkpoints carry their state.

Weight sync gathers ZeRO-3 partitions one parameter at a time (``GatheredParameters``, a
collective every rank must enter); ZeRO-2 parameters are already whole.

Checkpoints: ``save(dir)`` writes the model in HF format (``from_pretrained``-loadable) plus
DeepSpeed's own (partitioned optimizer + scheduler) checkpoint under ``dir/deepspeed``.
DeepSpeed's loader unpickles those files with ``weights_only=False``; here its checkpoint
engine reads them with ``torch.load(weights_only=True)`` instead, allowing only the few plain
DeepSpeed classes they hold (``roll.utils.checkpoint.DEEPSPEED_SAFE_GLOBALS``), so a crafted
file cannot run code.

Not done here: DeepSpeed skips steps only for fp16 overflow; a non-finite gradient norm in
fp32/bf16 is reported in ``grad_norm`` and counted in ``nonfinite_grad_steps``.
"""
from __future__ import annotations

import copy
import importlib
import math
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from roll.data.batch import Batch
from roll.strategies.torch_train import (global_loss_normalizers, make_lr_scheduler, max_micro_batches, model_forward,
                                        reduce_step_metrics)
from roll.utils.checkpoint import DEEPSPEED_SAFE_GLOBALS, safe_torch_load
from roll.utils.logging import get_logger

logger = get_logger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _import_deepspeed():
    try:
        import deepspeed
    except ImportError as e:
        raise ImportError(f"the deepspeed strategy needs DeepSpeed ({e}); install the `deepspeed` extra "
                          "(pip install -e '.[deepspeed]')") from e
    return deepspeed


def build_ds_config(strategy_config: dict[str, Any], training_args: Any, dtype: str, dp_size: int) -> dict[str, Any]:
    """The DeepSpeed config roll runs with: the user's, plus roll's defaults where unset."""
    cfg = copy.deepcopy(dict(strategy_config))
    stage = int(cfg.pop("zero_stage", cfg.get("zero_optimization", {}).get("stage", 2)))
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"deepspeed: zero stage must be 0-3, got {stage}")
    cfg.setdefault("zero_optimization", {})["stage"] = stage
    gas = int(cfg.setdefault("gradient_accumulation_steps", 1))
    if gas != 1 or cfg.setdefault("managed_gradient_accumulation", False):
        raise ValueError("deepspeed: roll accumulates gradients itself over each train_step's micro-batches; "
                         "leave gradient_accumulation_steps / managed_gradient_accumulation unset "
                         "(use training_args.per_device_train_batch_size and the mini-batch size instead)")
    micro = int(cfg.setdefault("train_micro_batch_size_per_gpu", max(1, training_args.per_device_train_batch_size)))
    cfg.setdefault("train_batch_size", micro * dp_size)
    cfg.setdefault("gradient_clipping", float(training_args.max_grad_norm) if training_args.max_grad_norm > 0 else 0.0)
    if dtype == "bfloat16":
        cfg.setdefault("bf16", {"enabled": True})
    elif dtype == "float16":
        cfg.setdefault("fp16", {"enabled": True})
    cfg.setdefault("zero_allow_untested_optimizer", True)
    cfg.setdefault("steps_per_print", 10 ** 9)  # roll's tracker logs; keep DeepSpeed quiet
    cfg.setdefault("wall_clock_breakdown", False)
    return cfg


def deepspeed_safe_globals() -> list[type]:
    """The classes of :data:`DEEPSPEED_SAFE_GLOBALS` (one list serves the driver's check and this load)."""
    out = []
    for dotted in DEEPSPEED_SAFE_GLOBALS:
        module, _, name = dotted.rpartition(".")
        out.append(getattr(importlib.import_module(module), name))
    return out


def make_checkpoint_loads_safe(engine: Any) -> None:
    """Route every file DeepSpeed's ``load_checkpoint`` reads through ``safe_torch_load``."""
    from deepspeed.runtime.checkpoint_engine import TorchCheckpointEngine

    ckpt_engine = engine.checkpoint_engine
    if type(ckpt_engine) is not TorchCheckpointEngine:
        raise ValueError(f"deepspeed: checkpoint engine {type(ckpt_engine).__name__} is not supported: roll loads "
                         "checkpoints only through TorchCheckpointEngine with weights_only=True")
    allowed = deepspeed_safe_globals()

    def load(path: str, map_location: Any = None) -> Any:
        return safe_torch_load(path, allowed, map_location=map_location)

    ckpt_engine.load = load  # instance attribute: saving keeps DeepSpeed's own code


class DeepSpeedStrategy:
    """DeepSpeed ZeRO trainer of a HF causal LM (or its value-head critic); see module docstring."""

    def __init__(self, worker_config: Any, model_path: str | None = None, *, critic: bool = False,
                 seed: int = 42, num_training_steps: int | None = None, device: str | None = None):
        self.cfg = worker_config
        self.args = worker_config.training_args
        self.strategy_config = dict(worker_config.strategy_args.strategy_config)
        self.model_path = model_path or worker_config.model_name_or_path
        if not self.model_path:
            raise ValueError("deepspeed: no model path (set model_name_or_path or the pipeline's pretrain)")
        self.critic = critic
        self.seed = seed
        self.num_training_steps = self.args.num_training_steps or num_training_steps
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.engine = None
        self.step = 0
        self.nonfinite_grad_steps = 0

    # ---- setup ------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def dp_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def zero_stage(self) -> int:
        return int(self.ds_config["zero_optimization"]["stage"])

    def setup(self) -> None:
        """Load the HF model, build AdamW + schedule, wrap with DeepSpeed. Needs the process group."""
        if not dist.is_initialized():
            raise RuntimeError("deepspeed: call init_process_group before setup (the worker does it)")
        deepspeed = _import_deepspeed()
        from transformers import (
            AutoModelForCausalLM,
            AutoModelForTokenClassification,
        )

        self.ds_config = build_ds_config(self.strategy_config, self.args, self.cfg.dtype, self.dp_size)
        # DeepSpeed reads its rank from the launcher's env vars; roll's workers create the group
        # themselves, so describe it (each worker sees its own device as index 0 under Ray)
        os.environ.setdefault("RANK", str(dist.get_rank()))
        os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()))
        os.environ.setdefault("LOCAL_RANK", str(torch.cuda.current_device()) if self.device == "cuda" else "0")
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
        torch.manual_seed(self.seed)  # identical fresh value heads on every rank
        dtype = _DTYPES[self.cfg.dtype]
        if self.critic:
            model = AutoModelForTokenClassification.from_pretrained(self.model_path, num_labels=1, dtype=dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=dtype)
        if self.args.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        a = self.args
        optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=tuple(a.adam_betas), eps=a.adam_eps,
                                      weight_decay=a.weight_decay)
        scheduler = make_lr_scheduler(optimizer, a, self.num_training_steps)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_config)
        make_checkpoint_loads_safe(self.engine)

    @property
    def hf_model(self) -> torch.nn.Module:
        return self.engine.module

    # ---- forward ----------------------------------------------------------------------------
    def _forward(self, batch: Batch, entropy: bool = False) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        return model_forward(self.engine, batch, self.critic, entropy)

    def _max_micro_batches(self, n_local: int, size: int) -> int:
        return max_micro_batches(n_local, size, self.device)

    @torch.no_grad()
    def _forward_only(self, batch: Batch, key: str) -> torch.Tensor:
        self.engine.eval()
        size = max(1, self.cfg.infer_batch_size)
        parts = batch.to(self.device).split(size) if len(batch) else []
        n_steps = self._max_micro_batches(len(batch), size)
        outs = []
        for i in range(n_steps):
            if not parts:
                raise ValueError("deepspeed: a rank received an empty batch while others have rows")
            mb = parts[i] if i < len(parts) else parts[0]  # repeat a real micro-batch to keep collectives in step
            lp, extra = self._forward(mb)
            if i < len(parts):
                outs.append((extra["values"] if key == "values" else lp).float().cpu())
        self.engine.train()
        if not outs:
            return torch.zeros_like(batch["input_ids"], dtype=torch.float32)
        width = batch["input_ids"].shape[1]
        return torch.cat([F.pad(o, (0, width - o.shape[1])) for o in outs], dim=0)

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
        size = max(1, self.args.per_device_train_batch_size)
        micro = batch.split(size)
        if self._max_micro_batches(len(batch), size) != len(micro):
            raise ValueError("train_step: ranks got different numbers of micro-batches; "
                             "the mini-batch must split evenly across data-parallel ranks")
        global_tokens, global_seqs = global_loss_normalizers(batch, self.device)
        need_entropy = bool(getattr(loss_fn, "needs_entropy", False))
        self.engine.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        metric_sums: dict[str, float] = {}
        for i, mb in enumerate(micro):
            mb.meta.update(global_num_tokens=global_tokens, global_num_seqs=global_seqs, dp_size=self.dp_size,
                           micro_batch_index=i, num_micro_batches=len(micro))
            logprobs, extra = self._forward(mb, entropy=need_entropy)
            loss, metrics = loss_fn(mb, extra["values"] if self.critic else logprobs, extra)
            # this rank's share of the mini-batch loss; DeepSpeed averages gradients over ranks
            self.engine.backward(loss * self.dp_size, scale_wrt_gas=False)
            loss_sum += loss.detach().double()
            for k, v in (metrics or {}).items():
                metric_sums[k] = metric_sums.get(k, 0.0) + float(v)
        lr = self.scheduler.get_last_lr()[0]
        self.engine.step()  # the accumulation boundary: reduce, clip, AdamW, LR schedule
        norm = self.engine.get_global_grad_norm()
        grad_norm = float(norm) if norm is not None else float("nan")
        if not math.isfinite(grad_norm):
            self.nonfinite_grad_steps += 1
            logger.warning("deepspeed: non-finite grad norm %s at step %d", grad_norm, self.step)
        self.step += 1
        dist.all_reduce(loss_sum)  # the ranks' shares add up to the mini-batch loss
        out = reduce_step_metrics(metric_sums, len(micro), self.dp_size, self.device)
        out.update(loss=float(loss_sum), grad_norm=grad_norm, lr=lr, nonfinite_grad_steps=float(self.nonfinite_grad_steps))
        return out

    # ---- weight sync ----------------------------------------------------------------------------
    def _full_params(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) one at a time; under ZeRO-3 each is gathered collectively."""
        import deepspeed

        for name, p in self.hf_model.named_parameters():
            if self.zero_stage == 3:
                with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                    yield name, p.data.detach().clone()
            else:
                yield name, p.detach()

    def named_parameters_for_sync(self, bucket_size_mb: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
        limit = max(1, int(bucket_size_mb)) * 1024 * 1024
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0
        with torch.no_grad():
            for name, t in self._full_params():
                nbytes = t.numel() * t.element_size()
                if bucket and size + nbytes > limit:
                    yield bucket
                    bucket, size = [], 0
                bucket.append((name, t))
                size += nbytes
        if bucket:
            yield bucket

    def num_parameter_bytes(self) -> int:
        total = 0
        for p in self.hf_model.parameters():
            numel = getattr(p, "ds_numel", None) or p.numel()  # ZeRO-3 keeps the full size in ds_numel
            total += numel * p.element_size()
        return total

    # ---- checkpoints -----------------------------------------------------------------------------
    def save(self, path: str) -> None:
        full = {name: t.cpu() for name, t in self._full_params()}
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            self.hf_model.save_pretrained(path, state_dict=full)
        self.engine.save_checkpoint(os.path.join(path, "deepspeed"), tag="roll",
                                    client_state={"step": self.step, "nonfinite_grad_steps": self.nonfinite_grad_steps})
        dist.barrier()

    def load(self, path: str) -> None:
        _, client = self.engine.load_checkpoint(os.path.join(path, "deepspeed"), tag="roll",
                                                load_optimizer_states=True, load_lr_scheduler_states=True)
        if client is None:
            raise FileNotFoundError(f"deepspeed: no DeepSpeed checkpoint under {path}/deepspeed")
        self.step = int(client.get("step", 0))
        self.nonfinite_grad_steps = int(client.get("nonfinite_grad_steps", 0))

    # ---- colocation ----------------------------------------------------------------------------
    def offload(self) -> None:
        """Move ZeRO-3 states to host memory while a colocated role runs (no-op on CPU)."""
        if self.device != "cpu" and hasattr(self.engine, "offload_states"):
            self.engine.offload_states()
            torch.cuda.empty_cache()

    def reload(self) -> None:
        if self.device != "cpu" and hasattr(self.engine, "reload_states"):
            self.engine.reload_states()
