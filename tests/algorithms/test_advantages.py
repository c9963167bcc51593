"""Advantage estimators against the float64 loop references, a hand-worked multi-turn GAE
example, and the edge cases every registered estimator must survive."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

from algo_reference import (
    random_batch,
    raw_critic_output,
    ref_gae,
    ref_gigpo,
    ref_grpo,
    ref_reinforce,
    ref_reinforce_pp,
    ref_rloo,
)
from roll.algorithms.advantages import AdvantageInputs, compute_advantages
from roll.config.algorithm import AlgorithmConfig, RewardNormConfig
from roll.registry import ADVANTAGES

SEEDS = [0, 1, 2, 3, 4]


def cfg_for(estimator: str, **kw) -> AlgorithmConfig:
    norm = kw.pop("reward_norm", None)
    cfg = AlgorithmConfig(adv_estimator=estimator, **kw)
    if norm is not None:
        cfg.reward_norm = RewardNormConfig(**norm)
    return cfg


def inputs_of(rb, with_turn_ids: bool = True) -> AdvantageInputs:
    return AdvantageInputs(
        token_rewards=rb.token_rewards.clone(),
        response_mask=rb.response_mask.clone(),
        group_ids=list(rb.group_ids),
        values=raw_critic_output(rb.values),  # the reference reads rb.values as V(state before t)
        turn_ids=rb.turn_ids.clone() if with_turn_ids else None,
        tags=list(rb.tags),
    )


def step_mode_batch(seed: int):
    """GiGPO step-mode samples: groups of episodes from one seed; each step is one row with a
    single turn; states drawn from a small set so that identical states recur (anchors)."""
    rng = random.Random(seed)
    rows = []
    for g in range(3):
        for e in range(rng.randint(1, 4)):
            n_steps = rng.randint(1, 4)
            for s in range(n_steps):
                rows.append((f"g{g}", f"g{g}e{e}", s, f"state{rng.randint(0, 2)}", rng.choice([0.0, 0.0, 1.0, -0.1, 0.5])))
    rng.shuffle(rows)  # estimators must not rely on order
    B, T = len(rows), 6
    rewards = torch.zeros(B, T, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.float64)
    for i, (_, _, _, _, r) in enumerate(rows):
        n = rng.randint(1, 4)
        mask[i, 1:1 + n] = 1
        rewards[i, n] = r
    inputs = AdvantageInputs(
        token_rewards=rewards, response_mask=mask, group_ids=[r[0] for r in rows],
        episode_ids=[r[1] for r in rows], step_ids=[r[2] for r in rows], state_keys=[r[3] for r in rows],
        tags=["t"] * B,
    )
    return inputs, rows


# ---- reference comparisons -----------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma,lambd,tg,tl", [(1.0, 1.0, 1.0, 1.0), (0.9, 0.8, 0.97, 0.5), (0.5, 0.95, 1.0, 0.95)])
@pytest.mark.parametrize("with_turn_ids", [True, False])
def test_gae_matches_reference(seed, gamma, lambd, tg, tl, with_turn_ids):
    rb = random_batch(seed)
    cfg = cfg_for("gae", gamma=gamma, lambd=lambd, token_gamma=tg, token_lambd=tl)
    out = compute_advantages(inputs_of(rb, with_turn_ids), cfg)
    adv, ret = ref_gae(rb.token_rewards, rb.response_mask, rb.values, rb.turn_ids, gamma, lambd, tg, tl)
    torch.testing.assert_close(out.advantages, adv, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.returns, ret, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("group_by", ["group", "batch", "tag"])
@pytest.mark.parametrize("method", ["mean_std", "mean", "none"])
def test_grpo_matches_reference(seed, group_by, method):
    rb = random_batch(seed, group_sizes=(3, 1, 5, 2, 4))
    cfg = cfg_for("grpo", reward_norm={"group_by": group_by, "method": method})
    out = compute_advantages(inputs_of(rb), cfg)
    ref = ref_grpo(rb.token_rewards, rb.response_mask, rb.group_ids, rb.tags, group_by, method)
    torch.testing.assert_close(out.advantages, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_matches_reference(seed):
    rb = random_batch(seed, group_sizes=(3, 1, 5, 2))
    out = compute_advantages(inputs_of(rb), cfg_for("rloo"))
    torch.testing.assert_close(out.advantages, ref_rloo(rb.token_rewards, rb.response_mask, rb.group_ids), rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma,tg", [(1.0, 1.0), (0.9, 0.99)])
@pytest.mark.parametrize("group_by,method", [("group", "mean_std"), ("tag", "mean"), ("batch", "none"), ("batch", "mean_std")])
def test_reinforce_matches_reference(seed, gamma, tg, group_by, method):
    rb = random_batch(seed)
    cfg = cfg_for("reinforce", gamma=gamma, token_gamma=tg, reward_norm={"group_by": group_by, "method": method})
    out = compute_advantages(inputs_of(rb), cfg)
    ref = ref_reinforce(rb.token_rewards, rb.response_mask, rb.turn_ids, rb.group_ids, rb.tags, gamma, tg, group_by, method)
    torch.testing.assert_close(out.advantages, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma,tg", [(1.0, 1.0), (0.9, 0.99)])
@pytest.mark.parametrize("group_baseline", [False, True])
def test_reinforce_pp_matches_reference(seed, gamma, tg, group_baseline):
    rb = random_batch(seed)
    cfg = cfg_for("reinforce_pp", gamma=gamma, token_gamma=tg, adv_estimator_args={"group_baseline": group_baseline})
    out = compute_advantages(inputs_of(rb), cfg)
    ref = ref_reinforce_pp(rb.token_rewards, rb.response_mask, rb.turn_ids, rb.group_ids, gamma, tg, group_baseline)
    torch.testing.assert_close(out.advantages, ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.95])
@pytest.mark.parametrize("method", ["mean_std", "mean"])
@pytest.mark.parametrize("step_weight,episode_weight", [(1.0, 1.0), (0.5, 1.0), (1.0, 0.0)])
def test_gigpo_matches_reference(seed, gamma, method, step_weight, episode_weight):
    inputs, rows = step_mode_batch(seed)
    cfg = cfg_for("gigpo", gamma=gamma, reward_norm={"group_by": "group", "method": method},
                  adv_estimator_args={"step_weight": step_weight, "episode_weight": episode_weight})
    out = compute_advantages(inputs, cfg)
    ref = ref_gigpo([r[4] for r in rows], [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                    [r[3] for r in rows], gamma, method, step_weight, episode_weight)
    expected = torch.tensor(ref, dtype=torch.float64)[:, None] * inputs.response_mask
    torch.testing.assert_close(out.advantages, expected, rtol=0, atol=1e-12)


def test_gigpo_episode_weight_zero_credits_only_shared_states():
    """episode_weight 0: a step in a state no other step of its group saw gets advantage 0,
    and every anchor group's advantages are centred (mean method)."""
    inputs, rows = step_mode_batch(3)
    cfg = cfg_for("gigpo", gamma=0.9, reward_norm={"group_by": "group", "method": "mean"},
                  adv_estimator_args={"episode_weight": 0.0})
    adv = compute_advantages(inputs, cfg).advantages[:, 1]  # every row masks column 1 in
    anchors = [(r[0], r[3]) for r in rows]
    alone = [i for i, a in enumerate(anchors) if anchors.count(a) == 1]
    shared = [i for i, a in enumerate(anchors) if anchors.count(a) > 1]
    assert alone and shared
    assert all(adv[i] == 0 for i in alone)
    assert any(adv[i] != 0 for i in shared)
    for a in set(anchors[i] for i in shared):
        members = [i for i in shared if anchors[i] == a]
        assert abs(float(adv[members].sum())) < 1e-9


