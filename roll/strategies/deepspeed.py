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
DeepSpeed's own (partitioned optimizer + scheduler) checkpoint under ``dir/deepspeed``. With
``lora``: the adapters under ``dir/adapter``, the merged model when ``lora.save_merged``, and
DeepSpeed's checkpoint without the frozen base (``exclude_frozen_parameters``); the adapters
come back from DeepSpeed's own files on load.
DeepSpeed's loader unpickles those files with ``weights_only=False``; here its checkpoint
engine reads them with ``torch.load(weights_only=True)`` instead, allowing only the few plain
DeepSpeed classes they hold (``roll.utils.checkpoint.DEEPSPEED_SAFE_GLOBALS``), so a crafted
file cannot run code.

The micro-batch loop (with sequence packing), forward-only pass, bucketing and metrics are
the shared :class:`roll.strategies.hf_train.HFTrainStrategy`'s; this module adds the engine.

Not done here: DeepSpeed skips steps only for fp16 overflow; a non-finite gradient norm in
fp32/bf16 is reported in ``grad_norm`` and counted in ``nonfinite_grad_steps`` (the step is
taken).
"""
from __future__ import annotations

import copy
import enum
import importlib
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from roll.strategies.hf_train import HFTrainStrategy
from roll.utils.checkpoint import DEEPSPEED_SAFE_GLOBALS, safe_torch_load


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
    save_with = ckpt_engine.save

    def load(path: str, map_location: Any = None) -> Any:
        return safe_torch_load(path, allowed, map_location=map_location)

    def save(state_dict: Any, path: str) -> Any:
        return save_with(_plain_int_enums(state_dict), path)

    ckpt_engine.load = load  # instance attributes: the engine's own code does the rest
    ckpt_engine.save = save


def _plain_int_enums(obj: Any) -> Any:
    """``obj`` with int-valued enum members (ZeRO's ``ZeroStageEnum``) as plain ints, inside dicts,
    lists and tuples. Python 3.11.0-3.11.4 pickle such members as ``getattr(cls, name)``, which
    no weights_only load accepts; an int compares equal to the member, so DeepSpeed's checks on
    load still hold. Containers are copied, tensors are not."""
    if isinstance(obj, enum.Enum) and isinstance(obj, int):
        return int(obj)
    if isinstance(obj, dict):
        return {k: _plain_int_enums(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain_int_enums(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_plain_int_enums(v) for v in obj)
    return obj


class DeepSpeedStrategy(HFTrainStrategy):
    """DeepSpeed ZeRO trainer of a HF causal LM (or its value-head critic); see module docstring."""

    name = "deepspeed"

    def _configure(self, opts: dict[str, Any]) -> None:
        self.strategy_config = opts  # a DeepSpeed config: passed through (build_ds_config)

    @property
    def zero_stage(self) -> int:
        return int(self.ds_config["zero_optimization"]["stage"])

    def _load_hf(self) -> torch.nn.Module:
        # DeepSpeed moves (and under ZeRO-3 partitions) the model itself: keep it on the host until then
        device, self.device = self.device, "cpu"
        try:
            return super()._load_hf()
        finally:
            self.device = device

    def _wrap(self, model: torch.nn.Module) -> None:
        deepspeed = _import_deepspeed()
        self.ds_config = build_ds_config(self.strategy_config, self.args, self.cfg.dtype, self.dp_size)
        # DeepSpeed reads its rank from the launcher's env vars; roll's workers create the group
        # themselves, so describe it (each worker sees its own device as index 0 under Ray)
        os.environ.setdefault("RANK", str(dist.get_rank()))
        os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()))
        os.environ.setdefault("LOCAL_RANK", str(torch.cuda.current_device()) if self.device == "cuda" else "0")
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
        optimizer, scheduler = self._make_optimizer(model.parameters())
        self.model, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=self.ds_config)
        make_checkpoint_loads_safe(self.model)

    @property
    def hf_model(self) -> torch.nn.Module:
        return self.model.module

    # ---- training hooks -------------------------------------------------------------------------
    def _backward(self, loss: torch.Tensor) -> None:
        self.model.backward(loss, scale_wrt_gas=False)

    def _optimizer_step(self) -> float:
        self.model.step()  # the accumulation boundary: reduce, clip, AdamW, LR schedule
        norm = self.model.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def _full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) one at a time; under ZeRO-3 each is gathered collectively."""
        import deepspeed

        for name, p in self.hf_model.named_parameters():
            if self.zero_stage == 3:
                with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                    yield name, p.data.detach().clone()
            else:
                yield name, p.detach()

    def num_parameter_bytes(self) -> int:
        total = 0
        for p in self.hf_model.parameters():
            numel = getattr(p, "ds_numel", None) or p.numel()  # ZeRO-3 keeps the full size in ds_numel
            total += numel * p.element_size()
        return total

    # ---- checkpoints -----------------------------------------------------------------------------
    def save(self, path: str) -> None:
        full = {name: t.cpu() for name, t in self._full_parameters()}
        lora = self.lora is not None
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            if lora:
                self._save_lora_files(path, full.items())
            else:
                self.hf_model.save_pretrained(path, state_dict=full)
        # LoRA: the frozen base stays out of DeepSpeed's files (it is reloaded from model_path)
        self.model.save_checkpoint(os.path.join(path, "deepspeed"), tag="roll", exclude_frozen_parameters=lora,
                                    client_state={"step": self.step, "nonfinite_grad_steps": self.nonfinite_grad_steps})
        dist.barrier()

    def load(self, path: str) -> None:
        if self.lora is not None:
            self._load_lora_adapters(path)  # checks the adapters match this run's settings before DeepSpeed loads
        _, client = self.model.load_checkpoint(os.path.join(path, "deepspeed"), tag="roll",
                                                load_optimizer_states=True, load_lr_scheduler_states=True,
                                                load_module_strict=self.lora is None)
        if client is None:
            raise FileNotFoundError(f"deepspeed: no DeepSpeed checkpoint under {path}/deepspeed")
        self._restore_config_optimizer_settings()
        self.step = int(client.get("step", 0))
        self.nonfinite_grad_steps = int(client.get("nonfinite_grad_steps", 0))

    # ---- colocation ----------------------------------------------------------------------------
    def offload(self) -> None:
        """Move ZeRO-3 states to host memory while a colocated role runs (no-op on CPU)."""
        if self.device != "cpu" and hasattr(self.model, "offload_states"):
            self.model.offload_states()
            torch.cuda.empty_cache()

    def reload(self) -> None:
        if self.device != "cpu" and hasattr(self.model, "reload_states"):
            self.model.reload_states()
