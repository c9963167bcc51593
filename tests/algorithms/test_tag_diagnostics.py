"""Per-tag advantage diagnostics (``reward/<tag>/...``) against a hand-written loop."""
from __future__ import annotations

import math

import torch

from roll.algorithms.advantages import AdvantageInputs, compute_advantages, tag_diagnostics
from roll.config.algorithm import AlgorithmConfig


def step_inputs(episodes):
    """``episodes``: (tag, group, episode, [step rewards], [tokens per step]); one row per step,
    its reward on the step's last token, a different state per step (no shared anchors)."""
    rows = [(tag, g, e, s, r, n) for tag, g, e, rs, ns in episodes for s, (r, n) in enumerate(zip(rs, ns))]
    T = 1 + max(r[5] for r in rows)
    B = len(rows)
    rewards = torch.zeros(B, T, dtype=torch.float64)
    mask = torch.zeros(B, T)
    for i, (_, _, _, _, r, n) in enumerate(rows):
        mask[i, 1:1 + n] = 1
        rewards[i, n] = r
    return AdvantageInputs(token_rewards=rewards, response_mask=mask, group_ids=[r[1] for r in rows],
                           tags=[r[0] for r in rows], episode_ids=[r[2] for r in rows],
                           step_ids=[r[3] for r in rows], state_keys=[f"{r[2]}/{r[3]}" for r in rows]), rows


EPISODES = [
    # Sokoban-like: every episode fails; they differ only by move costs (small std)
    ("Sok", "s0", "a", [-0.1] * 8, [5] * 8),
    ("Sok", "s0", "b", [-0.1] * 7 + [-0.2], [5] * 8),
    # a group whose episodes score the same: no signal
    ("Sok", "s1", "c", [-0.1, -0.1], [5, 5]),
    ("Sok", "s1", "d", [-0.1, -0.1], [5, 6]),
    # FrozenLake-like: a short success against long failures
    ("FL", "f0", "e", [0.0, 1.0], [5, 5]),
    ("FL", "f0", "f", [0.0] * 8, [5] * 8),
    ("FL", "f0", "g", [0.0] * 6, [8] * 6),
]


def test_tag_diagnostics_match_a_loop():
    inp, rows = step_inputs(EPISODES)
    cfg = AlgorithmConfig(adv_estimator="gigpo", gamma=0.95, adv_estimator_args={"step_weight": 0.0})
    out = compute_advantages(inp, cfg)
    adv = out.advantages
    for tag in ("Sok", "FL"):
        vals = [float(adv[i, t]) for i, r in enumerate(rows) if r[0] == tag
                for t in range(adv.shape[1]) if inp.response_mask[i, t] > 0]
        mean = sum(vals) / len(vals)
        assert math.isclose(out.metrics[f"reward/{tag}/adv_mean"], mean, abs_tol=1e-9)
        assert math.isclose(out.metrics[f"reward/{tag}/adv_std"], math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals)), abs_tol=1e-9)
        assert math.isclose(out.metrics[f"reward/{tag}/adv_absmax"], max(abs(v) for v in vals), abs_tol=1e-9)
        assert out.metrics[f"reward/{tag}/tokens"] == len(vals)
    m = out.metrics
    # Sokoban: group s0 differs by 0.1 (std 0.0707), s1 not at all
    assert math.isclose(m["reward/Sok/group_score_std"], (0.1 / math.sqrt(2)) / 2, rel_tol=1e-6)
    assert m["reward/Sok/zero_std_groups"] == 0.5
    assert m["reward/Sok/small_std_groups"] == 1.0
    assert m["reward/FL/zero_std_groups"] == 0.0 and m["reward/FL/small_std_groups"] == 0.0
    # the short success is outweighed by the long failures' steps: a net negative token mean
    assert m["reward/FL/adv_mean"] < -0.1
    # mean_std gives the 0.1 move-cost difference full size
    assert math.isclose(m["reward/Sok/adv_absmax"], 1 / math.sqrt(2), rel_tol=1e-4)


def test_tag_diagnostics_without_tags_or_episodes():
    inp, _ = step_inputs(EPISODES[:2])
    no_tags = AdvantageInputs(token_rewards=inp.token_rewards, response_mask=inp.response_mask, group_ids=inp.group_ids)
    assert tag_diagnostics(no_tags, inp.token_rewards) == {}
    # trajectory rows (no episode ids): each row is an episode of its group
    rows = AdvantageInputs(token_rewards=inp.token_rewards, response_mask=inp.response_mask,
                           group_ids=["g"] * len(inp.group_ids), tags=["T"] * len(inp.group_ids))
    m = tag_diagnostics(rows, torch.zeros_like(inp.token_rewards))
    assert m["reward/T/adv_mean"] == 0.0 and m["reward/T/zero_std_groups"] == 0.0
    assert math.isclose(m["reward/T/group_score_std"], float(inp.token_rewards.sum(-1).std()), rel_tol=1e-9)


