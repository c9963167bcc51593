"""Policy/value losses, KL estimators and aggregation against float64 loop references;
gradient checks for clipping; the loss_fn contract with the training strategy."""
from __future__ import annotations

import math

import pytest
import torch

from algo_reference import random_batch, ref_aggregate, ref_kl, ref_policy_loss, ref_value_loss
from roll.algorithms.aggregation import AGG_MODES, aggregate_loss, loss_normalizers
from roll.algorithms.kl import AdaptiveKLController, FixedKLController, build_kl_controller, compute_kl, entropy_from_logits
from roll.algorithms.losses import make_actor_loss_fn, make_critic_loss_fn, set_loss_normalizers, tis_weights, value_loss
from roll.config.algorithm import AlgorithmConfig
from roll.data.batch import Batch
from roll.registry import POLICY_LOSSES

SEEDS = [0, 1, 2, 3]


def random_policy_inputs(seed: int, spread: float = 0.5):
    rb = random_batch(seed, group_sizes=(3, 2, 4, 1), zero_length_rows=1)
    g = torch.Generator().manual_seed(seed)
    B, T = rb.response_mask.shape
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    lp = old + torch.randn(B, T, generator=g, dtype=torch.float64) * spread  # ratios both inside and outside the clip
    adv = torch.randn(B, T, generator=g, dtype=torch.float64) * rb.response_mask
    return lp, old, adv, rb.response_mask


# ---- policy losses vs reference ------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", POLICY_LOSSES.ids())
@pytest.mark.parametrize("low,high,dual", [(0.2, 0.2, None), (0.2, 0.28, None), (0.2, 0.28, 3.0), (3e-4, 4e-4, None)])
def test_policy_losses_match_reference(seed, name, low, high, dual):
    lp, old, adv, mask = random_policy_inputs(seed, spread=0.5 if low > 0.01 else 1e-3)
    cfg = AlgorithmConfig(policy_loss=name, clip_ratio_low=low, clip_ratio_high=high, dual_clip=dual)
    out = POLICY_LOSSES.get(name)(lp, old, adv, mask, cfg)
    ref = ref_policy_loss(name, lp, old, adv, mask, low, high, dual)
    m = mask.bool()
    torch.testing.assert_close(out.loss_mat[m], ref[m], rtol=1e-12, atol=1e-12)
    for mode in AGG_MODES:
        got = aggregate_loss(out.loss_mat, mask, mode, norm_constant=17.0)
        assert math.isclose(float(got), ref_aggregate(ref, mask, mode, C=17.0), rel_tol=1e-11, abs_tol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("clip", [None, 0.2])
def test_value_loss_matches_reference(seed, clip):
    _, _, _, mask = random_policy_inputs(seed)
    g = torch.Generator().manual_seed(100 + seed)
    v, old, ret = (torch.randn(mask.shape, generator=g, dtype=torch.float64) for _ in range(3))
    out = value_loss(v, old, ret, mask, clip)
    for i, t in mask.nonzero().tolist():
        assert math.isclose(float(out.loss_mat[i, t]), ref_value_loss(float(v[i, t]), float(old[i, t]), float(ret[i, t]), clip), rel_tol=1e-12, abs_tol=1e-14)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimators_match_reference(estimator):
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(5, 9, generator=g, dtype=torch.float64) * 4
    ref = -torch.rand(5, 9, generator=g, dtype=torch.float64) * 4
    kl = compute_kl(lp, ref, estimator)
    for i in range(5):
        for t in range(9):
            assert math.isclose(float(kl[i, t]), ref_kl(float(lp[i, t]), float(ref[i, t]), estimator), rel_tol=1e-12, abs_tol=1e-14)
    if estimator != "k1":
        assert (kl >= 0).all()
    assert (compute_kl(lp, lp, estimator) == 0).all()
    extreme = compute_kl(torch.tensor([0.0]), torch.tensor([-1e4]), estimator)
    assert torch.isfinite(extreme).all()


def test_k3_is_an_unbiased_kl_estimate():
    """E_{x~p}[k3] = KL(p || q) for two explicit categoricals."""
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    exact = float((p * (p / q).log()).sum())
    for est in ("k1", "k3"):
        expect = float((p * compute_kl(p.log(), q.log(), est)).sum())
        assert math.isclose(expect, exact, rel_tol=1e-12)


def test_entropy_from_logits():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [10.0, -10.0, -10.0, -10.0]], dtype=torch.float64)
    h = entropy_from_logits(logits)
    assert math.isclose(float(h[0]), math.log(4), rel_tol=1e-12)
    assert float(h[1]) < 1e-6


