"""Advantage estimators: one signature, registered by name in ``roll.registry.ADVANTAGES``.

    fn(inputs: AdvantageInputs, cfg: AlgorithmConfig) -> AdvantageOutputs

The pipeline calls :func:`compute_advantages` once per batch; it applies the shared pre- and
post-processing (reward clipping, KL in the reward, whitening, advantage clipping, masking)
around the estimator that ``cfg.adv_estimator`` names, so no worker or pipeline code ever
branches on an algorithm name. Formulas and papers: docs/algorithms.md.

Shapes (``B`` samples, ``T`` token positions aligned to ``input_ids``):

- ``token_rewards`` [B, T] float: each turn's reward on the last model token of that turn
  (an outcome-only task has one nonzero entry per row). A row without model tokens (zero-
  length response) may carry its reward anywhere in the row: it still counts in group
  statistics, but has no token to train.
- ``response_mask`` [B, T] 0/1: model-produced tokens (the loss mask).
- ``group_ids`` [B]: episodes from the same env seed / prompt share a key (ints or strings).
- ``values`` [B, T]: the critic's raw per-position output, ``values[:, t] = V(x_<=t)`` (the
  value of the prefix ending at token t, as ``TorchTrainStrategy.values`` returns it). The
  state in which model token t is generated is ``x_<t``, so gae uses ``values[:, t - 1]``
  for it (:func:`state_values`); the critic loss shifts the same way.
- ``turn_ids`` [B, T] long: turn index of each model token, -1 elsewhere; derived from runs
  of ``response_mask`` when absent.
- ``tags`` [B]: env tag (or data domain) per sample, for ``reward_norm.group_by: tag``.
- ``kl`` [B, T]: per-token KL to the reference (for ``use_kl_in_reward``).
- ``state_keys``, ``episode_ids``, ``step_ids`` [B]: step-mode samples for ``gigpo`` (one
  sample per turn; samples with equal ``(group_id, state_key)`` are the same env state).
- ``turn_valid`` [B] lists: per episode turn, whether the env accepted its action (indexed by
  ``turn_ids``; a turn past the list's end counts as valid), for ``invalid_action_advantage``.

``AdvantageOutputs.advantages`` and ``.returns`` are [B, T], zero outside ``response_mask``.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from roll.algorithms.masks import group_index, group_stats, masked_mean, masked_whiten, turn_ids_from_mask
from roll.registry import ADVANTAGES

STD_EPS = 1e-6
"""Added to a standard deviation before dividing; a std at or below it means "all equal" and
the scores are only centred (no 1/eps blow-up of float noise)."""


@dataclass
class AdvantageInputs:
    """Everything an estimator may read (see the module docstring for shapes)."""

    token_rewards: torch.Tensor
    response_mask: torch.Tensor
    group_ids: Any
    values: Optional[torch.Tensor] = None
    turn_ids: Optional[torch.Tensor] = None
    tags: Optional[Sequence[str]] = None
    kl: Optional[torch.Tensor] = None
    state_keys: Optional[Sequence[Any]] = None
    episode_ids: Optional[Sequence[Any]] = None
    step_ids: Optional[Sequence[int]] = None
    turn_valid: Optional[Sequence[Sequence[bool]]] = None

    @classmethod
    def from_batch(cls, batch: Any, kl: Optional[torch.Tensor] = None) -> "AdvantageInputs":
        """Read the fields by the names ``roll.data.trajectory.trajectories_to_batch`` writes:
        tensors ``token_rewards``, ``response_mask``, ``turn_ids``, ``values`` (if a critic
        filled it); non-tensors ``group_id``, ``env_tag``, and for step-mode samples
        (``step_index >= 0``) ``state_key``, ``episode_id``, ``step_index``; ``turn_valid``."""
        nt = batch.non_tensors
        steps = nt.get("step_index")
        step_mode = steps is not None and len(steps) > 0 and all(int(s) >= 0 for s in steps)
        if steps is not None and not step_mode and any(int(s) >= 0 for s in steps):
            raise ValueError("batch mixes step-mode and trajectory-mode samples (step_index)")
        return cls(
            token_rewards=batch.tensors["token_rewards"],
            response_mask=batch.tensors["response_mask"],
            group_ids=list(nt["group_id"]),
            values=batch.tensors.get("values"),
            turn_ids=batch.tensors.get("turn_ids"),
            tags=list(nt["env_tag"]) if "env_tag" in nt else None,
            kl=kl,
            state_keys=list(nt["state_key"]) if step_mode else None,
            episode_ids=list(nt["episode_id"]) if step_mode else None,
            step_ids=[int(s) for s in steps] if step_mode else None,
            turn_valid=[list(v) for v in nt["turn_valid"]] if "turn_valid" in nt else None,
        )

    @property
    def batch_size(self) -> int:
        return int(self.token_rewards.shape[0])

    def validate(self) -> None:
        """Shapes agree and rewards sit on model tokens (a bookkeeping bug otherwise)."""
        r, m = self.token_rewards, self.response_mask
        if r.dim() != 2 or r.shape != m.shape:
            raise ValueError(f"token_rewards {tuple(r.shape)} and response_mask {tuple(m.shape)} must be the same [B, T]")
        for name in ("values", "turn_ids", "kl"):
            x = getattr(self, name)
            if x is not None and x.shape != r.shape:
                raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(r.shape)}")
        for name in ("group_ids", "tags", "state_keys", "episode_ids", "step_ids", "turn_valid"):
            x = getattr(self, name)
            if x is not None and len(x) != self.batch_size:
                raise ValueError(f"{name} has {len(x)} entries, expected batch size {self.batch_size}")
        has_tokens = m.bool().any(-1, keepdim=True)
        stray = (r != 0) & ~m.bool() & has_tokens
        if stray.any():
            row = int(stray.any(-1).nonzero()[0])
            raise ValueError(
                f"token_rewards has nonzero entries outside response_mask (first in row {row}); "
                f"put each turn's reward on the last model token of that turn"
            )
        if not torch.isfinite(r).all():
            raise ValueError("token_rewards contains NaN or inf")


@dataclass
class AdvantageOutputs:
    """``advantages`` [B, T] for the policy loss, ``returns`` [B, T] (critic targets for gae;
    the undiscounted/discounted returns elsewhere), ``metrics`` for the tracker."""

    advantages: torch.Tensor
    returns: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


# ---- shared pieces -------------------------------------------------------------------------
def estimator_args(cfg: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """``cfg.adv_estimator_args`` merged over an estimator's ``defaults``; an unknown key is
    an error naming the closest valid one."""
    given = dict(cfg.adv_estimator_args or {})
    for key in given:
        if key not in defaults:
            close = difflib.get_close_matches(key, defaults, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"algorithm.adv_estimator_args.{key} is not an argument of {cfg.adv_estimator!r}{hint} "
                f"(valid: {', '.join(sorted(defaults)) or 'none'})"
            )
    return {**defaults, **given}


def sequence_scores(inputs: AdvantageInputs) -> torch.Tensor:
    """[B] episode score: the sum of a row's rewards (every turn's reward)."""
    return inputs.token_rewards.sum(-1)


def norm_keys(inputs: AdvantageInputs, group_by: str) -> Sequence[Any]:
    """Per-sample keys that define the statistics groups of ``reward_norm.group_by``."""
    if group_by == "group":
        return inputs.group_ids
    if group_by == "batch":
        return [0] * inputs.batch_size
    if group_by == "tag":
        if inputs.tags is None:
            raise ValueError("reward_norm.group_by is 'tag' but the batch carries no env tags")
        return inputs.tags
    raise ValueError(f"unknown reward_norm.group_by {group_by!r}; choose group, batch or tag")


def score_baseline(scores: torch.Tensor, keys: Sequence[Any], method: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample ``(baseline [B], scale [B])`` so that the normalised score is
    ``(x - baseline) * scale``.

    ``mean_std``: group mean and 1/(unbiased std + eps) (scale 1 when std <= eps: all
    equal); ``mean``: group mean, scale 1; ``none``: 0 and 1. A group of one has baseline equal
    to its own score, so its normalised score is 0: there is nothing to compare against.
    """
    if method == "none":
        return torch.zeros_like(scores), torch.ones_like(scores)
    inverse, n = group_index(keys)
    mean, std, _ = group_stats(scores, inverse, n)
    inverse = inverse.to(scores.device)
    baseline = mean[inverse]
    if method == "mean":
        return baseline, torch.ones_like(scores)
    if method == "mean_std":
        s = std[inverse]
        return baseline, torch.where(s > STD_EPS, 1.0 / (s + STD_EPS), torch.ones_like(s))
    raise ValueError(f"unknown reward_norm.method {method!r}; choose mean_std, mean or none")


