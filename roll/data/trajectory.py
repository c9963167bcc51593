"""Trajectory: one token-exact training sample from a multi-turn episode, and its collation.

A trajectory is the exact token ids the model saw and produced, in order. Model-produced
tokens carry ``loss_mask == 1``, their inference log-prob and the policy version that
produced them; everything else (prompt, rendered observations, end-of-turn tokens the model
did not emit) carries ``loss_mask == 0``, log-prob 0 and version -1. Per-turn rewards are
kept per turn and placed on the last model token of their turn when collated.

In trajectory mode one episode is one sample; in step mode each turn is one sample (its
own windowed context), tagged with ``state_key``/``step_index``/``episode_id`` so step-level
estimators (GiGPO) can group equal states.

``trajectories_to_batch`` is the one place that turns trajectories into a ``Batch``; the
field names are the contract with roll/algorithms and the pipelines. Every pipeline builds its
training batch through it: an RLVR response (and a parity-check sample) is a one-turn
trajectory (:func:`response_trajectory`), an SFT conversation a trajectory whose trained
tokens are its assistant turns (:func:`masked_trajectory`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from roll.data.batch import Batch

FAILURE_TYPES = ("env_error", "env_timeout", "worker_died", "inference_error", "context_overflow")
"""Infrastructure failure types: an episode with one of these never enters a training batch."""


@dataclass
class Trajectory:
    """One training sample (a whole episode, or one turn of it in step mode)."""

    input_ids: list[int] = field(default_factory=list)
    """Every token of the sample, in order: prompt, model outputs, rendered observations."""
    loss_mask: list[int] = field(default_factory=list)
    """1 on model-produced tokens, 0 elsewhere (same length as input_ids)."""
    logprobs: list[float] = field(default_factory=list)
    """Inference log-prob of each model token; 0.0 elsewhere."""
    token_turns: list[int] = field(default_factory=list)
    """Turn index of each model token; -1 elsewhere."""
    token_versions: list[int] = field(default_factory=list)
    """Policy version that produced each model token; -1 elsewhere. A turn resumed after a
    partial-rollout weight update holds tokens of two versions."""
    turn_versions: list[int] = field(default_factory=list)
    """Per turn: the oldest policy version among its tokens (what staleness is judged on)."""
    turn_rewards: list[float] = field(default_factory=list)
    """Per turn: the env reward of that turn's step."""
    final_reward: float = 0.0
    """Episode-level reward reported by the env at the end (step info ``final_reward``), added
    to the last turn's token reward."""
    episode_return: float = 0.0
    """sum(turn_rewards) + final_reward of the whole episode (also in step-mode samples)."""
    success: bool = False
    num_turns: int = 0
    """Turns of the whole episode."""
    terminated: bool = False
    truncated: bool = False
    """Max turns or the context limit ended the episode (not a failure)."""
    failure: str | None = None
    """None, or an infrastructure failure type (FAILURE_TYPES)."""
    failure_detail: str = ""
    failure_traceback: str = ""
    """The traceback (file and line) of the exception behind an ``env_error``, for the run's
    error log (roll/rollout/failures.py)."""
    failure_permanent: bool = False
    """The env worker's verdict that the failure will recur (the env could not be created, or
    broke its contract): the run stops instead of retrying."""
    env_tag: str = ""
    env_id: str = ""
    group_id: str = ""
    env_seed: int = 0
    episode_id: str = ""
    prompt_length: int = 0
    """Tokens before the first model token."""
    state_key: str = ""
    """Step mode: a hash of the observation the turn acted on (equal states share keys)."""
    step_index: int = -1
    """Step mode: turn index of this sample within its episode; -1 in trajectory mode."""
    temperature: float = 1.0
    """Sampling temperature the model tokens were generated with (0: greedy); the trainer
    scores them under logits / temperature (roll/strategies/hf_train.py)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Per-episode measurements (invalid action rate, time in generation/env/waiting, ...)."""
    messages: list[dict[str, str]] = field(default_factory=list)
    """The conversation as text (for logging and trajectory dumps only; never re-tokenized)."""
    turn_actions: list[dict[str, Any]] = field(default_factory=list)
    """Per turn: what the env parsed from the model text (``actions``, ``valid``, ``error``);
    for trajectory dumps, and ``valid`` for ``algorithm.invalid_action_advantage``."""

    def check(self) -> None:
        n = len(self.input_ids)
        for name in ("loss_mask", "logprobs", "token_turns", "token_versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"trajectory {self.episode_id}: {name} has {len(getattr(self, name))} entries for {n} tokens")

    @property
    def num_model_tokens(self) -> int:
        return int(sum(self.loss_mask))

    @property
    def min_version(self) -> int:
        """Oldest policy version in the sample (-1 when it has no model tokens)."""
        return min(self.turn_versions) if self.turn_versions else -1


def response_trajectory(prompt_ids: Sequence[int], output_ids: Sequence[int], logprobs: Sequence[float] | None = None,
                        *, reward: float = 0.0, policy_version: int = -1, temperature: float = 1.0,
                        **fields: Any) -> Trajectory:
    """A single-turn sample: the prompt (not trained), then the model's response as turn 0
    with its inference ``logprobs`` (zeros when None), ``policy_version`` on every response
    token, and ``reward`` as the turn's reward (so on the last response token once collated)
    and the episode return. ``fields`` sets the other Trajectory fields (group_id, env_tag, ...)."""
    p, n = len(prompt_ids), len(output_ids)
    lps = [0.0] * n if logprobs is None else [float(x) for x in logprobs]
    if len(lps) != n:
        raise ValueError(f"response {fields.get('episode_id', '')!r}: {n} tokens but {len(lps)} logprobs")
    return Trajectory(
        input_ids=list(prompt_ids) + list(output_ids), loss_mask=[0] * p + [1] * n, logprobs=[0.0] * p + lps,
        token_turns=[-1] * p + [0] * n, token_versions=[-1] * p + [int(policy_version)] * n,
        turn_versions=[int(policy_version)] if n else [], turn_rewards=[float(reward)], episode_return=float(reward),
        num_turns=1, prompt_length=p, temperature=float(temperature), **fields)


def masked_trajectory(input_ids: Sequence[int], loss_mask: Sequence[int], **fields: Any) -> Trajectory:
    """A sample whose trained tokens are given by ``loss_mask`` (SFT: the assistant turns of a
    conversation), without logprobs, versions or rewards; each run of trained tokens is one turn."""
    if len(loss_mask) != len(input_ids):
        raise ValueError(f"loss_mask has {len(loss_mask)} entries for {len(input_ids)} tokens")
    turns, turn, prev = [], -1, 0
    for m in loss_mask:
        if m and not prev:
            turn += 1
        turns.append(turn if m else -1)
        prev = m
    first = next((i for i, m in enumerate(loss_mask) if m), len(input_ids))
    return Trajectory(input_ids=list(input_ids), loss_mask=[int(bool(m)) for m in loss_mask],
                      logprobs=[0.0] * len(input_ids), token_turns=turns, token_versions=[-1] * len(input_ids),
                      num_turns=turn + 1, prompt_length=first, **fields)


def trajectories_to_batch(trajs: Sequence[Trajectory], pad_token_id: int) -> Batch:
    """Right-padded tensors of the trajectories.

    tensors (all [B, T] unless noted): input_ids, attention_mask, position_ids,
    response_mask (1 on model tokens), infer_logprobs, token_rewards (turn reward on the
    last model token of its turn; the last turn also gets final_reward), turn_ids (turn of
    each model token, -1 elsewhere), policy_versions (per token, -1 elsewhere), scores [B]
    (episode return), min_policy_version [B], temperature [B] (sampling temperature).
    non_tensors: group_id, env_tag, env_id, env_seed, success, num_turns, episode_id,
    state_key, step_index, terminated, truncated, turn_versions, turn_rewards, turn_valid
    (per episode turn: whether the env accepted the turn's action; True where unknown).
    """
    if not trajs:
        raise ValueError("trajectories_to_batch needs at least one trajectory")
    for t in trajs:
        t.check()
        if t.failure is not None:
            raise ValueError(f"trajectory {t.episode_id} failed ({t.failure}); failed episodes never enter a batch")
    B = len(trajs)
    T = max(len(t.input_ids) for t in trajs)
    # filled as numpy rows (one C-level copy per list), converted to torch once
    ids_np = np.full((B, T), pad_token_id, dtype=np.int64)
    attn_np = np.zeros((B, T), dtype=np.int64)
    mask_np = np.zeros((B, T), dtype=np.int64)
    lp_np = np.zeros((B, T), dtype=np.float32)
    turn_np = np.full((B, T), -1, dtype=np.int64)
    ver_np = np.full((B, T), -1, dtype=np.int64)
    rew_np = np.zeros((B, T), dtype=np.float32)
    for i, t in enumerate(trajs):
        n = len(t.input_ids)
        ids_np[i, :n] = t.input_ids
        attn_np[i, :n] = 1
        mask_np[i, :n] = t.loss_mask
        lp_np[i, :n] = t.logprobs
        turn_np[i, :n] = t.token_turns
        ver_np[i, :n] = t.token_versions
        _place_rewards(t, turn_np[i], rew_np[i])
    input_ids, attention_mask = torch.from_numpy(ids_np), torch.from_numpy(attn_np)
    response_mask, infer_logprobs = torch.from_numpy(mask_np), torch.from_numpy(lp_np)
    turn_ids, versions, token_rewards = torch.from_numpy(turn_np), torch.from_numpy(ver_np), torch.from_numpy(rew_np)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    non_tensors: dict[str, Any] = {
        "group_id": [t.group_id for t in trajs],
        "env_tag": [t.env_tag for t in trajs],
        "env_id": [t.env_id for t in trajs],
        "env_seed": [t.env_seed for t in trajs],
        "success": [bool(t.success) for t in trajs],
        "num_turns": [t.num_turns for t in trajs],
        "episode_id": [t.episode_id for t in trajs],
        "state_key": [t.state_key for t in trajs],
        "step_index": [t.step_index for t in trajs],
        "terminated": [t.terminated for t in trajs],
        "truncated": [t.truncated for t in trajs],
        "turn_versions": [list(t.turn_versions) for t in trajs],
        "turn_rewards": [list(t.turn_rewards) for t in trajs],
        "turn_valid": [[bool(a.get("valid", True)) for a in t.turn_actions] for t in trajs],
    }
    return Batch(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "response_mask": response_mask,
            "infer_logprobs": infer_logprobs,
            "token_rewards": token_rewards,
            "turn_ids": turn_ids,
            "policy_versions": versions,
            "scores": torch.tensor([t.episode_return for t in trajs], dtype=torch.float32),
            "min_policy_version": torch.tensor([t.min_version for t in trajs], dtype=torch.long),
            "temperature": torch.tensor([t.temperature for t in trajs], dtype=torch.float32),
        },
        non_tensors=non_tensors,
    )


