"""Padding, unpadding and sequence packing, checked against plain loops and the tiny model."""
from __future__ import annotations

import random

import pytest
import torch

from roll.data.packing import (
    pack_sequences,
    packed_to_padded,
    pad_sequences,
    padded_to_packed,
    plan_packing,
    position_ids_from_mask,
    unpack_sequences,
    unpad_sequences,
)

SEQS = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]]


def test_right_padding():
    ids, mask = pad_sequences(SEQS, pad_value=0)
    assert ids.tolist() == [[5, 6, 7, 0, 0], [8, 0, 0, 0, 0], [9, 10, 11, 12, 13], [14, 15, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]


def test_left_padding_and_max_length():
    ids, mask = pad_sequences(SEQS, pad_value=-1, side="left", max_length=6)
    assert ids.tolist() == [[-1, -1, -1, 5, 6, 7], [-1, -1, -1, -1, -1, 8], [-1, 9, 10, 11, 12, 13], [-1, -1, -1, -1, 14, 15]]
    assert mask.sum(-1).tolist() == [3, 1, 5, 2]
    with pytest.raises(ValueError, match="max_length=4"):
        pad_sequences(SEQS, max_length=4)
    with pytest.raises(ValueError, match="side"):
        pad_sequences(SEQS, side="middle")


def test_float_values_and_empty_rows():
    vals, mask = pad_sequences([torch.tensor([0.5, -1.0]), torch.tensor([])], pad_value=0.0)
    assert vals.dtype == torch.float32
    assert vals.tolist() == [[0.5, -1.0], [0.0, 0.0]] and mask.tolist() == [[1, 1], [0, 0]]


@pytest.mark.parametrize("side", ["right", "left"])
def test_unpad_round_trip(side):
    ids, mask = pad_sequences(SEQS, side=side)
    assert [r.tolist() for r in unpad_sequences(ids, mask)] == SEQS
    feats = torch.randn(*ids.shape, 3)  # trailing dims travel along
    rows = unpad_sequences(feats, mask)
    assert [r.shape for r in rows] == [torch.Size([len(s), 3]) for s in SEQS]


@pytest.mark.parametrize("side", ["right", "left"])
def test_position_ids(side):
    _, mask = pad_sequences(SEQS, side=side)
    pos = position_ids_from_mask(mask)
    for row_pos, row_mask, seq in zip(pos, mask, SEQS):
        assert row_pos[row_mask.bool()].tolist() == list(range(len(seq)))
        assert (row_pos[~row_mask.bool()] == 0).all()


def test_pack_and_unpack():
    packed = pack_sequences(SEQS)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 0, 1, 2, 3, 4, 0, 1]]
    assert packed.cu_seqlens.dtype == torch.int32 and packed.cu_seqlens.tolist() == [0, 3, 4, 9, 11]
    assert packed.max_seqlen == 5 and packed.lengths == [3, 1, 5, 2] and len(packed) == 4
    assert [r.tolist() for r in unpack_sequences(packed.input_ids, packed.cu_seqlens)] == SEQS
    logits = torch.randn(1, 11, 7)
    parts = unpack_sequences(logits, packed.cu_seqlens)
    assert torch.equal(torch.cat(parts), logits[0])
    with pytest.raises(ValueError, match="empty"):
        pack_sequences([[1], []])
    with pytest.raises(ValueError, match="tokens"):
        unpack_sequences(torch.zeros(5), packed.cu_seqlens)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_packed_round_trip(side):
    rng = random.Random(0)
    seqs = [[rng.randrange(1, 100) for _ in range(rng.randint(1, 9))] for _ in range(7)]
    ids, mask = pad_sequences(seqs, side=side)
    packed = padded_to_packed(ids, mask)
    assert packed.input_ids[0].tolist() == [t for s in seqs for t in s]
    assert packed.lengths == [len(s) for s in seqs]
    assert torch.equal(packed.position_ids, pack_sequences(seqs).position_ids)
    back = packed_to_padded(packed.input_ids, packed, ids.shape, pad_value=0)
    assert torch.equal(back, ids)
    per_token = torch.randn(1, packed.input_ids.shape[1], 2)
    scattered = packed_to_padded(per_token, packed, ids.shape, pad_value=float("nan"))
    assert torch.equal(torch.cat(unpad_sequences(scattered, mask)), per_token[0])
    assert torch.isnan(scattered[~mask.bool()]).all()


def test_padded_to_packed_rejects_empty_rows():
    with pytest.raises(ValueError, match="no real tokens"):
        padded_to_packed(torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 0], [0, 0, 0]]))