def test_kl_in_reward_is_applied_before_the_estimator():
    rb = random_batch(7)
    kl = torch.rand_like(rb.token_rewards) * rb.response_mask
    inp = dataclasses.replace(inputs_of(rb), kl=kl)
    cfg = cfg_for("reinforce_pp", use_kl_in_reward=True, init_kl_coef=0.05)
    out = compute_advantages(inp, cfg, kl_coef=0.2)
    penalised = rb.token_rewards - 0.2 * kl
    ref = ref_reinforce_pp(penalised, rb.response_mask, rb.turn_ids, rb.group_ids, 1.0, 1.0)
    torch.testing.assert_close(out.advantages, ref, rtol=0, atol=1e-10)
    assert out.metrics["reward/kl_coef"] == 0.2
    with pytest.raises(ValueError, match="kl"):
        compute_advantages(inputs_of(rb), cfg)


def test_reward_clip_whiten_and_advantage_clip():
    rb = random_batch(3)
    cfg = cfg_for("grpo", reward_clip=0.5, whiten_advantages=True, advantage_clip=0.8)
    out = compute_advantages(inputs_of(rb), cfg)
    clipped = rb.token_rewards.clamp(-0.5, 0.5)
    ref = ref_grpo(clipped, rb.response_mask, rb.group_ids, rb.tags, "group", "mean_std")
    sel = ref[rb.response_mask.bool()]
    whitened = (ref - sel.mean()) / torch.sqrt(sel.var() + 1e-8) * rb.response_mask
    torch.testing.assert_close(out.advantages, whitened.clamp(-0.8, 0.8), rtol=0, atol=1e-10)
    assert out.advantages.abs().max() <= 0.8 + 1e-12


