"""Padding and sequence packing of token sequences.

Two layouts of a batch of ragged sequences:

* **padded** ``[B, T]`` with an ``attention_mask`` (1 = real token), right- or left-padded
  (left padding is what generation wants: every prompt ends at the same column);
* **packed** ``[1, N]``: the sequences laid end to end, ``position_ids`` restarting at 0 at
  each sequence start and ``cu_seqlens`` (``[n + 1]`` int32 offsets, the varlen-attention
  convention) marking the boundaries. No compute is spent on padding; transformers builds
  the block-diagonal causal mask from the restarting ``position_ids`` when the forward pass
  gets no ``attention_mask`` and no KV cache (``use_cache=False``); flash-attention
  kernels take ``cu_seqlens`` / ``max_seqlen`` directly.

``padded_to_packed`` / ``packed_to_padded`` convert between the two (a trainer packs a
padded batch for the forward pass and scatters per-token outputs back to ``[B, T]``).

Training with ``training_args.max_tokens_per_micro_batch`` (roll/strategies/hf_train.py):
:func:`plan_packing` groups a rank's rows into micro-batches of at most that many real tokens
(a longer row is a micro-batch of its own), and :func:`packed_forward` runs each one as one
packed row and returns per-token logprobs / entropy / values in the padded ``[b, T]`` layout
the loss functions read, so the loss and its global normalisers are those of the padded path.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence, Union

import torch

Tokens = Union[Sequence[int], torch.Tensor]


def _as_1d(seq: Tokens, dtype: torch.dtype) -> torch.Tensor:
    t = seq if isinstance(seq, torch.Tensor) else torch.as_tensor(list(seq), dtype=dtype)
    if t.dim() != 1:
        raise ValueError(f"expected 1-D token sequences, got shape {tuple(t.shape)}")
    return t


def pad_sequences(
    seqs: Sequence[Tokens],
    pad_value: Union[int, float] = 0,
    side: Literal["right", "left"] = "right",
    max_length: Optional[int] = None,
    dtype: torch.dtype = torch.long,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged sequences -> ``(values [B, T], attention_mask [B, T])``.

    ``T`` is the longest sequence, or ``max_length`` if given (a longer sequence is an error,
    never silently cut).
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    rows = [_as_1d(s, dtype) for s in seqs]
    longest = max((len(r) for r in rows), default=0)
    width = longest if max_length is None else max_length
    if longest > width:
        raise ValueError(f"a sequence of length {longest} does not fit max_length={width}")
    out_dtype = rows[0].dtype if rows else dtype
    values = torch.full((len(rows), width), pad_value, dtype=out_dtype)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r)
        if n == 0:
            continue
        cols = slice(0, n) if side == "right" else slice(width - n, width)
        values[i, cols] = r
        mask[i, cols] = 1
    return values, mask


def unpad_sequences(values: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    """``[B, T, ...]`` + mask -> the B unpadded rows (either padding side, any trailing dims)."""
    if values.shape[:2] != attention_mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(attention_mask.shape)} disagree")
    keep = attention_mask.bool()
    return [values[i][keep[i]] for i in range(values.shape[0])]


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` positions counting real tokens from 0 (padding gets 0), for either padding side."""
    mask = attention_mask.long()
    return (mask.cumsum(-1) - 1).clamp(min=0) * mask


@dataclass
class Packed:
    """Sequences laid end to end in one row."""

    input_ids: torch.Tensor
    """[1, N] the concatenated sequences."""
    position_ids: torch.Tensor
    """[1, N] 0..len-1 within each sequence."""
    cu_seqlens: torch.Tensor
    """[n + 1] int32 start offsets of each sequence, then N."""
    max_seqlen: int
    """Longest sequence (varlen attention kernels want it)."""
    indices: Optional[torch.Tensor] = None
    """[N] flat indices into the padded [B * T] batch this was packed from (padded_to_packed)."""

    @property
    def lengths(self) -> list[int]:
        return (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).tolist()

    def __len__(self) -> int:
        return len(self.cu_seqlens) - 1


def _cu_seqlens(lengths: Sequence[int]) -> torch.Tensor:
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    if len(lengths):
        cu[1:] = torch.cumsum(torch.as_tensor(list(lengths), dtype=torch.int64), 0).to(torch.int32)
    return cu


