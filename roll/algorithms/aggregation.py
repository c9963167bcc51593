"""Loss aggregation: per-token loss matrix [B, T] -> scalar, normalised by the whole mini-batch.

The normalisers are the token and sequence counts of the whole mini-batch across all
data-parallel ranks, never of one micro-batch. With them, summing the micro-batch losses
(gradient accumulation) and averaging gradients over ranks (DDP/FSDP all-reduce mean, undone
by a ``dp_size`` factor: the training strategy applies it before backward, or pass
``dp_size`` here) gives exactly the gradient of the mini-batch loss, for every mode.

Modes (``L`` the loss matrix, ``M`` the loss mask, ``n_i = sum_t M_it``, ``N_tok`` the global
token count, ``N_seq`` the global count of sequences with at least one loss token):

- ``token-mean``              sum_{i,t} M L / N_tok                      (DAPO, PPO default)
- ``seq-mean-token-sum``      sum_i (sum_t M L) / N_seq
- ``seq-mean-token-mean``     sum_i (sum_t M L / n_i) / N_seq            (GRPO paper, GSPO)
- ``seq-mean-token-sum-norm`` sum_{i,t} M L / (N_seq * C), C constant    (Dr. GRPO)
"""
from __future__ import annotations

from typing import Optional

import torch

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def loss_normalizers(mask: torch.Tensor) -> dict[str, int]:
    """Local counts of a (micro-)batch's loss mask [B, T]: ``num_tokens`` and ``num_seqs``
    (rows with at least one loss token). A training strategy sums them over the micro-batches
    of a mini-batch and all-reduces (SUM) over data-parallel ranks to get
    ``global_num_tokens`` / ``global_num_seqs``."""
    m = mask.bool()
    return {"num_tokens": int(m.sum()), "num_seqs": int(m.any(dim=-1).sum())}


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    global_num_tokens: Optional[float] = None,
    global_num_seqs: Optional[float] = None,
    norm_constant: Optional[float] = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """Reduce ``loss_mat`` [B, T] under ``mask`` [B, T] to a scalar with ``mode``.

    ``global_num_tokens`` / ``global_num_seqs`` default to this batch's own counts (then the
    result is the plain per-batch mean). ``norm_constant`` is the constant ``C`` of
    ``seq-mean-token-sum-norm``. The result is multiplied by ``dp_size`` so that the usual
    all-reduce MEAN of gradients over ranks yields the global normalisation. An empty mask
    gives 0 (with a gradient graph), never NaN.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; choose one of {', '.join(AGG_MODES)}")
    m = mask.to(loss_mat.dtype)
    local = loss_normalizers(mask)
    n_tok = float(global_num_tokens) if global_num_tokens is not None else float(local["num_tokens"])
    n_seq = float(global_num_seqs) if global_num_seqs is not None else float(local["num_seqs"])
    masked = loss_mat * m
    if mode == "token-mean":
        total = masked.sum() / max(n_tok, 1.0)
    elif mode == "seq-mean-token-sum":
        total = masked.sum() / max(n_seq, 1.0)
    elif mode == "seq-mean-token-mean":
        per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1.0)
        total = per_seq.sum() / max(n_seq, 1.0)
    else:
        if norm_constant is None or norm_constant <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive constant: set algorithm.loss_agg_norm_constant")
        total = masked.sum() / (max(n_seq, 1.0) * float(norm_constant))
    return total * dp_size
