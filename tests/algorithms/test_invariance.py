"""Gradient-accumulation / data-parallel invariance of the loss functions, in pure torch.

A small causal LM in float64 takes one SGD step on a mini-batch of 8 ragged sequences, split as
1 micro-batch x 8 accumulation steps, 8 x 1, and over 2 and 4 emulated data-parallel ranks
(gradients summed over micro-batches, loss scaled by dp_size before backward, then averaged
over ranks: exactly what roll.strategies.torch_train does). Every split must give the same
parameters. SGD (not Adam) so that any error in the loss scale shows in the update. Float64
makes the only differences summation order (~1e-16), so the tolerance is 1e-10, far tighter
than the 1e-6 the issue asks for.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from algo_reference import random_batch
from roll.algorithms.advantages import AdvantageInputs, compute_advantages
from roll.algorithms.aggregation import AGG_MODES, loss_normalizers
from roll.algorithms.kl import entropy_from_logits
from roll.algorithms.losses import make_actor_loss_fn, make_critic_loss_fn
from roll.config.algorithm import AlgorithmConfig
from roll.data.batch import Batch
from roll.registry import POLICY_LOSSES

VOCAB = 13
SPLITS = [(1, 1), (2, 4), (2, 1), (4, 1)]  # (dp_size, micro-batch size); mini-batch 8


class TinyCausalLM(nn.Module):
    """Embedding -> tanh -> running mean over the prefix (causal) -> LM head and value head."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.mix = nn.Linear(d, d)
        self.head = nn.Linear(d, VOCAB)
        self.value = nn.Linear(d, 1)

    def forward(self, ids: torch.Tensor):
        h = torch.tanh(self.mix(self.emb(ids)))
        steps = torch.arange(1, ids.shape[1] + 1, dtype=h.dtype)[None, :, None]
        h = h.cumsum(1) / steps
        return self.head(h), self.value(h).squeeze(-1)


def forward_aligned(model: TinyCausalLM, ids: torch.Tensor):
    """logprobs and entropy [B, T] aligned to ids (position t: prediction of token t), and the
    raw critic output per position (V of the prefix ending at t), as torch_train returns them."""
    logits, values = model(ids)
    B, T = ids.shape
    lp = torch.zeros(B, T, dtype=logits.dtype)
    lp[:, 1:] = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    ent = torch.zeros(B, T, dtype=logits.dtype)
    ent[:, 1:] = entropy_from_logits(logits[:, :-1])
    return lp, ent, values


def make_batch(model: TinyCausalLM, seed: int) -> Batch:
    rb = random_batch(seed, group_sizes=(3, 2, 2, 1), zero_length_rows=1)  # 8 rows, one fully masked
    B, T = rb.response_mask.shape
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (B, T), generator=g)
    with torch.no_grad():
        lp, _, v = forward_aligned(model, ids)
    mask = rb.response_mask
    # old/infer logprobs off the current policy, so ratios land inside and outside the clip range
    old = (lp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)) * mask
    adv = compute_advantages(AdvantageInputs(rb.token_rewards, mask, rb.group_ids, values=v, turn_ids=rb.turn_ids),
                             AlgorithmConfig(adv_estimator="gae", gamma=0.9, lambd=0.95))
    return Batch({
        "input_ids": ids, "attention_mask": torch.ones(B, T, dtype=torch.long), "response_mask": mask,
        "advantages": adv.advantages, "returns": adv.returns, "values": v,
        "old_logprobs": old, "ref_logprobs": old - 0.2 * mask,
        "infer_logprobs": old + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64) * mask,
    })


