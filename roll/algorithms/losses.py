"""Policy losses (registered in ``roll.registry.POLICY_LOSSES``), the value loss, and the loss
functions the training strategy calls.

Policy loss signature (all [B, T], aligned to ``input_ids``; position 0 is never a model token)::

    fn(logprobs, old_logprobs, advantages, mask, cfg, *,
       infer_logprobs=None, ref_logprobs=None, entropy=None, **policy_loss_args)
       -> PolicyLossOutput(loss_mat [B, T], metrics)

``algorithm.policy_loss_args`` are passed as extra keyword arguments; a key the loss does not
declare is a ConfigError when the loss function is built (the builtin losses declare none:
their coefficients are ``algorithm`` fields).

``loss_mat`` is the per-token loss (to be minimised); reduction is separate
(:func:`roll.algorithms.aggregation.aggregate_loss`), so every loss works with every mode.

Contract with the training strategy
-----------------------------------
The strategy (``roll.strategies.torch_train``) splits a mini-batch into micro-batches and calls
``loss_fn(micro_batch: Batch, logprobs [b, T], extra: dict) -> (loss scalar, metrics)``
(for the critic ``logprobs`` is None and ``extra["values"]`` holds the raw value predictions
[b, T], ``V(x_<=t)`` per position; the critic loss shifts them like ``values`` in gae, see
``roll.algorithms.advantages.state_values``). Before that it sets, in every ``micro_batch.meta``:

- ``global_num_tokens``: sum of ``response_mask`` over the whole mini-batch on ALL dp ranks;
- ``global_num_seqs``: number of sequences of the whole mini-batch on all dp ranks (the
  recommended count is rows with at least one ``response_mask`` token, as
  :func:`roll.algorithms.aggregation.loss_normalizers` counts; rows without loss tokens only
  add to the denominator, so any consistent count keeps the invariance);
- ``dp_size``: the number of data-parallel ranks.

The returned loss is this micro-batch's share of the mini-batch loss (normalised by the
GLOBAL counts), so SUMMING micro-batch gradients gives the gradient of the loss over this
rank's rows; the strategy multiplies it by ``dp_size`` before ``backward`` so that the
all-reduce MEAN over ranks yields exactly the whole mini-batch's gradient. The strategy does
NOT divide by the number of accumulation steps. (:func:`set_loss_normalizers` fills the meta
for single-process use and tests.) ``extra["entropy"]`` [b, T] is needed when
``loss_fn.needs_entropy`` is true.

Micro-batch tensors read (names are the contract): ``response_mask``, ``advantages``,
``old_logprobs``, ``ref_logprobs`` (with ``use_kl_loss``), ``infer_logprobs`` (with
``tis_cap``); critic: ``returns``, ``values`` (rollout-time critic values, the clipping
anchor, raw per-position critic output like the predictions; ``old_values`` wins when
present). ``input_ids`` / ``attention_mask`` are the
strategy's own inputs for the forward pass.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch

from roll.algorithms.advantages import state_values
from roll.algorithms.aggregation import AGG_MODES, aggregate_loss, loss_normalizers
from roll.algorithms.kl import compute_kl
from roll.algorithms.masks import masked_mean
from roll.data.batch import Batch
from roll.config.validate import ConfigError
from roll.registry import POLICY_LOSSES

_LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: a finite ratio even for a token the old policy found impossible
DEFAULT_DUAL_CLIP = 3.0


@dataclass
class PolicyLossOutput:
    """``loss_mat`` [B, T] per-token loss; ``metrics`` micro-batch means (floats)."""

    loss_mat: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def _f(x: torch.Tensor) -> float:
    return float(x.detach())


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, low: float, high: float, dual_clip: Optional[float]
) -> PolicyLossOutput:
    """``max(-A r, -A clip(r, 1-low, 1+high))``, and for ``A < 0`` at most ``-A c`` (dual
    clip). Where a clip is active the loss is a constant of the parameters: zero gradient."""
    l1 = -advantages * ratio
    l2 = -advantages * ratio.clamp(1.0 - low, 1.0 + high)
    loss = torch.maximum(l1, l2)
    metrics = {"actor/pg_clipfrac": _f(masked_mean((l2 > l1).to(ratio.dtype), mask))}
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"algorithm.dual_clip must be > 1, got {dual_clip}")
        l3 = -advantages * dual_clip
        dual = (advantages < 0) & (l3 < loss)
        loss = torch.where(dual, l3, loss)
        metrics["actor/pg_dual_clipfrac"] = _f(masked_mean(dual.to(ratio.dtype), mask))
    return PolicyLossOutput(loss, metrics)


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(logprobs, old_logprobs, advantages, mask, cfg, *, infer_logprobs=None, ref_logprobs=None, entropy=None) -> PolicyLossOutput:
    """PPO clipped surrogate, asymmetric bounds (clip-higher), optional dual clip.

    Token-level ratio ``exp(logprobs - old_logprobs)``; ``cfg.dual_clip`` bounds negative
    advantages."""
    log_ratio = (logprobs - old_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    out = clipped_surrogate(torch.exp(log_ratio), advantages, mask, cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.dual_clip)
    out.metrics["actor/ppo_kl"] = _f(masked_mean(-log_ratio, mask))
    return out


@POLICY_LOSSES.register("dual_clip")
def dual_clip_loss(logprobs, old_logprobs, advantages, mask, cfg, *, infer_logprobs=None, ref_logprobs=None, entropy=None) -> PolicyLossOutput:
    """Dual-clip PPO (Ye et al. 2020): ppo_clip with the negative-advantage bound always on.

    The bound is ``cfg.dual_clip``, default 3."""
    c = cfg.dual_clip if cfg.dual_clip is not None else DEFAULT_DUAL_CLIP
    log_ratio = (logprobs - old_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    out = clipped_surrogate(torch.exp(log_ratio), advantages, mask, cfg.clip_ratio_low, cfg.clip_ratio_high, c)
    out.metrics["actor/ppo_kl"] = _f(masked_mean(-log_ratio, mask))
    return out


@POLICY_LOSSES.register("gspo")
def gspo(logprobs, old_logprobs, advantages, mask, cfg, *, infer_logprobs=None, ref_logprobs=None, entropy=None) -> PolicyLossOutput:
    """GSPO: a length-normalised sequence-level ratio, clipped per sequence.

    ``s_i = exp(mean_t(logp - old))``; token form ``s_it = sg(s_i) * pi_t / sg(pi_t)`` (value s_i, gradient
    ``s_i * grad log pi_t``). Use small clip ranges (paper: 3e-4 / 4e-4) and seq-mean-token-mean."""
    m = mask.to(logprobs.dtype)
    log_ratio = (logprobs - old_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    log_s = seq_log_ratio.detach()[:, None] + logprobs - logprobs.detach()
    out = clipped_surrogate(torch.exp(log_s.clamp(max=_LOG_RATIO_CLAMP)), advantages, mask, cfg.clip_ratio_low, cfg.clip_ratio_high, None)
    out.metrics["actor/ppo_kl"] = _f(masked_mean(-log_ratio, mask))
    return out


@POLICY_LOSSES.register("pg")
def pg(logprobs, old_logprobs, advantages, mask, cfg, *, infer_logprobs=None, ref_logprobs=None, entropy=None) -> PolicyLossOutput:
    """Plain policy gradient ``-A * logprobs`` (REINFORCE; no ratio, no clip: on-policy only)."""
    return PolicyLossOutput(-advantages * logprobs, {"actor/ppo_kl": _f(masked_mean(old_logprobs - logprobs, mask))})


def tis_weights(old_logprobs: torch.Tensor, infer_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights ``min(exp(old - infer), cap)`` [B, T], no gradient: the
    correction for the trainer/inference-engine mismatch (Yao et al. 2025)."""
    with torch.no_grad():
        return torch.exp((old_logprobs - infer_logprobs).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)).clamp(max=cap)


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: Optional[float]
) -> PolicyLossOutput:
    """Per-token clipped value loss ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``
    (PPO's value clipping); ``clip=None`` gives ``0.5 (V - R)^2``."""
    l1 = (values - returns) ** 2
    if clip is None:
        return PolicyLossOutput(0.5 * l1, {"critic/vf_clipfrac": 0.0})
    v_clip = old_values + (values - old_values).clamp(-clip, clip)
    l2 = (v_clip - returns) ** 2
    return PolicyLossOutput(0.5 * torch.maximum(l1, l2), {"critic/vf_clipfrac": _f(masked_mean((l2 > l1).to(values.dtype), mask))})