def test_advantage_floor_keeps_only_better_than_average_actions():
    """advantage_floor 0: negative advantages become 0 (after advantage_clip), positive ones are
    unchanged, nothing outside the mask; the share of model tokens floored is reported."""
    rb = random_batch(5)
    plain = compute_advantages(inputs_of(rb), cfg_for("grpo", advantage_clip=1.5))
    out = compute_advantages(inputs_of(rb), cfg_for("grpo", advantage_clip=1.5, advantage_floor=0.0))
    m = rb.response_mask.bool()
    assert (plain.advantages[m] < 0).any() and (plain.advantages[m] > 0).any()
    torch.testing.assert_close(out.advantages, plain.advantages.clamp(min=0) * rb.response_mask, rtol=0, atol=0)
    assert out.metrics["reward/floored_token_share"] == pytest.approx(float((plain.advantages[m] < 0).double().mean()))
    assert out.advantages[~m].abs().max() == 0
    assert "reward/floored_token_share" not in plain.metrics


@pytest.mark.parametrize("cap", [0.0, -0.25])
def test_invalid_action_advantage_caps_only_rejected_turns(cap):
    """Trajectory mode: the tokens of turns marked invalid get min(advantage, cap) (after the
    floor), every other token keeps its advantage; turns past a row's list count as valid."""
    rb = random_batch(7)
    turns = rb.turn_ids
    n_turns = [int(turns[b].max()) + 1 for b in range(turns.shape[0])]
    rng = random.Random(3)
    valid = [[rng.random() < 0.5 for _ in range(max(n - 1, 0))] for n in n_turns]  # last turn unlisted
    plain = compute_advantages(inputs_of(rb), cfg_for("grpo"))
    out = compute_advantages(dataclasses.replace(inputs_of(rb), turn_valid=valid),
                             cfg_for("grpo", invalid_action_advantage=cap))
    m = rb.response_mask.bool()
    invalid = torch.zeros_like(m)
    for b, v in enumerate(valid):
        for t, ok in enumerate(v):
            invalid[b] |= (turns[b] == t) & (not ok)
    invalid &= m
    assert invalid.any() and (m & ~invalid).any()
    assert (plain.advantages[invalid] > cap).any()  # the cap has something to do
    expected = torch.where(invalid, plain.advantages.clamp(max=cap), plain.advantages)
    torch.testing.assert_close(out.advantages, expected, rtol=0, atol=0)
    share = float(invalid.sum()) / float(m.sum())
    assert out.metrics["reward/invalid_token_share"] == pytest.approx(share)
    capped = invalid & (plain.advantages > cap)
    assert out.metrics["reward/invalid_capped_token_share"] == pytest.approx(float(capped.sum()) / float(m.sum()))
    with pytest.raises(ValueError, match="turn_valid"):
        compute_advantages(inputs_of(rb), cfg_for("grpo", invalid_action_advantage=0.0))