def _restarting_positions(lengths: Sequence[int]) -> torch.Tensor:
    if not len(lengths):
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.arange(n, dtype=torch.long) for n in lengths])


def pack_sequences(seqs: Sequence[Tokens], dtype: torch.dtype = torch.long) -> Packed:
    """Ragged sequences -> one packed row (see the module docstring)."""
    rows = [_as_1d(s, dtype) for s in seqs]
    lengths = [len(r) for r in rows]
    if any(n == 0 for n in lengths):
        raise ValueError("cannot pack an empty sequence (it has no tokens to attend to)")
    ids = torch.cat(rows) if rows else torch.zeros(0, dtype=dtype)
    return Packed(
        input_ids=ids.unsqueeze(0),
        position_ids=_restarting_positions(lengths).unsqueeze(0),
        cu_seqlens=_cu_seqlens(lengths),
        max_seqlen=max(lengths, default=0),
    )


def unpack_sequences(values: torch.Tensor, cu_seqlens: torch.Tensor) -> list[torch.Tensor]:
    """Per-token values of a packed row (``[N, ...]`` or ``[1, N, ...]``) -> one tensor per sequence."""
    if values.dim() >= 2 and values.shape[0] == 1 and values.shape[1] == int(cu_seqlens[-1]):
        values = values[0]
    if values.shape[0] != int(cu_seqlens[-1]):
        raise ValueError(f"packed values have {values.shape[0]} tokens, cu_seqlens says {int(cu_seqlens[-1])}")
    bounds = cu_seqlens.tolist()
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def padded_to_packed(input_ids: torch.Tensor, attention_mask: torch.Tensor, allow_empty: bool = False) -> Packed:
    """A padded ``[B, T]`` batch (either side) -> packed; ``indices`` remembers where tokens came
    from. A row without real tokens is an error, or with ``allow_empty`` a zero-length sequence."""
    if input_ids.shape != attention_mask.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and mask {tuple(attention_mask.shape)} disagree")
    mask = attention_mask.bool()
    lengths = mask.sum(-1).tolist()
    if not allow_empty and any(n == 0 for n in lengths):
        raise ValueError("a row of the batch has no real tokens")
    indices = torch.nonzero(mask.reshape(-1), as_tuple=False).squeeze(-1)
    return Packed(
        input_ids=input_ids.reshape(-1)[indices].unsqueeze(0),
        position_ids=_restarting_positions(lengths).to(input_ids.device).unsqueeze(0),
        cu_seqlens=_cu_seqlens(lengths),
        max_seqlen=max(lengths, default=0),
        indices=indices,
    )


def packed_to_padded(values: torch.Tensor, packed: Packed, shape: tuple[int, int], pad_value: Union[int, float] = 0) -> torch.Tensor:
    """Per-token values of a packed row (``[N, ...]`` or ``[1, N, ...]``) back to ``[B, T, ...]``
    at the positions ``padded_to_packed`` took them from."""
    if packed.indices is None:
        raise ValueError("this Packed was not made by padded_to_packed (it has no indices)")
    n = int(packed.cu_seqlens[-1])
    if values.dim() >= 2 and values.shape[0] == 1 and values.shape[1] == n:
        values = values[0]
    if values.shape[0] != n:
        raise ValueError(f"packed values have {values.shape[0]} tokens, expected {n}")
    b, t = shape
    out = torch.full((b * t, *values.shape[1:]), pad_value, dtype=values.dtype, device=values.device)
    out[packed.indices.to(values.device)] = values
    return out.reshape(b, t, *values.shape[1:])