# ---- the strategy-facing loss functions ----------------------------------------------------
def set_loss_normalizers(micro_batches: Sequence[Batch], dp_size: int = 1, mask_key: str = "response_mask") -> None:
    """Single-process form of what a training strategy does: count the loss tokens and
    sequences of all ``micro_batches`` (one mini-batch) and write them to each one's meta.
    With several ranks, sum :func:`loss_normalizers` with an all-reduce instead."""
    tokens = seqs = 0
    for mb in micro_batches:
        c = loss_normalizers(mb[mask_key])
        tokens += c["num_tokens"]
        seqs += c["num_seqs"]
    for mb in micro_batches:
        mb.meta.update(global_num_tokens=tokens, global_num_seqs=seqs, dp_size=dp_size)


def _normalizers(mb: Batch) -> tuple[float, float]:
    missing = [k for k in ("global_num_tokens", "global_num_seqs") if k not in mb.meta]
    if missing:
        raise KeyError(
            f"micro_batch.meta lacks {missing}: the training strategy must set the mini-batch totals "
            f"(see roll.algorithms.losses docstring, or call set_loss_normalizers)"
        )
    return float(mb.meta["global_num_tokens"]), float(mb.meta["global_num_seqs"])


def _tensor(mb: Batch, key: str, like: torch.Tensor, why: str = "") -> torch.Tensor:
    if key not in mb.tensors:
        raise KeyError(f"micro_batch has no {key!r} tensor{why}")
    return mb.tensors[key].to(device=like.device, dtype=like.dtype)


