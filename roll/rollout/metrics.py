"""Rollout metrics with namespaced names.

- ``env/<tag>/...``: success, return, num_turns, invalid_action_rate, cut_response_rate (the
  share of an episode's responses that reached ``max_new_tokens``, or the context's room,
  without a stop token), truncated,
  failures/<type> (per tag, over the episodes of the batch and the failures since the last batch);
  token_nll: the mean -log p of the tag's model tokens, p the distribution each was drawn from
  (the engine's log-probs): for sampled rollouts an estimate of the policy's per-token entropy
  at the sampling temperature, which falls as the policy sharpens; for greedy ones the
  temperature-1 NLL of the argmax tokens (left out where the engine reported no log-probs);
- ``rollout/...``: counters (failures by type, refills, filtered/dropped/stale groups,
  partial resumes), staleness, throughput (trajectories/s, tokens/s);
- ``timing/rollout/...``: get_batch wall time and the shares of episode time spent in
  generation, env calls and waiting (router queue, suspension, scheduling).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import compress

from roll.data.trajectory import Trajectory


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def episode_metrics(episodes: Iterable[Trajectory], version: int) -> dict[str, float]:
    """Per-tag outcome metrics over one trajectory per episode (step-mode samples deduplicated)."""
    by_tag: dict[str, dict[str, Trajectory]] = defaultdict(dict)
    nll: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # tag -> [sum of -log p, tokens]
    for t in episodes:  # every step-mode sample counts for the NLL, one per episode for the rest
        by_tag[t.env_tag].setdefault(t.episode_id, t)
        acc = nll[t.env_tag]
        acc[0] -= sum(compress(t.logprobs, t.loss_mask))
        acc[1] += t.num_model_tokens
    out: dict[str, float] = {}
    every: list[Trajectory] = []
    for tag, first in by_tag.items():
        ts = list(first.values())
        every += ts
        p = f"env/{tag}/"
        out[p + "success"] = _mean([float(t.success) for t in ts])
        out[p + "return"] = _mean([t.episode_return for t in ts])
        out[p + "num_turns"] = _mean([float(t.num_turns) for t in ts])
        out[p + "truncated"] = _mean([float(t.truncated) for t in ts])
        out[p + "episodes"] = float(len(ts))
        # the action rates; tool envs (docs/tools.md): calls, errors and turns per episode, by tool and
        # error kind; agent functions: requests, segments, refused requests and the function's info numbers
        extra = sorted({k for t in ts for k in t.metrics if k.startswith(("tool/", "agent/"))})
        for key in ["invalid_action_rate", "effective_action_rate", "cut_response_rate", *extra]:
            out[p + key] = _mean([t.metrics.get(key, 0.0) for t in ts])
        if nll[tag][0]:  # 0: no model token, or an engine that reports no log-probs (all 0)
            out[p + "token_nll"] = nll[tag][0] / nll[tag][1]
    if every:
        gen = sum(t.metrics.get("time/generate_s", 0.0) for t in every)
        env = sum(t.metrics.get("time/env_s", 0.0) for t in every)
        total = max(sum(t.metrics.get("time/total_s", 0.0) for t in every), gen + env, 1e-9)
        out["timing/rollout/generate_share"] = gen / total
        out["timing/rollout/env_share"] = env / total
        out["timing/rollout/wait_share"] = max(0.0, 1.0 - (gen + env) / total)
        staleness = [version - t.min_version for t in every if t.min_version >= 0]
        out["rollout/staleness/max"] = float(max(staleness, default=0))
        out["rollout/staleness/mean"] = _mean([float(s) for s in staleness])
        out["rollout/response_tokens/mean"] = _mean([t.metrics.get("response_tokens", 0.0) for t in every])
        out["rollout/partial_resumes"] = float(sum(t.metrics.get("partial_resumes", 0.0) for t in every))
    return out


def counter_metrics(counters: Counter, failures_by_tag: Counter) -> dict[str, float]:
    out = {f"rollout/{k}": float(v) for k, v in sorted(counters.items())}
    for (tag, kind), v in sorted(failures_by_tag.items()):
        out[f"env/{tag}/failures/{kind}"] = float(v)
    return out
