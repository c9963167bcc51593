"""Train/infer logprob parity: the numbers that say whether the inference engine samples from
the policy the trainer optimises.

* :func:`logprob_parity` compares per-token logprobs the inference backend reported while
  sampling with the training backend's recomputation of the same tokens: mean and max
  absolute difference, and the KL between the two policies estimated on the sampled tokens
  (k1: mean of ``log p_infer - log p_train``; k3: mean of ``r - 1 - log r`` with
  ``r = p_train / p_infer``, non-negative and lower-variance). :func:`parity_metrics` names
  them for the tracker; ``rollout/train_infer_logprob_diff`` is logged every training step.
* :func:`results_to_batch` turns prompts + :class:`GenerationResult` s into the trainer's
  ``Batch`` with ``infer_logprobs`` aligned like ``TrainingStrategy.logprobs``.
* :func:`main` is ``roll check parity CONFIG``: build the config's ``actor_train`` and
  ``actor_infer`` backends in this process, push the trainer's weights to the inference
  backend through ``update_weights`` (the sync path itself is part of what is checked),
  sample at the config's temperature without truncation (top-k/top-p truncation is a known
  difference: the trainer scores the untruncated distribution), recompute with the trainer
  (which divides the logits by each row's ``temperature``) and print the report. Exit code 1 when the
  mean absolute difference exceeds the dtype's tolerance (``TOLERANCE``).
"""
from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any

import torch

from roll.data.batch import Batch
from roll.data.trajectory import response_trajectory, trajectories_to_batch
from roll.strategies.base import GenerationRequest, GenerationResult

TOLERANCE = {"float32": 1e-3, "bfloat16": 5e-2, "float16": 2e-2}
"""Largest acceptable mean |logprob difference| per dtype (bf16 kernels legitimately differ more)."""

PROMPTS = [
    "Solve the puzzle step by step and give the answer.",
    "The box is left of the goal. Which move pushes it onto the goal?",
    "Write a short function that adds two numbers.",
    "What is 17 + 25? Think, then answer.",
]