def test_plan_packing_respects_budget_and_covers_everything():
    rng = random.Random(1)
    lengths = [rng.randint(1, 50) for _ in range(40)]
    plan = plan_packing(lengths, max_tokens=64)
    assert sorted(i for row in plan for i in row) == list(range(40))
    assert all(sum(lengths[i] for i in row) <= 64 for row in plan)
    # First-fit decreasing is within 11/9 OPT + 1 rows; the trivial lower bound is sum/budget.
    assert len(plan) <= 11 / 9 * (sum(lengths) / 64) + 2
    assert plan == plan_packing(lengths, max_tokens=64)
    assert plan_packing([3, 3, 3], 6) == [[0, 1], [2]]
    with pytest.raises(ValueError, match=r"\[1\]"):
        plan_packing([2, 10], 5)


def test_packed_forward_matches_separate_forwards():
    """The tiny model sees packed sequences exactly as it sees each one alone."""
    from roll.models.tiny import build_model

    model = build_model("tiny", seed=0, vocab_size=300)
    rng = random.Random(2)
    seqs = [[rng.randrange(300) for _ in range(n)] for n in (5, 1, 9, 3)]
    packed = pack_sequences(seqs)
    with torch.no_grad():
        # use_cache=False: transformers only reads packing from position_ids without a KV cache.
        packed_logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False).logits
        alone = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
    for got, want in zip(unpack_sequences(packed_logits, packed.cu_seqlens), alone):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    # And the padded batch (right padding, explicit mask) agrees on the real tokens.
    ids, mask = pad_sequences(seqs)
    with torch.no_grad():
        padded_logits = model(input_ids=ids, attention_mask=mask).logits
    for got, want in zip(unpad_sequences(padded_logits, mask), alone):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_plan_packing_puts_a_longer_sequence_alone():
    assert plan_packing([4, 12, 3, 2], 6, oversize="alone") == [[0, 3], [1], [2]]
    assert plan_packing([0, 7], 6, oversize="alone") == [[0, 1]]  # an empty row fits anywhere
    with pytest.raises(ValueError, match="oversize"):
        plan_packing([1], 6, oversize="cut")


def test_padded_to_packed_can_keep_empty_rows():
    ids, mask = pad_sequences([[5, 6], [], [7]])
    packed = padded_to_packed(ids, mask, allow_empty=True)
    assert packed.lengths == [2, 0, 1] and packed.position_ids.tolist() == [[0, 1, 0]]
    assert packed_to_padded(packed.input_ids, packed, ids.shape).tolist() == ids.tolist()


def test_packed_forward_scores_only_wanted_tokens_under_each_rows_temperature():
    """packed_forward against a plain loop: each row alone through the model, logits / its
    temperature, log-softmax at the next token; 0 where no token is wanted and at padding."""
    from roll.data.packing import packed_forward
    from roll.models.tiny import build_model

    model = build_model("tiny", seed=0, vocab_size=300)
    rng = random.Random(3)
    seqs = [[rng.randrange(300) for _ in range(n)] for n in (6, 2, 9, 4)]
    ids, mask = pad_sequences(seqs, side="left")
    loss_mask = mask.clone()
    loss_mask[:, -2:] = 0  # the last two columns are no loss tokens
    temps = torch.tensor([0.5, 1.0, 2.0, 0.8])
    with torch.no_grad():
        lp, extra = packed_forward(model, ids, mask, loss_mask=loss_mask, temperature=temps, entropy=True)
        _, values = packed_forward(model, ids, mask, critic=True)
        lp_all, _ = packed_forward(model, ids, mask, keep_logits=False)
        for i, s in enumerate(seqs):
            logits = model(input_ids=torch.tensor([s])).logits[0, :-1]
            logp = (logits / temps[i]).log_softmax(-1)
            want = logp.gather(-1, torch.tensor(s[1:])[:, None]).squeeze(-1)
            cols = torch.arange(ids.shape[1] - len(s) + 1, ids.shape[1])  # left padding: the row ends at the right
            keep = loss_mask[i, cols].bool()
            torch.testing.assert_close(lp[i, cols][keep], want[keep], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(extra["entropy"][i, cols][keep], -(logp.exp() * logp).sum(-1)[keep], atol=1e-5, rtol=1e-4)
            plain = logits.log_softmax(-1).gather(-1, torch.tensor(s[1:])[:, None]).squeeze(-1)
            torch.testing.assert_close(lp_all[i, cols], plain, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(values["values"][i, cols[0] - 1:], model(input_ids=torch.tensor([s])).logits[0, :, 0])
    unwanted = ~loss_mask.bool()
    unwanted[torch.arange(4), (mask.cumsum(-1) == 1).float().argmax(-1)] = True  # each row's first token
    assert torch.all(lp[unwanted] == 0) and torch.all(values["values"][~mask.bool()] == 0)
