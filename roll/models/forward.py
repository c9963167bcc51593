"""What a Hugging Face causal LM's forward accepts, read once per model class."""
from __future__ import annotations

import inspect
from typing import Any

import torch

_KEEPS_LOGITS: dict[type, bool] = {}


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether the causal LM (under a DDP / DeepSpeed wrapper, if any) takes ``logits_to_keep``:
    the LM head then runs only on the last columns."""
    inner = model
    while hasattr(inner, "module") and isinstance(inner.module, torch.nn.Module):
        inner = inner.module
    cls = type(inner)
    if cls not in _KEEPS_LOGITS:
        _KEEPS_LOGITS[cls] = "logits_to_keep" in inspect.signature(inner.forward).parameters
    return _KEEPS_LOGITS[cls]