def state_values(values: torch.Tensor) -> torch.Tensor:
    """[B, T] raw critic outputs ``V(x_<=t)`` -> ``V(x_<t)``, the value of the state in which
    token t is generated (shift right by one; position 0, never a model token, gets 0)."""
    return torch.nn.functional.pad(values[:, :-1], (1, 0))


def _turns(inputs: AdvantageInputs) -> torch.Tensor:
    return inputs.turn_ids if inputs.turn_ids is not None else turn_ids_from_mask(inputs.response_mask)


def _link_discounts(turn: torch.Tensor, next_turn: torch.Tensor, across: float, within: float) -> torch.Tensor:
    """Discount between a model token and the next model token of its row: ``within`` inside
    one turn, ``across`` over a turn boundary, 0 at the end of the trajectory."""
    w = torch.tensor(within, dtype=torch.float64, device=turn.device)
    a = torch.tensor(across, dtype=torch.float64, device=turn.device)
    d = torch.where(turn == next_turn, w, a)
    return torch.where(next_turn >= 0, d, torch.zeros_like(d))


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, turn_ids: torch.Tensor, gamma: float, token_gamma: float) -> torch.Tensor:
    """[B, T] reward-to-go over model tokens only (observation tokens are skipped, they are
    part of the env transition): ``G_t = r_t + g_t * G_next`` with ``g_t = gamma`` across a
    turn boundary and ``token_gamma`` inside a turn. Zero outside ``mask``."""
    m = mask.bool()
    out = torch.zeros_like(rewards)
    nxt = torch.zeros_like(rewards[:, 0])
    next_turn = torch.full_like(turn_ids[:, 0], -1)
    for t in range(rewards.shape[1] - 1, -1, -1):
        mt = m[:, t]
        g = _link_discounts(turn_ids[:, t], next_turn, gamma, token_gamma).to(rewards.dtype)
        ret = rewards[:, t] + g * nxt
        out[:, t] = torch.where(mt, ret, torch.zeros_like(ret))
        nxt = torch.where(mt, ret, nxt)
        next_turn = torch.where(mt, turn_ids[:, t], next_turn)
    return out


