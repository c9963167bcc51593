"""Supervised fine-tuning loss: negative log-likelihood of the loss-masked (assistant) tokens.

Follows the training-strategy contract of ``roll.algorithms.losses``: normalised by the
global token count of the whole mini-batch, so gradient accumulation and data parallelism do
not change the result.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from roll.algorithms.aggregation import aggregate_loss
from roll.algorithms.losses import _normalizers
from roll.data.batch import Batch


def make_sft_loss_fn(loss_agg_mode: str = "token-mean") -> Callable[[Batch, torch.Tensor, Optional[dict]], tuple[torch.Tensor, dict[str, float]]]:
    """``loss_fn(micro_batch, logprobs [b, T], extra) -> (nll, metrics)`` over ``response_mask``."""

    def loss_fn(micro_batch: Batch, logprobs: torch.Tensor, extra: Optional[dict] = None) -> tuple[torch.Tensor, dict[str, float]]:
        n_tok, n_seq = _normalizers(micro_batch)
        mask = micro_batch["response_mask"].to(device=logprobs.device, dtype=logprobs.dtype)
        loss = aggregate_loss(-logprobs, mask, loss_agg_mode, n_tok, n_seq)
        # per-micro-batch mean NLL for display only (not the optimised quantity)
        shown = float((-logprobs.detach() * mask).sum() / mask.sum().clamp(min=1))
        return loss, {"sft/nll": shown}

    return loss_fn