def test_invalid_action_advantage_from_step_mode_batch():
    """Step mode through trajectories_to_batch: each sample is one turn of its episode (token
    turn ids are the episode's turn index); the env's per-turn validity reaches the cap."""
    from roll.data.trajectory import Trajectory, trajectories_to_batch

    def step(ep, turn, valid_list, ret):
        return Trajectory(
            input_ids=[5, 6, 7, 8], loss_mask=[0, 1, 1, 0], logprobs=[0.0] * 4,
            token_turns=[-1, turn, turn, -1], token_versions=[-1, 0, 0, -1], turn_versions=[0],
            turn_rewards=[0.0] * len(valid_list), final_reward=ret, episode_return=ret, group_id="g",
            episode_id=ep, state_key=f"s{turn}", step_index=turn, num_turns=len(valid_list),
            turn_actions=[{"actions": [], "valid": v, "error": ""} for v in valid_list])

    # the winning episode's second turn was invalid; the losing one's turns were all valid
    trajs = [step("win", 0, [True, False, True], 1.0), step("win", 1, [True, False, True], 1.0),
             step("win", 2, [True, False, True], 1.0), step("lose", 0, [True, True], 0.0),
             step("lose", 1, [True, True], 0.0)]
    batch = trajectories_to_batch(trajs, pad_token_id=0)
    assert batch.non_tensors["turn_valid"][1] == [True, False, True]
    inputs = AdvantageInputs.from_batch(batch)
    plain = compute_advantages(inputs, cfg_for("gigpo"))
    out = compute_advantages(inputs, cfg_for("gigpo", invalid_action_advantage=0.0))
    m = batch.tensors["response_mask"].bool()
    assert (plain.advantages[0][m[0]] > 0).all() and (plain.advantages[1][m[1]] > 0).all()
    assert (out.advantages[1] == 0).all()  # the invalid turn of a winning episode is not pushed up
    for row in (0, 2, 3, 4):
        torch.testing.assert_close(out.advantages[row], plain.advantages[row], rtol=0, atol=0)
    # the pipelines' path (roll/pipelines/policy.py) reads the same field from the batch
    from roll.algorithms.kl import build_kl_controller
    from roll.pipelines.policy import batch_advantages
    cfg = cfg_for("gigpo", invalid_action_advantage=0.0)
    metrics = batch_advantages(batch, cfg, build_kl_controller(cfg))
    torch.testing.assert_close(batch["advantages"], out.advantages.to(batch["advantages"].dtype), rtol=0, atol=1e-6)
    assert metrics["reward/invalid_token_share"] == pytest.approx(2 / 10)