def logprob_parity(infer_logprobs: torch.Tensor, train_logprobs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """infer_logprobs, train_logprobs, mask: [B, T] (mask 1 on sampled tokens). Returns
    mean_abs_diff, max_abs_diff, kl_k1, kl_k3 (KL(infer || train) estimates) and num_tokens."""
    if not (infer_logprobs.shape == train_logprobs.shape == mask.shape):
        raise ValueError(f"logprob_parity: shapes differ {tuple(infer_logprobs.shape)}, "
                         f"{tuple(train_logprobs.shape)}, {tuple(mask.shape)}")
    m = mask.bool()
    n = int(m.sum())
    if n == 0:
        return {"mean_abs_diff": 0.0, "max_abs_diff": 0.0, "kl_k1": 0.0, "kl_k3": 0.0, "num_tokens": 0}
    li, lt = infer_logprobs.double()[m], train_logprobs.double()[m]
    diff = lt - li
    return {
        "mean_abs_diff": float(diff.abs().mean()),
        "max_abs_diff": float(diff.abs().max()),
        "kl_k1": float((-diff).mean()),
        "kl_k3": float((diff.exp() - 1 - diff).mean()),
        "num_tokens": n,
    }


def parity_metrics(infer_logprobs: torch.Tensor, train_logprobs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """:func:`logprob_parity` under the tracker's metric names."""
    p = logprob_parity(infer_logprobs, train_logprobs, mask)
    return {
        "rollout/train_infer_logprob_diff": p["mean_abs_diff"],
        "rollout/train_infer_logprob_max_diff": p["max_abs_diff"],
        "rollout/train_infer_kl": p["kl_k3"],
    }


def results_to_batch(prompts: Sequence[Sequence[int]], results: Sequence[GenerationResult], pad_id: int = 0,
                     temperature: float = 1.0) -> Batch:
    """The trainer's batch of prompts + results, built like a training batch (each result a
    one-turn trajectory, roll/data/trajectory.py): right-padded ``input_ids``/``attention_mask``,
    ``response_mask`` on generated tokens and ``infer_logprobs`` at their positions ([B, T]
    each); ``temperature`` [B], the one the results were sampled at."""
    return trajectories_to_batch([
        response_trajectory(p, r.output_ids, r.logprobs, policy_version=r.policy_version, temperature=temperature,
                            episode_id=r.request_id)
        for p, r in zip(prompts, results)], pad_id)


# ---- `roll check parity CONFIG` --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prompt_ids(model_path: str, vocab_size: int, n: int) -> list[list[int]]:
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path)
        return [tok(PROMPTS[i % len(PROMPTS)])["input_ids"] for i in range(n)]
    except (OSError, ValueError):  # a bare weights directory: fixed pseudo-random prompts
        g = torch.Generator().manual_seed(0)
        return [torch.randint(3, vocab_size, (12,), generator=g).tolist() for _ in range(n)]


def build_strategies(cfg: Any, device: str | None = None):
    """The config's actor_train (set up on a one-process group if none exists; destroy it with
    ``torch.distributed.destroy_process_group`` when done) and actor_infer."""
    import torch.distributed as dist

    from roll.models.tiny import resolve_model_path
    from roll.registry import STRATEGIES
    from roll.strategies.torch_train import init_process_group

    train_cfg, infer_cfg = cfg.actor_train, cfg.actor_infer
    train_path = resolve_model_path(train_cfg.model_name_or_path or cfg.pretrain)
    infer_path = resolve_model_path(infer_cfg.model_name_or_path or cfg.pretrain)
    if not dist.is_initialized():
        init_process_group(0, 1, "127.0.0.1", _free_port())
    train = STRATEGIES.get(train_cfg.strategy_args.strategy_name)(train_cfg, train_path, seed=cfg.seed, device=device)
    train.setup()
    infer = STRATEGIES.get(infer_cfg.strategy_args.strategy_name)(infer_cfg, infer_path, seed=cfg.seed, device=device)
    return train, infer, infer_path


async def _generate(infer, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0) -> list[GenerationResult]:
    await infer.start()
    reqs = [GenerationRequest(f"parity-{i}", p, max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0, top_k=-1,
                              seed=i)
            for i, p in enumerate(prompts)]
    return list(await asyncio.gather(*(infer.generate(r) for r in reqs)))


def sync_weights(train, infer, version: int = 1, bucket_size_mb: int = 256) -> int:
    """Push the trainer's full weights to the inference backend bucket by bucket; returns bytes sent.
    Buckets are streamed (the next one is gathered after the previous one was loaded)."""
    sent = 0
    pending = None
    for bucket in train.named_parameters_for_sync(bucket_size_mb):
        if pending is not None:
            infer.update_weights(pending, version=version, last_bucket=False)
        pending = bucket
        sent += sum(t.numel() * t.element_size() for _, t in bucket)
    infer.update_weights(pending or [], version=version, last_bucket=True)
    return sent


def compare_pair(train, infer, prompts: list[list[int]], max_new_tokens: int = 32, temperature: float = 1.0) -> dict[str, float]:
    """Sample with ``infer`` (at ``temperature``, no truncation), recompute with ``train``, compare."""
    results = asyncio.run(_generate(infer, prompts, max_new_tokens, temperature))
    batch = results_to_batch(prompts, results, temperature=temperature)
    train_lp = train.logprobs(batch)
    return logprob_parity(batch["infer_logprobs"], train_lp, batch["response_mask"])


def check_pair(train, infer, prompts: list[list[int]], max_new_tokens: int = 32, bucket_size_mb: int = 256,
               temperature: float = 1.0) -> dict[str, float]:
    """Sync trainer -> inference, sample, recompute, compare. Returns :func:`logprob_parity`."""
    sync_weights(train, infer, version=1, bucket_size_mb=bucket_size_mb)
    return compare_pair(train, infer, prompts, max_new_tokens, temperature)


def main(cfg: Any, num_prompts: int = 8, max_new_tokens: int = 32) -> int:
    """``roll check parity CONFIG``: print the parity report; 0 when within tolerance."""
    import torch.distributed as dist
    from rich.console import Console
    from rich.table import Table

    own_group = not dist.is_initialized()
    train, infer, infer_path = build_strategies(cfg)
    try:
        vocab = int(getattr(getattr(train, "hf_model", None), "config", None).vocab_size)
        prompts = _prompt_ids(infer_path, vocab, num_prompts)
        gen = cfg.actor_infer.generating_args
        # greedy configs are checked at 1: a greedy row's reported logprob is the temperature-1 one
        temperature = gen.temperature if gen.do_sample and gen.temperature > 0 else 1.0
        report = check_pair(train, infer, prompts, max_new_tokens, cfg.model_update_buffer_size_mb, temperature)
    finally:
        for s in (infer, train):
            for name in ("shutdown", "close"):
                if hasattr(s, name):
                    getattr(s, name)()
                    break
        if own_group and dist.is_initialized():
            dist.destroy_process_group()
    tol = TOLERANCE[cfg.actor_infer.dtype if cfg.actor_infer.dtype in TOLERANCE else "float32"]
    ok = report["mean_abs_diff"] <= tol
    table = Table(title=f"train/infer parity: {cfg.actor_train.strategy_args.strategy_name} vs "
                        f"{cfg.actor_infer.strategy_args.strategy_name}")
    table.add_column("metric")
    table.add_column("value")
    for k, v in report.items():
        table.add_row(k, f"{v:.3e}" if isinstance(v, float) else str(v))
    table.add_row("tolerance (mean)", f"{tol:g}")
    table.add_row("result", "OK" if ok else "FAIL")
    Console().print(table)
    print("RESULT " + " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in report.items())
          + f" ok={int(ok)}")
    return 0 if ok else 1
