"""Slow, obviously-correct float64 references for the algorithms, written as plain Python loops
over lists (independently of roll/algorithms, which is vectorised), plus random batch builders.

Nothing here imports roll.algorithms: a bug shared by both would otherwise go unseen.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Optional

import torch

EPS = 1e-6  # same constant as roll.algorithms.advantages.STD_EPS (documented behaviour)


# ---- random multi-turn batches -------------------------------------------------------------
@dataclass
class RandomBatch:
    token_rewards: torch.Tensor
    response_mask: torch.Tensor
    values: torch.Tensor
    group_ids: list
    tags: list
    turn_ids: torch.Tensor
    turns: list = field(default_factory=list)  # per row: list of lists of model positions


def random_batch(seed: int, group_sizes=(3, 1, 4, 2), max_turns: int = 3, zero_length_rows: int = 1,
                 reward_choices: Optional[list] = None) -> RandomBatch:
    """Rows = prompt, then turns of model tokens separated by observation tokens, then padding.
    Ragged lengths; some rows have no model token at all (zero-length response)."""
    rng = random.Random(seed)
    rows = []
    for g, size in enumerate(group_sizes):
        for _ in range(size):
            rows.append(g)
    zero_rows = set(rng.sample(range(len(rows)), zero_length_rows)) if zero_length_rows else set()
    layouts = []
    for i, g in enumerate(rows):
        pos = rng.randint(1, 3)  # prompt
        turns = []
        if i not in zero_rows:
            for _ in range(rng.randint(1, max_turns)):
                n = rng.randint(1, 4)
                turns.append(list(range(pos, pos + n)))
                pos += n + rng.randint(1, 2)  # observation tokens (at least one: the template)
        layouts.append((pos, turns))
    T = max(p for p, _ in layouts) + rng.randint(0, 2)
    B = len(rows)
    rewards = torch.zeros(B, T, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.float64)
    turn_ids = torch.full((B, T), -1, dtype=torch.long)
    values = torch.zeros(B, T, dtype=torch.float64)
    for i, (_, turns) in enumerate(layouts):
        for k, tpos in enumerate(turns):
            for p in tpos:
                mask[i, p] = 1.0
                turn_ids[i, p] = k
                values[i, p] = rng.uniform(-1, 1)
            r = rng.choice(reward_choices) if reward_choices else rng.uniform(-1, 2)
            rewards[i, tpos[-1]] = r
        if not turns:  # zero-length response: the outcome still exists, on the last prompt token
            rewards[i, 0] = rng.choice(reward_choices) if reward_choices else rng.uniform(-1, 2)
    tags = [rng.choice(["sokoban", "frozen_lake"]) for _ in rows]
    # group ids as strings: estimators must accept any hashable key
    return RandomBatch(rewards, mask, values, [f"g{g}" for g in rows], tags, turn_ids, [t for _, t in layouts])


def raw_critic_output(state_values: torch.Tensor) -> torch.Tensor:
    """Critic outputs per position ``V(x_<=t)`` whose shift is ``state_values`` (``V(x_<t)``
    at every model token): raw[t - 1] = state_values[t]."""
    raw = torch.zeros_like(state_values)
    raw[:, :-1] = state_values[:, 1:]
    return raw


# ---- statistics ----------------------------------------------------------------------------
def _mean(xs):
    return sum(xs) / len(xs)


def _std(xs):
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def ref_normalise(x: float, members: list, method: str) -> float:
    if method == "none":
        return x
    mu = _mean(members)
    if method == "mean":
        return x - mu
    s = _std(members)
    return (x - mu) / (s + EPS) if s > EPS else x - mu


def keys_for(rb_group_ids, tags, group_by):
    if group_by == "group":
        return list(rb_group_ids)
    if group_by == "batch":
        return [0] * len(rb_group_ids)
    return list(tags)


def row_models(mask_row, turn_row):
    """[(position, turn)] of model tokens in a row, in order."""
    return [(t, int(turn_row[t])) for t in range(len(mask_row)) if mask_row[t] > 0]


def ref_returns_row(rew_row, mask_row, turn_row, gamma, token_gamma):
    toks = row_models(mask_row, turn_row)
    out = {}
    G = 0.0
    for j in range(len(toks) - 1, -1, -1):
        t, k = toks[j]
        if j == len(toks) - 1:
            G = float(rew_row[t])
        else:
            disc = token_gamma if toks[j + 1][1] == k else gamma
            G = float(rew_row[t]) + disc * G
        out[t] = G
    return out


# ---- estimators ----------------------------------------------------------------------------
def ref_gae(rewards, mask, values, turn_ids, gamma, lambd, token_gamma, token_lambd):
    B, T = rewards.shape
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for i in range(B):
        toks = row_models(mask[i].tolist(), turn_ids[i].tolist())
        A = 0.0
        for j in range(len(toks) - 1, -1, -1):
            t, k = toks[j]
            v = float(values[i, t])
            if j == len(toks) - 1:
                delta = float(rewards[i, t]) - v
                A = delta
            else:
                same = toks[j + 1][1] == k
                g = token_gamma if same else gamma
                lam = token_lambd if same else lambd
                v_next = float(values[i, toks[j + 1][0]])
                delta = float(rewards[i, t]) + g * v_next - v
                A = delta + g * lam * A
            adv[i][t] = A
            ret[i][t] = A + v
    return torch.tensor(adv, dtype=torch.float64), torch.tensor(ret, dtype=torch.float64)


def ref_grpo(rewards, mask, group_ids, tags, group_by, method):
    B, T = rewards.shape
    scores = [float(rewards[i].sum()) for i in range(B)]
    keys = keys_for(group_ids, tags, group_by)
    adv = [[0.0] * T for _ in range(B)]
    for i in range(B):
        members = [scores[j] for j in range(B) if keys[j] == keys[i]]
        a = ref_normalise(scores[i], members, method)
        for t in range(T):
            if mask[i, t] > 0:
                adv[i][t] = a
    return torch.tensor(adv, dtype=torch.float64)


def ref_rloo(rewards, mask, group_ids):
    B, T = rewards.shape
    scores = [float(rewards[i].sum()) for i in range(B)]
    adv = [[0.0] * T for _ in range(B)]
    for i in range(B):
        others = [scores[j] for j in range(B) if group_ids[j] == group_ids[i] and j != i]
        a = scores[i] - _mean(others) if others else 0.0
        for t in range(T):
            if mask[i, t] > 0:
                adv[i][t] = a
    return torch.tensor(adv, dtype=torch.float64)


def ref_reinforce(rewards, mask, turn_ids, group_ids, tags, gamma, token_gamma, group_by, method):
    B, T = rewards.shape
    rets = [ref_returns_row(rewards[i].tolist(), mask[i].tolist(), turn_ids[i].tolist(), gamma, token_gamma) for i in range(B)]
    g0 = []
    for i in range(B):
        g0.append(rets[i][min(rets[i])] if rets[i] else float(rewards[i].sum()))
    keys = keys_for(group_ids, tags, group_by)
    adv = [[0.0] * T for _ in range(B)]
    for i in range(B):
        members = [g0[j] for j in range(B) if keys[j] == keys[i]]
        mu = _mean(members) if method != "none" else 0.0
        s = _std(members)
        scale = 1.0 / (s + EPS) if (method == "mean_std" and s > EPS) else 1.0
        for t, G in rets[i].items():
            adv[i][t] = (G - mu) * scale
    return torch.tensor(adv, dtype=torch.float64)


def ref_reinforce_pp(rewards, mask, turn_ids, group_ids, gamma, token_gamma, group_baseline=False):
    B, T = rewards.shape
    rets = [ref_returns_row(rewards[i].tolist(), mask[i].tolist(), turn_ids[i].tolist(), gamma, token_gamma) for i in range(B)]
    if group_baseline:
        g0 = [rets[i][min(rets[i])] if rets[i] else float(rewards[i].sum()) for i in range(B)]
        for i in range(B):
            mu = _mean([g0[j] for j in range(B) if group_ids[j] == group_ids[i]])
            rets[i] = {t: G - mu for t, G in rets[i].items()}
    flat = [G for r in rets for G in r.values()]
    mu = _mean(flat) if flat else 0.0
    var = statistics.variance(flat) if len(flat) > 1 else 0.0
    adv = [[0.0] * T for _ in range(B)]
    for i in range(B):
        for t, G in rets[i].items():
            adv[i][t] = (G - mu) / math.sqrt(var + 1e-8)
    return torch.tensor(adv, dtype=torch.float64)


def ref_gigpo(step_rewards, group_ids, episode_ids, step_ids, state_keys, gamma, method, step_weight, episode_weight=1.0):
    """Per step sample advantage (scalar)."""
    B = len(step_rewards)
    episodes = sorted(set(episode_ids), key=episode_ids.index)
    ep_ret = {e: sum(step_rewards[i] for i in range(B) if episode_ids[i] == e) for e in episodes}
    ep_group = {e: group_ids[episode_ids.index(e)] for e in episodes}
    a_ep = {}
    for e in episodes:
        members = [ep_ret[f] for f in episodes if ep_group[f] == ep_group[e]]
        a_ep[e] = ref_normalise(ep_ret[e], members, method)
    step_ret = [0.0] * B
    for e in episodes:
        rows = sorted([i for i in range(B) if episode_ids[i] == e], key=lambda i: step_ids[i])
        for pos, i in enumerate(rows):
            step_ret[i] = sum(gamma ** (q - pos) * step_rewards[rows[q]] for q in range(pos, len(rows)))
    out = []
    for i in range(B):
        members = [step_ret[j] for j in range(B) if group_ids[j] == group_ids[i] and state_keys[j] == state_keys[i]]
        out.append(episode_weight * a_ep[episode_ids[i]] + step_weight * ref_normalise(step_ret[i], members, method))
    return out


# ---- losses --------------------------------------------------------------------------------
def ref_ppo_token(lp, old, a, low, high, dual):
    r = math.exp(lp - old)
    l1 = -a * r
    l2 = -a * min(max(r, 1 - low), 1 + high)
    loss = max(l1, l2)
    if dual is not None and a < 0:
        loss = min(loss, -a * dual)
    return loss


def ref_policy_loss(name, logprobs, old, adv, mask, low, high, dual):
    B, T = logprobs.shape
    out = [[0.0] * T for _ in range(B)]
    for i in range(B):
        if name == "gspo":
            diffs = [float(logprobs[i, t] - old[i, t]) for t in range(T) if mask[i, t] > 0]
            s = math.exp(sum(diffs) / len(diffs)) if diffs else 1.0
        for t in range(T):
            lp, o, a = float(logprobs[i, t]), float(old[i, t]), float(adv[i, t])
            if name == "ppo_clip":
                out[i][t] = ref_ppo_token(lp, o, a, low, high, dual)
            elif name == "dual_clip":
                out[i][t] = ref_ppo_token(lp, o, a, low, high, dual if dual is not None else 3.0)
            elif name == "gspo":
                out[i][t] = max(-a * s, -a * min(max(s, 1 - low), 1 + high))
            elif name == "pg":
                out[i][t] = -a * lp
            else:
                raise KeyError(name)
    return torch.tensor(out, dtype=torch.float64)


def ref_kl(lp, ref, estimator):
    d = lp - ref
    if estimator == "k1":
        return d
    if estimator == "k2":
        return d * d / 2
    return math.exp(ref - lp) - (ref - lp) - 1


def ref_value_loss(v, old, ret, clip):
    l1 = (v - ret) ** 2
    if clip is None:
        return 0.5 * l1
    vc = old + min(max(v - old, -clip), clip)
    return 0.5 * max(l1, (vc - ret) ** 2)


def ref_aggregate(loss, mask, mode, n_tok=None, n_seq=None, C=None):
    B, T = loss.shape
    rows = [[float(loss[i, t]) for t in range(T) if mask[i, t] > 0] for i in range(B)]
    n_tok = n_tok if n_tok is not None else sum(len(r) for r in rows)
    n_seq = n_seq if n_seq is not None else sum(1 for r in rows if r)
    if mode == "token-mean":
        return sum(sum(r) for r in rows) / max(n_tok, 1)
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in rows) / max(n_seq, 1)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows if r) / max(n_seq, 1)
    return sum(sum(r) for r in rows) / (max(n_seq, 1) * C)