def sgd_step(model: TinyCausalLM, batch: Batch, loss_fn, dp_size: int, micro: int, lr: float = 0.5,
             critic: bool = False, seqs: str = "with_tokens", per_micro_normaliser: bool = False) -> TinyCausalLM:
    """One optimizer step as the training strategy does it; returns the updated copy. The
    baseline of every test is (dp 1, micro-batch 8): one micro-batch holding the whole
    mini-batch; (dp 1, micro-batch 1) is the 1 x 8 accumulation split."""
    model = copy.deepcopy(model)
    counts = loss_normalizers(batch["response_mask"])
    n_seq = counts["num_seqs"] if seqs == "with_tokens" else len(batch)  # torch_train counts all rows
    rank_grads = []
    for shard in batch.chunk(dp_size):
        model.zero_grad(set_to_none=True)
        for mb in shard.split(micro):
            if per_micro_normaliser:  # the classic bug: normalise by the micro-batch's own counts
                c = loss_normalizers(mb["response_mask"])
                mb.meta.update(global_num_tokens=c["num_tokens"], global_num_seqs=c["num_seqs"], dp_size=dp_size)
            else:
                mb.meta.update(global_num_tokens=counts["num_tokens"], global_num_seqs=n_seq, dp_size=dp_size)
            lp, ent, v = forward_aligned(model, mb["input_ids"])
            if critic:
                loss, _ = loss_fn(mb, None, {"values": v})
            else:
                loss, _ = loss_fn(mb, lp, {"entropy": ent})
            (loss * dp_size).backward()
        rank_grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()])
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p -= lr * torch.stack([g[i] for g in rank_grads]).mean(0)  # all-reduce mean
    return model


@torch.no_grad()
def max_param_diff(a: nn.Module, b: nn.Module) -> float:
    return max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))


def _model() -> TinyCausalLM:
    torch.manual_seed(0)
    return TinyCausalLM().double()


# every registered policy loss alone, plus combinations with the extra terms
ACTOR_CFGS = {name: dict(policy_loss=name) for name in POLICY_LOSSES.ids()}
ACTOR_CFGS.update({
    "ppo_clip+kl+entropy+tis": dict(policy_loss="ppo_clip", clip_ratio_high=0.28, use_kl_loss=True, kl_loss_coef=0.1,
                                    entropy_coef=0.01, tis_cap=2.0),
    "gspo-paper-clip": dict(policy_loss="gspo", clip_ratio_low=3e-4, clip_ratio_high=4e-4),
    "pg+k1": dict(policy_loss="pg", use_kl_loss=True, kl_loss_coef=0.05, kl_estimator="k1"),
})


# "all_rows": global_num_seqs counts every row (as torch_train does) instead of rows with loss
# tokens; any consistent count keeps the invariance.
@pytest.mark.parametrize("actor,seqs", [(a, "with_tokens") for a in sorted(ACTOR_CFGS)] + [("ppo_clip+kl+entropy+tis", "all_rows")])
@pytest.mark.parametrize("mode", AGG_MODES)
def test_actor_step_invariant_to_micro_batching_and_dp(mode, actor, seqs):
    model = _model()
    batch = make_batch(model, seed=1)
    cfg = AlgorithmConfig(loss_agg_mode=mode, loss_agg_norm_constant=16.0, **ACTOR_CFGS[actor])
    loss_fn = make_actor_loss_fn(cfg)
    base = sgd_step(model, batch, loss_fn, dp_size=1, micro=8, seqs=seqs)
    assert max_param_diff(base, model) > 1e-4, "the step must actually move the parameters"
    for dp, micro in SPLITS:
        other = sgd_step(model, batch, loss_fn, dp_size=dp, micro=micro, seqs=seqs)
        assert max_param_diff(base, other) < 1e-10, f"dp={dp} micro={micro} differs"


@pytest.mark.parametrize("mode", AGG_MODES)
def test_critic_step_invariant_to_micro_batching_and_dp(mode):
    model = _model()
    batch = make_batch(model, seed=2)
    loss_fn = make_critic_loss_fn(AlgorithmConfig(loss_agg_mode=mode, loss_agg_norm_constant=16.0, value_clip=0.05))
    base = sgd_step(model, batch, loss_fn, dp_size=1, micro=8, critic=True)
    assert max_param_diff(base, model) > 1e-4
    for dp, micro in SPLITS:
        assert max_param_diff(base, sgd_step(model, batch, loss_fn, dp_size=dp, micro=micro, critic=True)) < 1e-10


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_per_micro_batch_normalisation_would_break_invariance(mode):
    """Negative control: the test above would catch a loss normalised per micro-batch."""
    model = _model()
    batch = make_batch(model, seed=1)
    loss_fn = make_actor_loss_fn(AlgorithmConfig(loss_agg_mode=mode))
    base = sgd_step(model, batch, loss_fn, dp_size=1, micro=8)
    wrong = sgd_step(model, batch, loss_fn, dp_size=1, micro=1, per_micro_normaliser=True)
    assert max_param_diff(base, wrong) > 1e-6