def group_token_sums(adv, inp, rows):
    sums = {}
    for i, r in enumerate(rows):
        sums[r[1]] = sums.get(r[1], 0.0) + float((adv[i] * inp.response_mask[i]).sum())
    return sums


def test_balance_episodes_weighs_every_episode_the_same():
    inp, rows = step_inputs(EPISODES)
    plain = AlgorithmConfig(adv_estimator="gigpo", gamma=0.95, adv_estimator_args={"step_weight": 0.0})
    balanced = AlgorithmConfig(adv_estimator="gigpo", gamma=0.95,
                               adv_estimator_args={"step_weight": 0.0, "balance_episodes": True})
    a_plain = compute_advantages(inp, plain).advantages
    out = compute_advantages(inp, balanced)
    # by length, the long failures outweigh the short success: a net push off sampled tokens
    assert group_token_sums(a_plain, inp, rows)["f0"] < -1.0
    for g, total in group_token_sums(out.advantages, inp, rows).items():
        assert abs(total) < 1e-9, (g, total)
    assert abs(out.metrics["reward/FL/adv_mean"]) < 1e-9
    # loop: A^E of an episode times (mean tokens per episode of its group) / (its tokens)
    tokens = {}
    for i, r in enumerate(rows):
        tokens[r[2]] = tokens.get(r[2], 0.0) + float(inp.response_mask[i].sum())
    for i, r in enumerate(rows):
        group_eps = {q[2] for q in rows if q[1] == r[1]}
        w = sum(tokens[e] for e in group_eps) / len(group_eps) / tokens[r[2]]
        t = int(inp.response_mask[i].nonzero()[0])
        assert math.isclose(float(out.advantages[i, t]), float(a_plain[i, t]) * w, rel_tol=1e-9, abs_tol=1e-12)


def test_balance_episodes_changes_nothing_for_equal_lengths():
    eq = [("T", "g", e, [r, 0.0], [4, 4]) for e, r in (("a", 1.0), ("b", 0.0), ("c", 0.5))]
    inp, _ = step_inputs(eq)
    a = compute_advantages(inp, AlgorithmConfig(adv_estimator="gigpo", gamma=0.9)).advantages
    b = compute_advantages(inp, AlgorithmConfig(adv_estimator="gigpo", gamma=0.9,
                                                adv_estimator_args={"balance_episodes": True})).advantages
    assert torch.allclose(a, b, atol=1e-12)


def _adam_on_closing_tag(adv_per_row: torch.Tensor, steps: int = 60, lr: float = 0.05) -> float:
    """A toy policy with one shared logit vector for the token after the action: every row
    samples the closing tag (probability 0.998, near 1 as after SFT). Adam on the token-mean policy
    gradient ``-A log p(tag)``; returns p(tag) at the end."""
    logits = torch.full((8,), -4.0)
    logits[0] = 4.0  # the closing tag
    logits.requires_grad_(True)
    opt = torch.optim.Adam([logits], lr=lr)
    for _ in range(steps):
        logp = torch.log_softmax(logits, -1)[0].expand(len(adv_per_row))
        loss = -(adv_per_row * logp).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(torch.softmax(logits.detach(), -1)[0])


def test_unbalanced_episode_advantages_erode_the_closing_tag_under_adam():
    """The multi-env drift in miniature: long failing episodes give a group's tokens a net
    negative advantage; the closing tag, in every valid answer, gets a tiny one-signed gradient
    that Adam turns into full steps. balance_episodes removes the net push."""
    inp, rows = step_inputs([("FL", "f0", "e", [0.0, 1.0], [5, 5]),
                             ("FL", "f0", "f", [0.0] * 8, [5] * 8),
                             ("FL", "f0", "g", [0.0] * 8, [5] * 8)])
    per_row = {}
    for balance in (False, True):
        cfg = AlgorithmConfig(adv_estimator="gigpo", gamma=0.95,
                              adv_estimator_args={"step_weight": 0.0, "balance_episodes": balance})
        adv = compute_advantages(inp, cfg).advantages
        per_row[balance] = torch.stack([adv[i][inp.response_mask[i] > 0][0] for i in range(len(rows))]).float()
    start = float(torch.softmax(torch.tensor([4.0] + [-4.0] * 7), -1)[0])
    assert _adam_on_closing_tag(per_row[False]) < 0.5 < start
    assert _adam_on_closing_tag(per_row[True]) > start - 1e-4