def _place_rewards(t: Trajectory, turns: np.ndarray, row: np.ndarray) -> None:
    """Each turn's reward on the last model token of that turn (step mode: turns are local)."""
    nxt = np.empty_like(turns)
    nxt[:-1], nxt[-1] = turns[1:], -1
    last = np.flatnonzero((turns >= 0) & (turns != nxt))  # last token of each turn's span
    if last.size == 0:
        # No model token (zero-length responses): the reward still counts in group
        # statistics, so it sits on the row's last real token (the advantage contract allows
        # it anywhere in such a row; no token of it is trained).
        total = float(sum(t.turn_rewards)) + float(t.final_reward)
        if len(t.input_ids):
            row[len(t.input_ids) - 1] += total
        return
    # turn index -> position of its last model token (a resumed turn is still one span)
    last_of = {int(turns[p]): int(p) for p in last}
    order = sorted(last_of)
    # step-mode samples hold one turn whose global index is step_index, with one reward
    offset = order[0] if t.step_index >= 0 else 0
    for turn in order:
        k = turn - offset
        if 0 <= k < len(t.turn_rewards):
            row[last_of[turn]] += float(t.turn_rewards[k])
    if t.step_index < 0 or t.step_index == t.num_turns - 1:
        row[last_of[order[-1]]] += float(t.final_reward)
