"""TorchTrainStrategy: training on plain torch, DDP or FSDP2 (gloo on CPU, NCCL on GPU).

Implements :class:`roll.strategies.base.TrainingStrategy` through the shared
:class:`roll.strategies.hf_train.HFTrainStrategy` (micro-batch loop, forward-only pass,
bucketing, metrics); this module adds DDP / FSDP2 wrapping, gradient-sync toggling, clipping
and the optimizer step, and torch.distributed.checkpoint save/load. Options under
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
  entropy all go through this, so train/infer parity holds at any temperature. With
  ``training_args.max_tokens_per_micro_batch`` (packing, roll/data/packing.py) only the
  ``response_mask`` tokens are scored (the rest is 0) and ``position_ids`` come from the mask.
- ``values(batch) -> [B, T]`` (critic): value of the prefix ending at token t.
- ``train_step(batch, loss_fn)``: ``batch`` is this rank's share of ONE mini-batch (one
  optimizer step). It is split into micro-batches of ``per_device_train_batch_size`` rows (or
  packed to ``max_tokens_per_micro_batch`` tokens; a rank with fewer runs zero-loss ones); each
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
  gradient norm skips the optimizer step (counted in ``nonfinite_grad_steps``). Returns ``loss``
  (the mini-batch loss: sum over micro-batches and ranks), ``grad_norm``, ``lr``,
  ``nonfinite_grad_steps`` and the loss_fn's metrics averaged over micro-batches and ranks.
- ``logprobs`` / ``values`` on a rank with no rows (more dp ranks than rows) return [0, T]
  after running the same number of throw-away forwards as the other ranks.
- ``named_parameters_for_sync(bucket_size_mb)``: full (FSDP-gathered) parameters with their
  Hugging Face names, in buckets; a generator every rank must drain (FSDP gathers are
  collective), the tensors are only meaningful to send from rank 0.
- ``save(dir)`` / ``load(dir)``: the model in HF format (``save_pretrained``, loadable with
  ``from_pretrained``) plus ``trainer_state.pt`` (full optimizer and scheduler state, step),
  read back with ``torch.load(weights_only=True)``: tensors and plain containers only. With
  ``lora`` (roll/models/lora.py): the adapters under ``dir/adapter`` (peft's format), the
  merged model in HF format when ``lora.save_merged``, and optimizer state for the adapters
  only; ``load`` restores the adapters onto the base model from ``model_path``.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import torch

from roll.strategies.hf_train import DTYPES, HFTrainStrategy
# the forward and process-group helpers lived here first; callers still import them from here
from roll.strategies.hf_train import (forward_logprobs, init_process_group, lr_factor, make_lr_scheduler,  # noqa: F401
                                      model_forward, position_ids_for, sampling_temperatures, token_entropy,
                                      token_logprobs)


class TorchTrainStrategy(HFTrainStrategy):
    """DDP / FSDP2 trainer of a HF causal LM (or its value-head critic); see module docstring."""

    name = "torch_train"

    def _configure(self, opts: dict[str, Any]) -> None:
        self.parallel = opts.pop("parallel", "ddp")
        self.reshard_after_forward = bool(opts.pop("reshard_after_forward", True))
        if opts:
            raise ValueError(f"torch_train: unknown strategy_config keys {sorted(opts)}; valid: parallel, reshard_after_forward")
        if self.parallel not in ("ddp", "fsdp2"):
            raise ValueError(f"torch_train: strategy_config.parallel must be ddp or fsdp2, got {self.parallel!r}")

    def _wrap(self, model: torch.nn.Module) -> None:
        if self.parallel == "ddp":
            self.model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if self.device == "cuda" else None)
        else:
            from torch.distributed.fsdp import fully_shard

            layers = getattr(getattr(model, "model", None), "layers", None)
            for layer in layers if layers is not None else []:
                fully_shard(layer, reshard_after_forward=self.reshard_after_forward)
            fully_shard(model, reshard_after_forward=self.reshard_after_forward)
            self.model = model
        self.optimizer, self.scheduler = self._make_optimizer(self.model.parameters())

    @property
    def hf_model(self) -> torch.nn.Module:
        return self.model.module if isinstance(self.model, torch.nn.parallel.DistributedDataParallel) else self.model

    # ---- training hooks -------------------------------------------------------------------------
    def _set_grad_sync(self, enabled: bool) -> None:
        if self.parallel == "ddp":
            self.model.require_backward_grad_sync = enabled
        else:
            self.model.set_requires_gradient_sync(enabled)

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _optimizer_step(self) -> float:
        max_norm = self.args.max_grad_norm if self.args.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        grad_norm = float(norm)
        if math.isfinite(grad_norm):  # a non-finite norm skips the update (the base counts it)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return grad_norm

    def _full_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, p in self.hf_model.named_parameters():
            yield name, (p.full_tensor() if hasattr(p, "full_tensor") else p.detach())

    def num_parameter_bytes(self) -> int:
        # DTensor.numel() is the global (unsharded) size, so this is the full model under FSDP too
        return sum(p.numel() * p.element_size() for p in self.hf_model.parameters())

    # ---- checkpoints -----------------------------------------------------------------------------
    def _state_options(self):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=True, cpu_offload=True)

    def save(self, path: str) -> None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        model_sd = get_model_state_dict(self.model, options=self._state_options())
        optim_sd = get_optimizer_state_dict(self.model, self.optimizer, options=self._state_options())
        if self.rank == 0:
            os.makedirs(path, exist_ok=True)
            if self.lora is not None:  # adapters (+ merged model); the optimizer holds adapter state only
                self._save_lora_files(path, model_sd.items())
            else:
                self.hf_model.save_pretrained(path, state_dict=model_sd)
            torch.save({"optimizer": optim_sd, "scheduler": self.scheduler.state_dict(), "step": self.step,
                        "nonfinite_grad_steps": self.nonfinite_grad_steps}, os.path.join(path, "trainer_state.pt"))
        torch.distributed.barrier()

    def load(self, path: str) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

        from roll.utils.checkpoint import safe_torch_load

        opts = StateDictOptions(full_state_dict=True)
        if self.lora is not None:
            # the frozen base is the one loaded from model_path; only the adapters come back
            set_model_state_dict(self.model, self._load_lora_adapters(path),
                                 options=StateDictOptions(full_state_dict=True, strict=False))
        else:
            # from_pretrained restores tied weights that save_pretrained de-duplicated
            full = type(self.hf_model).from_pretrained(path, dtype=DTYPES[self.cfg.dtype]).state_dict()
            set_model_state_dict(self.model, full, options=opts)
        # tensors and plain containers only: a crafted trainer_state.pt cannot run code
        state = safe_torch_load(os.path.join(path, "trainer_state.pt"))
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"], options=opts)
        self.scheduler.load_state_dict(state["scheduler"])
        self._restore_config_optimizer_settings()
        self.step = int(state["step"])
        # checkpoints written before the counter's rename call it skipped_steps
        self.nonfinite_grad_steps = int(state.get("nonfinite_grad_steps", state.get("skipped_steps", 0)))

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
