"""What a Hugging Face causal LM's forward accepts, read once per model class."""
from __future__ import annotations

import inspect
from typing import Any

import torch

_KEEPS_LOGITS: dict[type, bool] = {}


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether the causal LM (under a DDP / DeepSpeed wrapper, if any) takes ``logits_to_keep``:
    the LM head then runs only on the last columns."""
    inner = unwrapped(model)
    cls = type(inner)
    if cls not in _KEEPS_LOGITS:
        _KEEPS_LOGITS[cls] = "logits_to_keep" in inspect.signature(inner.forward).parameters
    return _KEEPS_LOGITS[cls]


def unwrapped(model: Any) -> Any:
    """The causal LM under DDP / DeepSpeed wrappers (``.module`` chains)."""
    inner = model
    while hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):
        inner = inner.module
    return inner


def output_head(model: Any) -> torch.nn.Module | None:
    """The LM head module of a (wrapped) causal LM, or None when the model does not expose one."""
    inner = unwrapped(model)
    get = getattr(inner, "get_output_embeddings", None)
    try:
        head = get() if callable(get) else None
    except (NotImplementedError, AttributeError):
        return None
    return head if isinstance(head, torch.nn.Module) else None


def right_padded_width(attention_mask: torch.Tensor) -> int | None:
    """The longest row's length when every row of ``attention_mask`` [B, T] is right-padded (its
    real tokens first, then padding only), else None.

    Such a batch needs no attention mask: under causal attention a real token sees only earlier
    columns, which are all real, and the default positions 0.. are its own. Columns past the
    longest row are padding everywhere and can be cut. (Without a mask, sdpa runs its causal
    kernel, which on CPU skips the masked half; with one it computes every column pair.)"""
    mask = attention_mask.bool()
    lengths = mask.sum(-1)
    cols = torch.arange(mask.shape[1], device=mask.device)
    if not torch.equal(mask, cols[None, :] < lengths[:, None]):
        return None
    width = int(lengths.max()) if len(lengths) else 0
    return width if width > 0 else None