def test_kl_controllers():
    fixed = FixedKLController(0.1)
    fixed.update(5.0, 100)
    assert fixed.value == 0.1
    ada = AdaptiveKLController(0.1, target=1.0, horizon=100)
    ada.update(10.0, 10)  # error clipped at +0.2
    assert math.isclose(ada.value, 0.1 * (1 + 0.2 * 10 / 100))
    ada.update(0.9, 10)  # error -0.1
    assert math.isclose(ada.value, 0.1 * 1.02 * (1 - 0.1 * 10 / 100))
    assert isinstance(build_kl_controller(AlgorithmConfig(init_kl_coef=0.3)), FixedKLController)
    assert isinstance(build_kl_controller(AlgorithmConfig(init_kl_coef=0.3, kl_target=6.0)), AdaptiveKLController)
    with pytest.raises(ValueError):
        ada.update(float("nan"), 1)


# ---- gradient checks -----------------------------------------------------------------------
def test_ppo_clip_zero_gradient_where_clipped():
    old = torch.zeros(1, 6, dtype=torch.float64)
    ratios = torch.tensor([[1.5, 1.5, 0.5, 0.5, 1.1, 0.9]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    lp = ratios.log().requires_grad_(True)
    mask = torch.ones(1, 6, dtype=torch.float64)
    cfg = AlgorithmConfig(clip_ratio_low=0.2, clip_ratio_high=0.28)
    out = POLICY_LOSSES.get("ppo_clip")(lp, old, adv, mask, cfg)
    out.loss_mat.sum().backward()
    grad = lp.grad[0]
    # clipped: (r=1.5, A>0) above 1+0.28; (r=0.5, A<0) below 1-0.2 -> the loss is constant there
    assert grad[0] == 0 and grad[3] == 0
    # unclipped: d(-A r)/d logp = -A r
    for t in (1, 2, 4, 5):
        assert math.isclose(float(grad[t]), float(-adv[0, t] * ratios[0, t]), rel_tol=1e-12)
    assert math.isclose(out.metrics["actor/pg_clipfrac"], 2 / 6)


def test_dual_clip_bound_and_gradient():
    c = 3.0
    ratios = torch.tensor([[5.0, 10.0, 2.0, 5.0, 0.5]], dtype=torch.float64)
    adv = torch.tensor([[-1.0, -2.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    lp = ratios.log().requires_grad_(True)
    mask = torch.ones_like(ratios)
    cfg = AlgorithmConfig(dual_clip=c)
    out = POLICY_LOSSES.get("ppo_clip")(lp, torch.zeros_like(ratios), adv, mask, cfg)
    neg = adv < 0
    assert (out.loss_mat[neg] <= (-c * adv)[neg] + 1e-12).all(), "dual clip bound -c*A violated"
    assert math.isclose(float(out.loss_mat[0, 0].detach()), 3.0) and math.isclose(float(out.loss_mat[0, 1].detach()), 6.0)
    out.loss_mat.sum().backward()
    g = lp.grad[0]
    assert g[0] == 0 and g[1] == 0  # beyond the dual bound: constant loss
    assert math.isclose(float(g[2]), 2.0)  # r=2 < c: ordinary -A r branch, gradient -A r = 2
    assert g[3] == 0  # A > 0 clipped above: dual clip does not apply
    assert g[4] == 0  # A < 0, r below 1 - low: ordinary clip
    # the registered dual_clip loss turns it on with the default c = 3 when cfg.dual_clip is null
    out2 = POLICY_LOSSES.get("dual_clip")(ratios.log(), torch.zeros_like(ratios), adv, mask, AlgorithmConfig())
    torch.testing.assert_close(out2.loss_mat, out.loss_mat.detach())
    with pytest.raises(ValueError, match="> 1"):
        POLICY_LOSSES.get("ppo_clip")(lp, torch.zeros_like(ratios), adv, mask, AlgorithmConfig(dual_clip=0.5))


def test_gspo_token_form_has_the_sequence_objective_gradient():
    """With seq-mean-token-mean, the token-form GSPO loss has the same gradient as the
    sequence-level objective -A_i s_i (unclipped region)."""
    lp0, old, _, mask = random_policy_inputs(2, spread=1e-3)
    adv_seq = torch.randn(mask.shape[0], dtype=torch.float64)
    adv = adv_seq[:, None] * mask
    cfg = AlgorithmConfig(policy_loss="gspo", clip_ratio_low=0.5, clip_ratio_high=0.5)
    lp = lp0.clone().requires_grad_(True)
    out = POLICY_LOSSES.get("gspo")(lp, old, adv, mask, cfg)
    aggregate_loss(out.loss_mat, mask, "seq-mean-token-mean").backward()
    lp2 = lp0.clone().requires_grad_(True)
    n = mask.sum(-1)
    s = torch.exp(((lp2 - old) * mask).sum(-1) / n.clamp(min=1))
    has = n > 0
    (-(adv_seq * s)[has].sum() / has.sum()).backward()
    torch.testing.assert_close(lp.grad * mask, lp2.grad * mask, rtol=1e-10, atol=1e-12)


def test_tis_weights_are_capped_and_detached():
    old = torch.tensor([[0.0, 0.0, -1.0]], dtype=torch.float64, requires_grad=True)
    infer = torch.tensor([[-3.0, 0.5, -1.0]], dtype=torch.float64)
    w = tis_weights(old, infer, cap=2.0)
    assert not w.requires_grad
    torch.testing.assert_close(w, torch.tensor([[2.0, math.exp(-0.5), 1.0]], dtype=torch.float64))


# ---- aggregation edge cases ----------------------------------------------------------------
@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregation_empty_mask_is_zero_not_nan(mode):
    loss = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(3, 4, dtype=torch.float64)
    out = aggregate_loss(loss, mask, mode, norm_constant=4.0)
    assert float(out.detach()) == 0.0
    out.backward()
    assert (loss.grad == 0).all()


def test_aggregation_errors():
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        aggregate_loss(torch.zeros(1, 1), torch.ones(1, 1), "token-sum")
    with pytest.raises(ValueError, match="loss_agg_norm_constant"):
        aggregate_loss(torch.zeros(1, 1), torch.ones(1, 1), "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="loss_agg_norm_constant"):
        make_actor_loss_fn(AlgorithmConfig(loss_agg_mode="seq-mean-token-sum-norm"))
    assert loss_normalizers(torch.tensor([[0, 1, 1], [0, 0, 0]])) == {"num_tokens": 2, "num_seqs": 1}


# ---- the loss_fn contract ------------------------------------------------------------------
def _micro_batch(seed: int, with_ref: bool = True):
    lp, old, adv, mask = random_policy_inputs(seed)
    B, T = mask.shape
    tensors = {
        "input_ids": torch.randint(0, 10, (B, T)), "attention_mask": torch.ones(B, T, dtype=torch.long),
        "response_mask": mask, "advantages": adv, "old_logprobs": old,
        "infer_logprobs": old + 0.05 * torch.randn(B, T, dtype=torch.float64),
        "returns": torch.randn(B, T, dtype=torch.float64), "values": torch.randn(B, T, dtype=torch.float64),
    }
    if with_ref:
        tensors["ref_logprobs"] = old - 0.1
    return Batch(tensors), lp


def test_actor_loss_fn_combines_terms_like_the_reference():
    mb, lp = _micro_batch(3)
    set_loss_normalizers([mb])
    ent = torch.rand_like(lp)
    cfg = AlgorithmConfig(policy_loss="ppo_clip", loss_agg_mode="seq-mean-token-mean", use_kl_loss=True, kl_loss_coef=0.1,
                          kl_estimator="k3", entropy_coef=0.01, tis_cap=2.0, clip_ratio_high=0.28)
    fn = make_actor_loss_fn(cfg)
    assert fn.needs_entropy
    loss, metrics = fn(mb, lp, {"entropy": ent})
    mask = mb["response_mask"]
    pg = ref_policy_loss("ppo_clip", lp, mb["old_logprobs"], mb["advantages"], mask, 0.2, 0.28, None)
    w = torch.exp(mb["old_logprobs"] - mb["infer_logprobs"]).clamp(max=2.0)
    kl = torch.tensor([[ref_kl(float(a), float(b), "k3") for a, b in zip(r1, r2)] for r1, r2 in zip(lp, mb["ref_logprobs"])], dtype=torch.float64)
    expect = (ref_aggregate(pg * w, mask, cfg.loss_agg_mode) + 0.1 * ref_aggregate(kl, mask, cfg.loss_agg_mode)
              - 0.01 * ref_aggregate(ent, mask, cfg.loss_agg_mode))
    assert math.isclose(float(loss), expect, rel_tol=1e-11)
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/kl_loss", "actor/entropy", "actor/tis_weight_mean"} <= set(metrics)


def test_loss_fn_errors_are_explicit():
    mb, lp = _micro_batch(0, with_ref=False)
    with pytest.raises(KeyError, match="global_num_tokens"):
        make_actor_loss_fn(AlgorithmConfig())(mb, lp, {})
    set_loss_normalizers([mb])
    with pytest.raises(KeyError, match="ref_logprobs"):
        make_actor_loss_fn(AlgorithmConfig(use_kl_loss=True, kl_loss_coef=0.1))(mb, lp, {})
    with pytest.raises(KeyError, match="entropy"):
        make_actor_loss_fn(AlgorithmConfig(entropy_coef=0.01))(mb, lp, {})
    with pytest.raises(KeyError, match="values"):
        make_critic_loss_fn(AlgorithmConfig())(mb, None, {})
    with pytest.raises(ValueError, match="policy_loss_args"):
        make_actor_loss_fn(AlgorithmConfig(policy_loss_args={"x": 1}))


def test_policy_loss_args_reach_a_registered_loss_and_unknown_keys_are_config_errors():
    from roll.algorithms.losses import ppo_clip
    from roll.config.validate import ConfigError

    def scaled_ppo(logprobs, old_logprobs, advantages, mask, cfg, *, scale=1.0, **inputs):
        out = ppo_clip(logprobs, old_logprobs, advantages, mask, cfg, **inputs)
        return type(out)(out.loss_mat * scale, out.metrics)

    POLICY_LOSSES.register("test_scaled_ppo", scaled_ppo)
    try:
        mb, lp = _micro_batch(4)
        set_loss_normalizers([mb])
        base, _ = make_actor_loss_fn(AlgorithmConfig(policy_loss="test_scaled_ppo"))(mb, lp, {})
        tripled, _ = make_actor_loss_fn(AlgorithmConfig(policy_loss="test_scaled_ppo", policy_loss_args={"scale": 3.0}))(mb, lp, {})
        assert torch.allclose(tripled, 3 * base)
        with pytest.raises(ConfigError, match=r"\['scal'\].*'ppo_clip'.*takes none"):
            make_actor_loss_fn(AlgorithmConfig(policy_loss="ppo_clip", policy_loss_args={"scal": 3.0}))
    finally:
        POLICY_LOSSES._entries.pop("test_scaled_ppo", None)


def test_critic_loss_fn_accepts_values_in_extra():
    mb, _ = _micro_batch(1)
    set_loss_normalizers([mb])
    pred = torch.randn_like(mb["values"])
    fn = make_critic_loss_fn(AlgorithmConfig(value_clip=0.2, value_loss_coef=0.5))
    a, _ = fn(mb, None, {"values": pred})
    b, metrics = fn(mb, pred, {})
    assert float(a) == float(b)
    mask = mb["response_mask"]
    # raw critic outputs V(x_<=t): the prediction for the state before token t sits at t-1
    shift = lambda x: torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
    ref = torch.tensor([[ref_value_loss(float(v), float(o), float(r), 0.2) for v, o, r in zip(*rows)]
                        for rows in zip(shift(pred), shift(mb["values"]), mb["returns"])], dtype=torch.float64)
    assert math.isclose(float(a), 0.5 * ref_aggregate(ref, mask, "token-mean"), rel_tol=1e-11)
    assert "critic/vf_clipfrac" in metrics


@pytest.mark.parametrize("name", POLICY_LOSSES.ids())
@pytest.mark.parametrize("mode", AGG_MODES)
def test_every_loss_survives_degenerate_batches(name, mode):
    """All-masked rows, zero advantages, identical logprobs: finite loss and gradients."""
    B, T = 4, 5
    mask = torch.zeros(B, T, dtype=torch.float64)
    mask[0, 1:3] = 1  # one row with tokens, three rows without
    lp = torch.zeros(B, T, dtype=torch.float64, requires_grad=True)
    mb = Batch({"response_mask": mask, "advantages": torch.zeros(B, T, dtype=torch.float64),
                "old_logprobs": torch.zeros(B, T, dtype=torch.float64)})
    set_loss_normalizers([mb])
    cfg = AlgorithmConfig(policy_loss=name, loss_agg_mode=mode, loss_agg_norm_constant=8.0)
    loss, metrics = make_actor_loss_fn(cfg)(mb, lp, {})
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(math.isfinite(v) for v in metrics.values())