# ---- hand-worked multi-turn GAE ------------------------------------------------------------
def test_gae_hand_worked_multi_turn():
    # positions: 0 1 = prompt, 2 3 = turn 0, 4 5 = observation, 6 7 = turn 1, 8 = padding
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1, 0]], dtype=torch.float64)
    rewards = torch.tensor([[0, 0, 0, 0.5, 0, 0, 0, 1.0, 0]], dtype=torch.float64)
    # raw critic output at position t is V(x_<=t); the state before token t is valued at t-1:
    # V(before 2) = 0.2 at position 1, V(before 3) = 0.4 at 2, V(before 6) = 0.6 at 5, V(before 7) = 0.8 at 6
    critic = torch.tensor([[9, 0.2, 0.4, 9, 9, 0.6, 0.8, 9, 9]], dtype=torch.float64)  # 9: never read
    cfg = cfg_for("gae", gamma=0.9, lambd=0.8, token_gamma=1.0, token_lambd=0.5)
    out = compute_advantages(AdvantageInputs(rewards, mask, [0], values=critic), cfg)
    # t=7 last token, terminal:        delta = 1.0 - 0.8 = 0.2;                    A7 = 0.2
    # t=6 same turn (g=1, l=0.5):      delta = 0 + 0.8 - 0.6 = 0.2;                A6 = 0.2 + 0.5*0.2 = 0.3
    # t=3 turn boundary (g=.9, l=.8):  delta = 0.5 + 0.9*0.6 - 0.4 = 0.64;         A3 = 0.64 + 0.9*0.8*0.3 = 0.856
    # t=2 same turn:                   delta = 0 + 0.4 - 0.2 = 0.2;                A2 = 0.2 + 0.5*0.856 = 0.628
    expected_adv = torch.tensor([[0, 0, 0.628, 0.856, 0, 0, 0.3, 0.2, 0]], dtype=torch.float64)
    expected_ret = torch.tensor([[0, 0, 0.828, 1.256, 0, 0, 0.9, 1.0, 0]], dtype=torch.float64)
    torch.testing.assert_close(out.advantages, expected_adv, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.returns, expected_ret, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_gae_step_mode_chains_episode_steps(seed):
    """Step-mode GAE (one row per turn) equals trajectory-mode GAE on the row that concatenates
    an episode's step rows: step k's last model token bootstraps from step k + 1's first."""
    inputs, rows = step_mode_batch(seed)
    g = torch.Generator().manual_seed(seed)
    critic = torch.rand(inputs.token_rewards.shape, generator=g, dtype=torch.float64)
    inputs = dataclasses.replace(inputs, values=critic)
    cfg = cfg_for("gae", gamma=0.9, lambd=0.8, token_gamma=1.0, token_lambd=0.7)
    out = compute_advantages(inputs, cfg)
    assert out.metrics["reward/gae_chained_steps"] == sum(1 for r in rows if any(o[1] == r[1] and o[2] == r[2] + 1 for o in rows))
    T = inputs.token_rewards.shape[1]
    for ep in sorted({r[1] for r in rows}):
        idx = sorted((i for i, r in enumerate(rows) if r[1] == ep), key=lambda i: rows[i][2])
        cat = lambda x: torch.cat([x[i] for i in idx])[None]
        turn = torch.cat([torch.where(inputs.response_mask[i].bool(), k, -1) for k, i in enumerate(idx)])[None]
        traj = AdvantageInputs(cat(inputs.token_rewards), cat(inputs.response_mask), [0], values=cat(critic), turn_ids=turn)
        ref = compute_advantages(traj, cfg)
        for k, i in enumerate(idx):
            torch.testing.assert_close(out.advantages[i], ref.advantages[0, k * T:(k + 1) * T], rtol=0, atol=1e-12)
            torch.testing.assert_close(out.returns[i], ref.returns[0, k * T:(k + 1) * T], rtol=0, atol=1e-12)
    # the first step of a multi-step episode sees the outcome of later steps: unchained it would not
    unchained = compute_advantages(dataclasses.replace(inputs, episode_ids=None, step_ids=None), cfg)
    multi = [i for i, r in enumerate(rows) if r[2] == 0 and any(o[1] == r[1] and o[2] == 1 for o in rows)]
    if multi:
        assert not torch.allclose(out.advantages[multi], unchained.advantages[multi])


def test_reinforce_equals_grpo_for_outcome_rewards():
    """gamma = 1 and an outcome reward only (on the last model token): the reward-to-go is the
    score at every token, so reinforce reduces to grpo."""
    rb = random_batch(11, max_turns=3)
    for i, turns in enumerate(rb.turns):
        if turns:
            total = rb.token_rewards[i].sum()
            rb.token_rewards[i] = 0
            rb.token_rewards[i, turns[-1][-1]] = total
    a = compute_advantages(inputs_of(rb), cfg_for("reinforce")).advantages
    b = compute_advantages(inputs_of(rb), cfg_for("grpo")).advantages
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# ---- edge cases, every registered estimator ------------------------------------------------
def _edge_inputs(kind: str) -> AdvantageInputs:
    B, T = 6, 7
    mask = torch.zeros(B, T)
    mask[:, 2:6] = 1
    rewards = torch.zeros(B, T)
    rewards[:, 5] = torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 0.0])
    groups = [0, 0, 1, 1, 2, 3]  # groups 2 and 3 have one member
    if kind == "all_equal":
        rewards[:, 5] = 0.7
    if kind == "all_masked_rows":
        mask[1] = 0
        mask[4] = 0
        rewards[1, 5] = 0.0  # no model token: outcome moved onto the prompt
        rewards[1, 0] = 0.3
        rewards[4, 5] = 0.0
    if kind == "zero_length":
        mask[:] = 0
        rewards[:, 5] = 0.0
        rewards[:, 0] = torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 0.0])
    return AdvantageInputs(
        token_rewards=rewards, response_mask=mask, group_ids=groups, values=torch.randn(B, T) * mask,
        tags=["a", "b", "a", "b", "a", "a"], state_keys=["s0", "s0", "s1", "s1", "s2", "s0"],
        episode_ids=[f"e{i}" for i in range(B)], step_ids=[0] * B,
    )


