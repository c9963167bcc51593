"""KL to the reference policy: per-token estimators and the KL-in-reward coefficient controllers.

Estimators of KL(pi || pi_ref) from samples of pi (Schulman, "Approximating KL divergence",
2020, http://joschu.net/blog/kl-approx.html), with ``d = logprobs - ref_logprobs`` per token:

- ``k1 = d``                       unbiased, high variance, can be negative
- ``k2 = d**2 / 2``                biased, low variance, >= 0
- ``k3 = exp(-d) - 1 + d``         unbiased, low variance, >= 0 (GRPO's KL loss)

``d`` is clamped to [-20, 20] before ``exp`` so one token that the reference finds
impossible cannot turn the whole loss into inf; inside that range the values are exact.
"""
from __future__ import annotations

import math
from typing import Any, Protocol

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")
_LOG_RATIO_CLAMP = 20.0


def compute_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL estimate [B, T] from ``logprobs`` and ``ref_logprobs`` [B, T] (unmasked:
    multiply by the response mask or aggregate with it)."""
    d = (logprobs - ref_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return torch.exp(-d) - 1.0 + d
    raise ValueError(f"unknown kl_estimator {estimator!r}; choose one of {', '.join(KL_ESTIMATORS)}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy [..] of the categorical distribution given ``logits`` [.., V] (for the entropy
    bonus; a training strategy puts it in ``extra["entropy"]`` aligned like the logprobs)."""
    logp = torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


class KLController(Protocol):
    """Holds the KL-in-reward coefficient; the pipeline reads ``value`` before computing
    advantages and calls ``update`` with the batch's mean per-sequence KL afterwards."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...


class FixedKLController:
    """A constant coefficient."""

    def __init__(self, value: float):
        self.value = float(value)

    def update(self, current_kl: float, n_steps: int) -> None:
        return None

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Proportional controller of Ziegler et al. 2019 ("Fine-Tuning Language Models from
    Human Preferences", arXiv:1909.08593): ``e = clip(KL / target - 1, -0.2, 0.2)``,
    ``beta <- beta * (1 + e * n_steps / horizon)``."""

    def __init__(self, init_kl_coef: float, target: float, horizon: int):
        if target <= 0 or horizon <= 0:
            raise ValueError(f"adaptive KL needs target > 0 and horizon > 0, got {target}, {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        if not math.isfinite(current_kl):
            raise ValueError(f"KL controller got a non-finite KL {current_kl}")
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


def build_kl_controller(cfg: Any) -> FixedKLController | AdaptiveKLController:
    """The controller an :class:`AlgorithmConfig` asks for: adaptive when ``kl_target`` is
    set, else fixed at ``init_kl_coef``."""
    if cfg.kl_target is None:
        return FixedKLController(cfg.init_kl_coef)
    return AdaptiveKLController(cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)


def sequence_kl(kl: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] per-sequence KL (sum over the sequence's model tokens), the quantity the adaptive
    controller targets; its batch mean is what ``update`` expects."""
    return (kl * mask.to(kl.dtype)).sum(-1)


def kl_for_reward(old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token KL [B, T] for the reward penalty, zero outside ``mask``; no gradient."""
    with torch.no_grad():
        return compute_kl(old_logprobs, ref_logprobs, estimator) * mask.to(old_logprobs.dtype)