def _check_config(cfg: Any) -> None:
    stop = getattr(cfg, "early_stop_kl", None)
    if stop is not None and not stop > 0:
        raise ValueError(f"algorithm.early_stop_kl must be > 0 (or null to disable), got {stop}")
    if cfg.loss_agg_mode not in AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {cfg.loss_agg_mode!r}; choose one of {', '.join(AGG_MODES)}")
    if cfg.loss_agg_mode == "seq-mean-token-sum-norm" and not cfg.loss_agg_norm_constant:
        raise ValueError("loss_agg_mode seq-mean-token-sum-norm needs algorithm.loss_agg_norm_constant (e.g. the response token budget)")


_POLICY_LOSS_PARAMS = ("logprobs", "old_logprobs", "advantages", "mask", "cfg", "infer_logprobs", "ref_logprobs", "entropy")


def _policy_loss_args(name: str, fn: Callable, args: dict[str, Any]) -> dict[str, Any]:
    """``algorithm.policy_loss_args``, checked against the loss's signature now rather than
    failing (or being swallowed by ``**kwargs``) at the first training step."""
    if not args:
        return args
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return args
    accepted = sorted(n for n, p in params.items() if n not in _POLICY_LOSS_PARAMS
                      and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes none (its coefficients are algorithm fields)"
        raise ConfigError([f"algorithm.policy_loss_args {unknown}: not arguments of policy loss {name!r}; {takes}"])
    return args


def make_actor_loss_fn(cfg: Any) -> Callable[[Batch, torch.Tensor, Optional[dict]], tuple[torch.Tensor, dict[str, float]]]:
    """The actor's ``loss_fn(micro_batch, logprobs, extra) -> (loss, metrics)``: registered
    policy loss (x TIS weights) + ``kl_loss_coef`` * KL(pi || ref) - ``entropy_coef`` *
    entropy, each aggregated with ``cfg.loss_agg_mode`` over the global normalisers."""
    _check_config(cfg)
    policy_fn = POLICY_LOSSES.get(cfg.policy_loss)
    loss_args = _policy_loss_args(cfg.policy_loss, policy_fn, dict(cfg.policy_loss_args or {}))
    needs_entropy = cfg.entropy_coef != 0

    def loss_fn(micro_batch: Batch, logprobs: torch.Tensor, extra: Optional[dict] = None) -> tuple[torch.Tensor, dict[str, float]]:
        extra = extra or {}
        n_tok, n_seq = _normalizers(micro_batch)
        mask = _tensor(micro_batch, "response_mask", logprobs)
        adv = _tensor(micro_batch, "advantages", logprobs)
        old = _tensor(micro_batch, "old_logprobs", logprobs)
        infer = _tensor(micro_batch, "infer_logprobs", logprobs) if "infer_logprobs" in micro_batch.tensors else None
        ref = _tensor(micro_batch, "ref_logprobs", logprobs) if "ref_logprobs" in micro_batch.tensors else None
        entropy = extra.get("entropy")

        def agg(x: torch.Tensor) -> torch.Tensor:
            return aggregate_loss(x, mask, cfg.loss_agg_mode, n_tok, n_seq, cfg.loss_agg_norm_constant)

        out = policy_fn(logprobs, old, adv, mask, cfg, infer_logprobs=infer, ref_logprobs=ref, entropy=entropy, **loss_args)
        loss_mat = out.loss_mat
        metrics = dict(out.metrics)
        if cfg.tis_cap is not None:
            if infer is None:
                raise KeyError("algorithm.tis_cap is set but micro_batch has no 'infer_logprobs' tensor")
            w = tis_weights(old, infer, cfg.tis_cap)
            loss_mat = loss_mat * w
            metrics["actor/tis_weight_mean"] = _f(masked_mean(w, mask))
            metrics["actor/tis_capped_frac"] = _f(masked_mean((w >= cfg.tis_cap).to(w.dtype), mask))
        loss = agg(loss_mat)
        metrics["actor/pg_loss"] = _f(masked_mean(loss_mat, mask))
        if cfg.use_kl_loss:
            if ref is None:
                raise KeyError("algorithm.use_kl_loss is set but micro_batch has no 'ref_logprobs' tensor")
            kl = compute_kl(logprobs, ref, cfg.kl_estimator)
            loss = loss + cfg.kl_loss_coef * agg(kl)
            metrics["actor/kl_loss"] = _f(masked_mean(kl, mask))
        if needs_entropy:
            if entropy is None:
                raise KeyError("algorithm.entropy_coef != 0 but the strategy passed no extra['entropy']")
            loss = loss - cfg.entropy_coef * agg(entropy.to(logprobs.dtype))
        if entropy is not None:
            metrics["actor/entropy"] = _f(masked_mean(entropy, mask))
        return loss, metrics

    loss_fn.needs_entropy = needs_entropy  # type: ignore[attr-defined]
    return loss_fn


def make_critic_loss_fn(cfg: Any) -> Callable[[Batch, torch.Tensor, Optional[dict]], tuple[torch.Tensor, dict[str, float]]]:
    """The critic's ``loss_fn(micro_batch, values_or_None, extra) -> (loss, metrics)`` (values as
    the second argument or in ``extra["values"]``):
    ``value_loss_coef`` * clipped value loss, aggregated like the actor's."""
    _check_config(cfg)

    def loss_fn(micro_batch: Batch, values: Optional[torch.Tensor], extra: Optional[dict] = None) -> tuple[torch.Tensor, dict[str, float]]:
        if values is None:  # torch_train passes the critic's predictions in extra
            values = (extra or {}).get("values")
            if values is None:
                raise KeyError("critic loss_fn needs value predictions: extra['values'] [b, T]")
        n_tok, n_seq = _normalizers(micro_batch)
        mask = _tensor(micro_batch, "response_mask", values)
        returns = _tensor(micro_batch, "returns", values)
        old_key = "old_values" if "old_values" in micro_batch.tensors else "values"
        old = values.detach() if cfg.value_clip is None else _tensor(micro_batch, old_key, values, " (rollout-time critic values for value clipping)")
        # returns[t] is the target for the state before token t: compare V(x_<t) = raw[t-1]
        values, old = state_values(values), state_values(old)
        out = value_loss(values, old, returns, mask, cfg.value_clip)
        loss = cfg.value_loss_coef * aggregate_loss(out.loss_mat, mask, cfg.loss_agg_mode, n_tok, n_seq, cfg.loss_agg_norm_constant)
        metrics = dict(out.metrics)
        metrics["critic/vf_loss"] = _f(masked_mean(out.loss_mat, mask))
        metrics["critic/vpred_mean"] = _f(masked_mean(values, mask))
        return loss, metrics

    loss_fn.needs_entropy = False  # type: ignore[attr-defined]
    return loss_fn