def plan_packing(lengths: Sequence[int], max_tokens: int, oversize: Literal["error", "alone"] = "error") -> list[list[int]]:
    """Group sequence indices into rows of at most ``max_tokens`` tokens (first-fit decreasing).

    Rows and the indices inside them are in ascending order of first index, so the plan
    is deterministic. A sequence longer than ``max_tokens`` is an error, or with
    ``oversize="alone"`` a row of its own (a trainer must not drop or cut a sample).
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if oversize not in ("error", "alone"):
        raise ValueError(f"oversize must be 'error' or 'alone', got {oversize!r}")
    too_long = [i for i, n in enumerate(lengths) if n > max_tokens]
    if too_long and oversize == "error":
        raise ValueError(f"sequences {too_long} are longer than max_tokens={max_tokens}")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(max(max_tokens - lengths[i], 0))
    return sorted((sorted(b) for b in bins), key=lambda b: b[0])


def scored_logprobs(logits: torch.Tensor, targets: torch.Tensor, entropy: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Logprob of each ``targets`` [N] token under ``logits`` [N, V], and the entropy of each
    distribution when asked (else None)."""
    lp = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    if not entropy:
        return lp, None
    logp = logits.log_softmax(-1)
    return lp, -(logp.exp() * logp).sum(-1)


def packed_forward(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    loss_mask: Optional[torch.Tensor] = None,
    temperature: Optional[torch.Tensor] = None,
    critic: bool = False,
    entropy: bool = False,
    keep_logits: bool = True,
) -> tuple[Optional[torch.Tensor], dict[str, torch.Tensor]]:
    """One forward of a (wrapped) HF causal LM over the rows of a padded batch packed into one row.

    ``input_ids`` / ``attention_mask`` [b, T] (either padding side); ``loss_mask`` [b, T] the
    tokens whose logprobs are wanted (None: every token but each row's first); ``temperature``
    [b] divides each row's logits (None: 1). The model gets ``[1, N]`` ids and positions
    restarting at 0 per row and no ``attention_mask``, which transformers turns into attention
    confined to each row (a block-diagonal causal mask for sdpa / eager; varlen boundaries for
    flash attention), so no compute is spent on padding. With ``keep_logits`` the LM head runs
    only where a wanted token is predicted (``logits_to_keep`` as an index tensor).

    Returns ``(logprobs [b, T], extra)`` aligned like roll.strategies.hf_train.token_logprobs
    (0 at tokens not wanted and at padding), ``extra["entropy"]`` [b, T] when asked; a critic
    returns ``(None, {"values": [b, T]})`` (the first logit of every real token, 0 at padding).
    """
    b, t = input_ids.shape
    device = input_ids.device
    packed = padded_to_packed(input_ids, attention_mask, allow_empty=True)
    ids, pos, n = packed.input_ids, packed.position_ids, int(packed.cu_seqlens[-1])
    if n == 0:  # only empty rows: still run a forward (sharded forwards are collective)
        ids, pos = input_ids[:1, :1], torch.zeros((1, 1), dtype=torch.long, device=device)
    where = packed.indices.to(device)  # packed token j came from flat padded position where[j]
    if critic:
        out = model(input_ids=ids, position_ids=pos, use_cache=False)
        values = out.logits[0, :n, 0].float()
        return None, {"values": values.new_zeros(b * t).index_copy(0, where, values).view(b, t)}
    wanted = torch.ones(n, dtype=torch.bool, device=device)
    lengths = torch.as_tensor(packed.lengths, dtype=torch.long)
    wanted[packed.cu_seqlens[:-1][lengths > 0].long().to(device)] = False  # a row's first token has no prediction
    if loss_mask is not None:
        wanted &= loss_mask.reshape(-1)[where].bool()
    targets = wanted.nonzero().squeeze(-1)  # packed positions scored; their logits sit one to the left
    kwargs = {"logits_to_keep": targets - 1} if keep_logits else {}
    out = model(input_ids=ids, position_ids=pos, use_cache=False, **kwargs)
    logits = (out.logits[0] if keep_logits else out.logits[0, targets - 1]).float()
    if temperature is not None:
        row_of_token = torch.repeat_interleave(torch.arange(b), lengths).to(device)
        logits = logits / temperature.to(device=device, dtype=logits.dtype)[row_of_token[targets]][:, None]
    lp, ent = scored_logprobs(logits, ids[0, targets], entropy)
    dest = where[targets]
    extra: dict[str, torch.Tensor] = {}
    if ent is not None:
        extra["entropy"] = ent.new_zeros(b * t).index_copy(0, dest, ent).view(b, t)
    return lp.new_zeros(b * t).index_copy(0, dest, lp).view(b, t), extra
