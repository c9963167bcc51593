"""The two strategy contracts (docs/architecture.md, "Packages") and the request types.

A strategy is HOW a worker infers or trains; workers (roll/workers/) own one strategy each
and expose it over Ray. Strategies are registered by name in `roll.registry.STRATEGIES`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Protocol, runtime_checkable

import torch

from roll.data.batch import Batch


def import_backend(module: str, strategy: str, extra: str, hint: str) -> Any:
    """An optional engine's module; without it, an ImportError that names the extra installing it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"the {strategy} strategy needs {module} ({e}); install the `{extra}` extra {hint}") from e


@dataclass
class GenerationRequest:
    """One generation call: a prompt as token ids, and sampling parameters."""

    request_id: str
    prompt_ids: list[int]
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: Optional[int] = None
    """Per-request sampling seed (reproducible rollouts)."""
    stop_strings: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    """Besides the tokenizer's EOS."""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationResult:
    """The tokens an engine produced for one request, with their logprobs."""

    request_id: str
    output_ids: list[int]
    logprobs: list[float]
    """Log-probability of each output token under the sampling policy (len == len(output_ids))."""
    finish_reason: str = "stop"
    """stop (EOS or stop string), length (max_new_tokens), abort (aborted; partial output kept)."""
    policy_version: int = 0
    """Weight version that produced these tokens."""


@runtime_checkable
class InferenceStrategy(Protocol):
    """Generation backend: hf_infer (CPU default), vllm, sglang."""

    async def start(self) -> None: ...

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    async def abort(self, request_ids: list[str]) -> None: ...

    def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]], version: int, last_bucket: bool = True) -> None: ...

    def policy_version(self) -> int: ...

    def offload(self) -> None: ...

    def reload(self) -> None: ...


@runtime_checkable
class TrainingStrategy(Protocol):
    """Training backend: torch_train (DDP/FSDP2), deepspeed, megatron."""

    def logprobs(self, batch: Batch) -> torch.Tensor:
        """[B, T] log-probs of ``input_ids[:, 1:]`` aligned to ``input_ids`` (position 0 is 0)."""
        ...

    def train_step(self, batch: Batch, loss_fn: Any) -> dict[str, float]:
        """One optimizer step over ``batch`` (micro-batched, gradient accumulation), returns metrics."""
        ...

    def named_parameters_for_sync(self, bucket_size_mb: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """Full (gathered) parameters in HF naming, in buckets of about ``bucket_size_mb``."""
        ...

    def save(self, path: str) -> None: ...

    def load(self, path: str) -> None: ...

    def offload(self) -> None: ...

    def reload(self) -> None: ...