def _broadcast(per_sample: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return per_sample[:, None] * mask.to(per_sample.dtype)


def _summary(prefix: str, x: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    m = mask.bool()
    if not m.any():
        return {f"{prefix}_mean": 0.0}
    sel = x[m]
    return {f"{prefix}_mean": float(sel.mean()), f"{prefix}_max": float(sel.max()), f"{prefix}_min": float(sel.min())}


# ---- estimators ----------------------------------------------------------------------------
def _gae_rows(r: torch.Tensor, v: torch.Tensor, m: torch.Tensor, turn: torch.Tensor, cfg: Any,
              boot_v: torch.Tensor, boot_a: torch.Tensor, has_next: torch.Tensor) -> torch.Tensor:
    """GAE over the model tokens of some rows, right to left. A row with ``has_next`` continues
    after its last model token into a next sample whose first model token has state value
    ``boot_v`` and advantage ``boot_a`` (a turn boundary: ``gamma``/``lambd``); else terminal."""
    adv = torch.zeros_like(r)
    next_v, next_a = boot_v.clone(), boot_a.clone()
    # a turn id no row uses: the link from the last model token to the next sample crosses a turn
    next_turn = torch.where(has_next, torch.full_like(turn[:, 0], 1 << 30), torch.full_like(turn[:, 0], -1))
    for t in range(r.shape[1] - 1, -1, -1):
        mt = m[:, t]
        g = _link_discounts(turn[:, t], next_turn, cfg.gamma, cfg.token_gamma).to(r.dtype)
        lam = _link_discounts(turn[:, t], next_turn, cfg.lambd, cfg.token_lambd).to(r.dtype)
        delta = r[:, t] + g * next_v - v[:, t]
        a = delta + g * lam * next_a
        adv[:, t] = torch.where(mt, a, torch.zeros_like(a))
        next_v = torch.where(mt, v[:, t], next_v)
        next_a = torch.where(mt, a, next_a)
        next_turn = torch.where(mt, turn[:, t], next_turn)
    return adv


def _step_successors(inputs: AdvantageInputs) -> list[int]:
    """For step-mode samples: the row holding the next step of each row's episode (step id + 1),
    or -1 when the episode ends there (or its next step is not in the batch)."""
    row_of = {}
    for i, (e, s) in enumerate(zip(inputs.episode_ids, inputs.step_ids)):
        key = (e, int(s))
        if key in row_of:
            raise ValueError(f"episode {e!r} has duplicate step_id {int(s)}")
        row_of[key] = i
    return [row_of.get((e, int(s) + 1), -1) for e, s in zip(inputs.episode_ids, inputs.step_ids)]


@ADVANTAGES.register("gae")
def gae(inputs: AdvantageInputs, cfg: Any) -> AdvantageOutputs:
    """Generalised advantage estimation with a critic, over model tokens only, multi-turn aware.

    ``delta_t = r_t + g_t V_next - V_t``, ``A_t = delta_t + g_t l_t A_next``, returns
    ``A + V`` with ``V_t`` the value of the state before model token t (:func:`state_values`);
    ``(g, l) = (gamma, lambd)`` across turns and ``(token_gamma, token_lambd)``
    inside a turn; the last model token is terminal (V_next = 0).

    Step-mode samples (one turn per row, with ``episode_ids``/``step_ids``) are chained: the
    last model token of step k bootstraps from the first model token of step k + 1 of the same
    episode (across a turn boundary), so an outcome reward reaches every turn exactly as it
    would in one trajectory-mode row. The last step in the batch of an episode is terminal.
    """
    estimator_args(cfg, {})
    if inputs.values is None:
        raise ValueError("adv_estimator 'gae' needs critic values: add a critic role or choose grpo/rloo/reinforce")
    r, m = inputs.token_rewards, inputs.response_mask.bool()
    v = state_values(inputs.values.to(r.dtype))
    turn = _turns(inputs)
    B = inputs.batch_size
    zeros = torch.zeros(B, dtype=r.dtype, device=r.device)
    metrics = {}
    if inputs.episode_ids is None or inputs.step_ids is None:
        adv = _gae_rows(r, v, m, turn, cfg, zeros, zeros, torch.zeros(B, dtype=torch.bool, device=r.device))
    else:
        succ = torch.tensor(_step_successors(inputs), dtype=torch.long, device=r.device)
        has_next = (succ >= 0) & m[succ.clamp(min=0)].any(-1)
        adv = torch.zeros_like(r)
        steps = torch.tensor([int(s) for s in inputs.step_ids], device=r.device)
        for s in sorted(set(steps.tolist()), reverse=True):  # later steps first: their advantages feed earlier ones
            rows = (steps == s).nonzero().squeeze(1)
            nxt = succ[rows].clamp(min=0)
            hn = has_next[rows]
            boot_v = torch.where(hn, _first_model_value(v[nxt], m[nxt], zeros[rows]), zeros[rows])
            boot_a = torch.where(hn, _first_model_value(adv[nxt], m[nxt], zeros[rows]), zeros[rows])
            adv[rows] = _gae_rows(r[rows], v[rows], m[rows], turn[rows], cfg, boot_v, boot_a, hn)
        metrics["reward/gae_chained_steps"] = float(has_next.sum())
    returns = (adv + v) * m.to(r.dtype)
    metrics.update(_summary("reward/values", v, m))
    return AdvantageOutputs(adv, returns, metrics)


@ADVANTAGES.register("grpo")
def grpo(inputs: AdvantageInputs, cfg: Any) -> AdvantageOutputs:
    """GRPO: the episode score normalised within its group (reward_norm), on every token.

    ``reward_norm.method``: mean_std is GRPO, mean is Dr. GRPO; the same advantage on every
    model token of the sample."""
    estimator_args(cfg, {})
    scores = sequence_scores(inputs)
    base, scale = score_baseline(scores, norm_keys(inputs, cfg.reward_norm.group_by), cfg.reward_norm.method)
    adv = _broadcast((scores - base) * scale, inputs.response_mask)
    return AdvantageOutputs(adv, _broadcast(scores, inputs.response_mask))


@ADVANTAGES.register("rloo")
def rloo(inputs: AdvantageInputs, cfg: Any) -> AdvantageOutputs:
    """RLOO: score minus the mean score of the other samples of its group.

    ``A_i = n/(n-1) (x_i - mean)``; a group of one gets 0 (no other sample to compare)."""
    estimator_args(cfg, {})
    scores = sequence_scores(inputs)
    inverse, n = group_index(inputs.group_ids)
    mean, _, count = group_stats(scores, inverse, n)
    inverse = inverse.to(scores.device)
    c = count[inverse]
    adv = torch.where(c > 1, (scores - mean[inverse]) * c / (c - 1.0).clamp(min=1.0), torch.zeros_like(scores))
    return AdvantageOutputs(_broadcast(adv, inputs.response_mask), _broadcast(scores, inputs.response_mask))


@ADVANTAGES.register("reinforce")
def reinforce(inputs: AdvantageInputs, cfg: Any) -> AdvantageOutputs:
    """REINFORCE with a group baseline; on trajectory samples this is StarPO.

    Reward-to-go ``G_t`` (``gamma`` across turns, ``token_gamma`` inside one), normalised with
    the ``reward_norm`` statistics of the samples' full returns ``G_0``:
    ``A_t = (G_t - mean_g) * scale_g``. With gamma = 1 and outcome rewards it equals grpo.
    """
    estimator_args(cfg, {})
    m = inputs.response_mask
    returns = discounted_returns(inputs.token_rewards * m.to(inputs.token_rewards.dtype), m, _turns(inputs), cfg.gamma, cfg.token_gamma)
    g0 = _first_model_value(returns, m, fallback=sequence_scores(inputs))
    base, scale = score_baseline(g0, norm_keys(inputs, cfg.reward_norm.group_by), cfg.reward_norm.method)
    adv = (returns - base[:, None]) * scale[:, None] * m.to(returns.dtype)
    return AdvantageOutputs(adv, returns)


@ADVANTAGES.register("reinforce_pp")
def reinforce_pp(inputs: AdvantageInputs, cfg: Any) -> AdvantageOutputs:
    """REINFORCE++: token-level reward-to-go whitened over all model tokens of the batch.

    The rewards carry the per-token KL penalty when ``use_kl_in_reward``.
    ``group_baseline: true`` first subtracts the group mean of ``G_0`` (REINFORCE++-baseline)."""
    args = estimator_args(cfg, {"group_baseline": False})
    m = inputs.response_mask
    returns = discounted_returns(inputs.token_rewards * m.to(inputs.token_rewards.dtype), m, _turns(inputs), cfg.gamma, cfg.token_gamma)
    centred = returns
    if args["group_baseline"]:
        g0 = _first_model_value(returns, m, fallback=sequence_scores(inputs))
        base, _ = score_baseline(g0, inputs.group_ids, "mean")
        centred = (returns - base[:, None]) * m.to(returns.dtype)
    adv = masked_whiten(centred, m)
    return AdvantageOutputs(adv, returns)


@ADVANTAGES.register("gigpo")
def gigpo(inputs: AdvantageInputs, cfg: Any) -> AdvantageOutputs:
    """GiGPO: episode-level group advantage plus a step-level one over identical states.

    Step-mode samples; the step-level part, weighted by ``step_weight``, compares steps of the
    same group that saw an identical state.

    ``A^E``: episode return (sum of its steps' rewards) normalised over episodes with
    ``reward_norm``; ``A^S``: discounted return from the step (``gamma``) normalised within
    its anchor group ``(group_id, state_key)`` with ``reward_norm.method``.

    ``episode_weight`` (default 1) scales ``A^E``. At 0 a step is credited only against the
    other actions taken from the same state, so a step in a state no other episode of its
    group saw gets no push either way; the first state of a group that shares its start (one
    task per group) is always such an anchor, so the episode's outcome still reaches its first
    action there.

    ``balance_episodes`` (default false): ``A^E`` on each token is scaled by ``n_g / n_e``,
    ``n_e`` the model tokens of the episode and ``n_g`` the mean over the episodes of its
    group, so each episode weighs the same in a token-mean loss and ``A^E`` sums to zero over
    each group's tokens. Without it an episode counts with its length: when failing episodes
    run to the turn limit and successes end early, the group's tokens carry a net negative
    advantage, a push off every sampled token whose gradient lands on the LM-head rows of
    tokens never sampled, always in the same direction (see tag_diagnostics, ``adv_mean``).
    """
    args = estimator_args(cfg, {"step_weight": 1.0, "episode_weight": 1.0, "balance_episodes": False})
    for name in ("state_keys", "episode_ids", "step_ids"):
        if getattr(inputs, name) is None:
            raise ValueError(f"adv_estimator 'gigpo' needs step-mode samples with {name} (rollout step mode)")
    B = inputs.batch_size
    step_reward = sequence_scores(inputs)
    dtype, device = step_reward.dtype, step_reward.device
    ep_inv, n_ep = group_index(inputs.episode_ids)
    ep_inv_l = ep_inv.tolist()
    step_ids = [int(s) for s in inputs.step_ids]

    # Episode-level: one entry per episode (not per step sample, which would weight long
    # episodes more), its group key and its tag taken from its first sample.
    ep_return = torch.zeros(n_ep, dtype=dtype, device=device).index_add_(0, ep_inv.to(device), step_reward)
    keys = norm_keys(inputs, cfg.reward_norm.group_by)
    ep_key: list[Any] = [None] * n_ep
    for i, e in enumerate(ep_inv_l):
        k = keys[i].item() if isinstance(keys[i], torch.Tensor) else keys[i]
        if ep_key[e] is None:
            ep_key[e] = k
        elif ep_key[e] != k:
            raise ValueError(f"episode {inputs.episode_ids[i]!r} has samples in different groups ({ep_key[e]!r}, {k!r})")
    base, scale = score_baseline(ep_return, ep_key, cfg.reward_norm.method)
    a_episode = ((ep_return - base) * scale)[ep_inv.to(device)] * args["episode_weight"]
    if args["balance_episodes"]:
        a_episode = a_episode * _episode_balance(inputs.response_mask, ep_inv, n_ep, ep_key).to(dtype)

    # Step-level: discounted return from each step to the end of its episode.
    by_episode: dict[int, list[int]] = {}
    for i, e in enumerate(ep_inv_l):
        by_episode.setdefault(e, []).append(i)
    rewards_l = step_reward.double().tolist()  # a Python loop over steps: plain floats are cheaper
    returns_l = [0.0] * B
    for e, rows in by_episode.items():
        rows.sort(key=lambda i: step_ids[i])
        seen = [step_ids[i] for i in rows]
        if len(set(seen)) != len(seen):
            raise ValueError(f"episode {inputs.episode_ids[rows[0]]!r} has duplicate step_ids {seen}")
        acc = 0.0
        for i in reversed(rows):
            acc = rewards_l[i] + cfg.gamma * acc
            returns_l[i] = acc
    step_return = torch.tensor(returns_l, dtype=dtype, device=device)
    gid = inputs.group_ids.tolist() if isinstance(inputs.group_ids, torch.Tensor) else list(inputs.group_ids)
    anchors = [(gid[i], inputs.state_keys[i]) for i in range(B)]
    s_base, s_scale = score_baseline(step_return, anchors, cfg.reward_norm.method)
    a_step = (step_return - s_base) * s_scale
    adv = _broadcast(a_episode + args["step_weight"] * a_step, inputs.response_mask)
    anchor_inv, n_anchor = group_index(anchors)
    metrics = {"reward/gigpo_anchor_groups": float(n_anchor), "reward/gigpo_steps": float(B)}
    metrics.update(_gigpo_tag_metrics(inputs.tags, a_episode, args["step_weight"] * a_step, step_return, anchor_inv, n_anchor))
    return AdvantageOutputs(adv, _broadcast(step_return, inputs.response_mask), metrics)


def _episode_balance(mask: torch.Tensor, ep_inv: torch.Tensor, n_ep: int, ep_key: list[Any]) -> torch.Tensor:
    """[B] per-sample weight ``n_g / n_e``: model tokens of the sample's episode (``n_e``)
    against the mean over the episodes of its group (``n_g``); 1 for an episode without tokens."""
    tokens = mask.to(torch.float64).sum(-1)
    ep_tokens = torch.zeros(n_ep, dtype=torch.float64, device=tokens.device).index_add_(0, ep_inv.to(tokens.device), tokens)
    g_inv, n_g = group_index(ep_key)
    g_mean, _, _ = group_stats(ep_tokens, g_inv, n_g)
    w = torch.where(ep_tokens > 0, g_mean[g_inv.to(tokens.device)] / ep_tokens.clamp(min=1.0), torch.ones_like(ep_tokens))
    return w[ep_inv.to(tokens.device)].to(mask.device)


def _gigpo_tag_metrics(tags: Optional[Sequence[str]], a_episode: torch.Tensor, a_step: torch.Tensor,
                       step_return: torch.Tensor, anchor_inv: torch.Tensor, n_anchor: int) -> dict[str, float]:
    """Per tag: mean |episode part| and |step part| of the GiGPO advantage per sample, and the
    share of anchor groups (>= 2 steps) whose step returns differ by less than 0.1 but not
    by nothing (only discounting or move costs tell them apart; mean_std blows that up to 1)."""
    if tags is None:
        return {}
    _, std, count = group_stats(step_return.double(), anchor_inv, n_anchor)
    out: dict[str, float] = {}
    inv_l = anchor_inv.tolist()
    for tag in dict.fromkeys(tags):
        rows = [i for i, t in enumerate(tags) if t == tag]
        p = f"reward/{tag}/"
        out[p + "gigpo_episode_adv_absmean"] = float(a_episode[rows].abs().mean())
        out[p + "gigpo_step_adv_absmean"] = float(a_step[rows].abs().mean())
        groups = sorted({inv_l[i] for i in rows})
        shared = [g for g in groups if count[g] > 1]
        out[p + "gigpo_shared_anchor_share"] = len(shared) / max(len(groups), 1)
        if shared:
            s = std[shared]
            out[p + "gigpo_small_std_anchor_share"] = float(((s > STD_EPS) & (s < 0.1)).double().mean())
    return out


def _first_model_value(x: torch.Tensor, mask: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """[B] value of ``x`` at each row's first model token; ``fallback`` for rows without one."""
    m = mask.bool()
    first = m.long().argmax(-1)
    val = x.gather(1, first[:, None]).squeeze(1)
    return torch.where(m.any(-1), val, fallback)


# ---- per-tag diagnostics --------------------------------------------------------------------
def episode_scores(inputs: AdvantageInputs) -> tuple[torch.Tensor, list[Any], list[Any]]:
    """``(scores [E], group key per episode, tag per episode)``: step-mode samples (with
    ``episode_ids``) summed per episode, else one episode per row."""
    scores = sequence_scores(inputs)
    tags = list(inputs.tags) if inputs.tags is not None else [None] * inputs.batch_size
    gid = inputs.group_ids.tolist() if isinstance(inputs.group_ids, torch.Tensor) else list(inputs.group_ids)
    if inputs.episode_ids is None:
        return scores, gid, tags
    inv, n = group_index(inputs.episode_ids)
    ep = torch.zeros(n, dtype=scores.dtype, device=scores.device).index_add_(0, inv.to(scores.device), scores)
    groups: list[Any] = [None] * n
    ep_tags: list[Any] = [None] * n
    for i, e in enumerate(inv.tolist()):
        if groups[e] is None:
            groups[e], ep_tags[e] = gid[i], tags[i]
    return ep, groups, ep_tags


def tag_diagnostics(inputs: AdvantageInputs, adv: torch.Tensor) -> dict[str, float]:
    """Per env tag ``reward/<tag>/...``: what each env contributes to the policy gradient.

    - ``adv_mean`` / ``adv_std`` / ``adv_absmax`` over the tag's model tokens. ``adv_mean`` is
      the token-weighted mean the token-mean loss sees: nonzero when episodes of different
      lengths (step-mode samples, turns) carry advantages of different sign, e.g. long failing
      episodes against short successful ones (a net push off every sampled token);
    - ``group_score_std``: mean over groups (>= 2 episodes) of the std of episode scores;
      ``zero_std_groups``: share of those groups whose scores are all equal (std <= STD_EPS:
      no signal); ``small_std_groups``: share with std < 0.1 (mean_std normalisation turns
      such differences, e.g. only move costs, into advantages of size 1);
    - ``tokens``: the tag's model tokens in the batch.
    """
    if inputs.tags is None or inputs.batch_size == 0:
        return {}
    m = inputs.response_mask.bool()
    ep_score, ep_group, ep_tag = episode_scores(inputs)
    out: dict[str, float] = {}
    for tag in dict.fromkeys(inputs.tags):
        rows = torch.tensor([t == tag for t in inputs.tags], device=m.device)
        sel = adv[m & rows[:, None]].double()
        p = f"reward/{tag}/"
        out[p + "tokens"] = float(sel.numel())
        if sel.numel():
            out[p + "adv_mean"] = float(sel.mean())
            out[p + "adv_std"] = float(sel.std(unbiased=False))
            out[p + "adv_absmax"] = float(sel.abs().max())
        eps = [e for e, t in enumerate(ep_tag) if t == tag]
        if eps:
            inv, n = group_index([ep_group[e] for e in eps])
            _, std, count = group_stats(ep_score[eps].double(), inv, n)
            std = std[count > 1]
            if std.numel():
                out[p + "group_score_std"] = float(std.mean())
                out[p + "zero_std_groups"] = float((std <= STD_EPS).double().mean())
                out[p + "small_std_groups"] = float((std < 0.1).double().mean())
    return out


# ---- the pipeline's entry point ------------------------------------------------------------
def invalid_turn_mask(inputs: AdvantageInputs) -> torch.Tensor:
    """[B, T] bool: the model tokens of turns whose action the env rejected (``turn_valid``).

    Raises when the batch carries no validity (a batch built without
    ``roll.data.trajectory.trajectories_to_batch``), so that a configured cap never silently
    does nothing."""
    if inputs.turn_valid is None:
        raise ValueError("algorithm.invalid_action_advantage is set but the batch has no turn_valid "
                         "(per-turn action validity from the env)")
    m = inputs.response_mask
    turns = inputs.turn_ids if inputs.turn_ids is not None else turn_ids_from_mask(m)
    width = max((len(v) for v in inputs.turn_valid), default=0)
    # row b's validity padded with True (unknown turns are valid), one extra column for turn -1
    table = torch.ones(inputs.batch_size, width + 1, dtype=torch.bool, device=m.device)
    for b, v in enumerate(inputs.turn_valid):
        table[b, : len(v)] = torch.tensor([bool(x) for x in v], dtype=torch.bool)
    idx = torch.where((turns >= 0) & (turns < width), turns, torch.full_like(turns, width)).long()
    return ~table.gather(1, idx) & m.bool()


def compute_advantages(inputs: AdvantageInputs, cfg: Any, kl_coef: Optional[float] = None) -> AdvantageOutputs:
    """Rewards -> advantages for one batch, as ``cfg`` (an AlgorithmConfig) says.

    1. clip token rewards to ``[-reward_clip, reward_clip]``;
    2. ``use_kl_in_reward``: ``r_t -= kl_coef * kl_t`` on model tokens (``kl_coef`` from the
       pipeline's KL controller, default ``init_kl_coef``);
    3. the registered estimator ``cfg.adv_estimator``;
    4. ``whiten_advantages``: masked whitening over the batch; then ``advantage_clip``, then
       ``advantage_floor``, then ``invalid_action_advantage`` (the cap on turns the env rejected);
    5. zero outside ``response_mask``; a non-finite advantage is an error, not a silent NaN.
    """
    inputs.validate()
    fn = ADVANTAGES.get(cfg.adv_estimator)
    m = inputs.response_mask
    mf = m.to(inputs.token_rewards.dtype)
    rewards = inputs.token_rewards
    metrics: dict[str, float] = {"reward/score_mean": float(sequence_scores(inputs).mean()) if inputs.batch_size else 0.0}
    if cfg.reward_clip is not None:
        clipped = rewards.clamp(-cfg.reward_clip, cfg.reward_clip)
        metrics["reward/clipped_tokens"] = float((clipped != rewards).sum())
        rewards = clipped
    if cfg.use_kl_in_reward:
        if inputs.kl is None:
            raise ValueError("algorithm.use_kl_in_reward is set but the batch has no per-token kl (needs a reference role)")
        coef = cfg.init_kl_coef if kl_coef is None else kl_coef
        rewards = rewards - coef * inputs.kl.to(rewards.dtype) * mf
        metrics["reward/kl_coef"] = float(coef)
        metrics["reward/kl_mean"] = float(masked_mean(inputs.kl.to(rewards.dtype), m))
    out = fn(dataclasses.replace(inputs, token_rewards=rewards), cfg)
    adv = out.advantages
    if cfg.whiten_advantages:
        adv = masked_whiten(adv, m)
    if cfg.advantage_clip is not None:
        adv = adv.clamp(-cfg.advantage_clip, cfg.advantage_clip)
    if cfg.advantage_floor is not None:
        floored = (adv < cfg.advantage_floor) & m.bool()
        metrics["reward/floored_token_share"] = float(floored.sum()) / max(1, int(m.sum()))
        adv = adv.clamp(min=cfg.advantage_floor)
    if cfg.invalid_action_advantage is not None:
        invalid = invalid_turn_mask(inputs)
        capped = invalid & (adv > cfg.invalid_action_advantage)
        metrics["reward/invalid_token_share"] = float(invalid.sum()) / max(1, int(m.sum()))
        metrics["reward/invalid_capped_token_share"] = float(capped.sum()) / max(1, int(m.sum()))
        adv = torch.where(capped, torch.full_like(adv, cfg.invalid_action_advantage), adv)
    adv = adv * mf
    returns = out.returns * mf
    if not (torch.isfinite(adv).all() and torch.isfinite(returns).all()):
        raise FloatingPointError(f"advantage estimator {cfg.adv_estimator!r} produced NaN/inf")
    metrics.update(out.metrics)
    metrics.update(_summary("reward/advantages", adv, m))
    metrics.update(tag_diagnostics(inputs, adv))
    metrics.update(_summary("reward/returns", returns, m))
    return AdvantageOutputs(adv, returns, metrics)