@pytest.mark.parametrize("kind", ["random", "all_equal", "all_masked_rows", "zero_length", "single_group_of_one"])
@pytest.mark.parametrize("estimator", ADVANTAGES.ids())
def test_every_estimator_edge_cases(estimator, kind):
    if kind == "single_group_of_one":
        inp = _edge_inputs("random")
        inp = AdvantageInputs(inp.token_rewards[:1], inp.response_mask[:1], [0], values=inp.values[:1],
                              tags=["a"], state_keys=["s"], episode_ids=["e"], step_ids=[0])
    else:
        inp = _edge_inputs(kind if kind != "random" else "random")
    for whiten in (False, True):
        cfg = cfg_for(estimator, whiten_advantages=whiten)
        out = compute_advantages(inp, cfg)
        assert torch.isfinite(out.advantages).all() and torch.isfinite(out.returns).all()
        assert (out.advantages[inp.response_mask == 0] == 0).all(), "advantage leaked outside the response mask"
        assert all(isinstance(v, float) and math.isfinite(v) for v in out.metrics.values())
    if kind == "all_equal" and estimator in ("grpo", "rloo", "reinforce", "reinforce_pp", "gigpo"):
        # identical outcomes carry no comparative signal: zero advantage, not 0/0
        assert out.advantages.abs().max() < 1e-6
    if kind == "single_group_of_one" and estimator in ("grpo", "rloo", "reinforce"):
        assert out.advantages.abs().max() == 0


def test_group_of_one_gets_zero_in_grpo_and_rloo():
    inp = _edge_inputs("random")
    for est in ("grpo", "rloo"):
        adv = compute_advantages(inp, cfg_for(est)).advantages
        assert (adv[4] == 0).all() and (adv[5] == 0).all()  # groups 2 and 3 have one sample each
        assert adv[0].abs().sum() > 0


# ---- bad input is a clear error ------------------------------------------------------------
def test_input_validation():
    inp = _edge_inputs("random")
    bad = dataclasses.replace(inp, token_rewards=inp.token_rewards.clone())
    bad.token_rewards[0, 6] = 1.0  # outside the mask of a row that has model tokens
    with pytest.raises(ValueError, match="outside response_mask"):
        compute_advantages(bad, cfg_for("grpo"))
    with pytest.raises(ValueError, match="group_ids"):
        compute_advantages(dataclasses.replace(inp, group_ids=[0, 1]), cfg_for("grpo"))
    with pytest.raises(ValueError, match="critic"):
        compute_advantages(dataclasses.replace(inp, values=None), cfg_for("gae"))
    with pytest.raises(ValueError, match="did you mean 'step_weight'"):
        compute_advantages(inp, cfg_for("gigpo", adv_estimator_args={"step_weigth": 1.0}))
    with pytest.raises(ValueError, match="step-mode"):
        compute_advantages(dataclasses.replace(inp, state_keys=None), cfg_for("gigpo"))
    with pytest.raises(ValueError, match="tags"):
        compute_advantages(dataclasses.replace(inp, tags=None), cfg_for("grpo", reward_norm={"group_by": "tag", "method": "mean"}))
    nan = dataclasses.replace(inp, token_rewards=inp.token_rewards.clone())
    nan.token_rewards[0, 5] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        compute_advantages(nan, cfg_for("grpo"))
    with pytest.raises(KeyError, match="did you mean"):
        compute_advantages(inp, cfg_for("grp0"))


def test_float32_inputs_agree_with_float64_reference():
    rb = random_batch(5)
    inp = inputs_of(rb)
    inp32 = AdvantageInputs(inp.token_rewards.float(), inp.response_mask.float(), inp.group_ids, values=inp.values.float(),
                            turn_ids=inp.turn_ids, tags=inp.tags)
    out = compute_advantages(inp32, cfg_for("gae", gamma=0.9, lambd=0.9))
    ref, _ = ref_gae(rb.token_rewards, rb.response_mask, rb.values, rb.turn_ids, 0.9, 0.9, 1.0, 1.0)
    assert out.advantages.dtype == torch.float32
    torch.testing.assert_close(out.advantages.double(), ref, rtol=0, atol=1e-5)
