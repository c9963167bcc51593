"""HF <-> Megatron-Core layout conversion (CPU, pure torch): bit-exact round trips and the
fused layouts checked against a direct per-head construction."""
from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from roll.strategies.megatron_convert import (
    DecoderLayout,
    fuse_qkv,
    gather_from_tp,
    gathered_shape,
    hf_to_megatron,
    megatron_to_hf,
    shard_for_tp,
    split_qkv,
)


def _qwen(tie: bool, heads=8, kv=2, layers=4) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=tie)
    return Qwen2ForCausalLM(cfg)


def _hf_state(model) -> dict[str, torch.Tensor]:
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.setdefault("lm_head.weight", sd["model.embed_tokens.weight"])
    return sd


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (1, 2), (2, 2)])
@pytest.mark.parametrize("tie", [True, False])
def test_round_trip_bit_exact(tp, pp, tie):
    model = _qwen(tie)
    layout = DecoderLayout.from_hf_config(model.config, padded_vocab_size=304)
    hf = _hf_state(model)
    shards = hf_to_megatron(hf, layout, tp=tp, pp=pp)
    assert set(shards) == {(p, t) for p in range(pp) for t in range(tp)}
    back = megatron_to_hf(shards, layout, tp=tp, pp=pp)
    assert set(back) == set(hf)
    for name, tensor in hf.items():
        assert torch.equal(back[name], tensor), name


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gathered_shape_is_the_shape_gather_from_tp_makes(tp):
    """Weight sync sizes the receive buffer of a pipeline stage it does not own from the shard
    shape alone: it must be the shape the TP gather produces, for every tensor kind."""
    model = _qwen(tie=False, kv=4)
    layout = DecoderLayout.from_hf_config(model.config, padded_vocab_size=304)
    shards = hf_to_megatron(_hf_state(model), layout, tp=tp, pp=1)
    for name, shard in shards[(0, 0)].items():
        full = gather_from_tp(name, [shards[(0, t)][name] for t in range(tp)], layout)
        assert gathered_shape(name, tuple(shard.shape), tp, layout) == full.shape, name


def test_tiny_model_round_trip(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    layout = DecoderLayout.from_hf_config(model.config)
    hf = _hf_state(model)
    back = megatron_to_hf(hf_to_megatron(hf, layout, tp=2, pp=2), layout, tp=2, pp=2)
    assert all(torch.equal(back[k], v) for k, v in hf.items())
    # the converted weights load back into a working HF model with identical logits
    fresh = type(model)(model.config)
    fresh.load_state_dict(back)
    ids = torch.tensor([[1, 5, 9, 200, 7]])
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, model(ids).logits)


def test_shapes_and_placement():
    model = _qwen(tie=False)
    layout = DecoderLayout.from_hf_config(model.config, padded_vocab_size=304)
    shards = hf_to_megatron(_hf_state(model), layout, tp=2, pp=2)
    first, last = shards[(0, 1)], shards[(1, 1)]
    d = layout.head_dim
    assert first["embedding.word_embeddings.weight"].shape == (152, 64)
    assert "output_layer.weight" not in first and last["output_layer.weight"].shape == (152, 64)
    assert first["decoder.layers.0.self_attention.linear_qkv.weight"].shape == ((8 + 2 * 2) * d // 2, 64)
    assert first["decoder.layers.0.self_attention.linear_qkv.bias"].shape == ((8 + 2 * 2) * d // 2,)
    assert first["decoder.layers.0.self_attention.linear_proj.weight"].shape == (64, 8 * d // 2)
    assert first["decoder.layers.0.mlp.linear_fc1.weight"].shape == (96, 64)
    assert first["decoder.layers.0.mlp.linear_fc2.weight"].shape == (64, 48)
    assert "decoder.layers.2.mlp.linear_fc2.weight" not in first  # stage 0 holds layers 0-1
    assert "decoder.layers.1.mlp.linear_fc2.weight" in last  # stage 1's local layer 1 = global 3
    assert "decoder.final_layernorm.weight" in last and "decoder.final_layernorm.weight" not in first
    # vocabulary padding rows are zeros
    assert torch.count_nonzero(shards[(0, 1)]["embedding.word_embeddings.weight"][-4:]) == 0


def test_qkv_grouping_matches_per_head_construction():
    layout = DecoderLayout(num_layers=1, hidden_size=4, num_heads=6, num_kv_heads=2, head_dim=3,
                           ffn_hidden_size=8, vocab_size=10, tie_word_embeddings=True)
    q = torch.arange(6 * 3 * 4, dtype=torch.float32).reshape(18, 4)
    k = -torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(6, 4) - 1
    v = 1000 + torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(6, 4)
    # obviously-correct loop: for each group, its 3 query heads, then its key head, then its value head
    rows = []
    for g in range(2):
        for h in range(3):
            rows.append(q[(g * 3 + h) * 3:(g * 3 + h + 1) * 3])
        rows.append(k[g * 3:(g + 1) * 3])
        rows.append(v[g * 3:(g + 1) * 3])
    expected = torch.cat(rows)
    fused = fuse_qkv(q, k, v, layout)
    assert torch.equal(fused, expected)
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(fused, layout), (q, k, v)))
    # TP=2: each rank holds one whole group and splits back into its own heads
    r0, _r1 = shard_for_tp("decoder.layers.0.self_attention.linear_qkv.weight", fused, 2, layout)
    q0, k0, v0 = split_qkv(r0, layout)
    assert torch.equal(q0, q[:9]) and torch.equal(k0, k[:3]) and torch.equal(v0, v[:3])


def test_fc1_sharding_keeps_gate_and_up_per_rank():
    layout = DecoderLayout(1, 4, 2, 2, 2, 8, 10, True)
    gate, up = torch.arange(32.).reshape(8, 4), -torch.arange(32.).reshape(8, 4)
    full = torch.cat([gate, up])
    shards = shard_for_tp("decoder.layers.0.mlp.linear_fc1.weight", full, 4, layout)
    for t, s in enumerate(shards):
        assert torch.equal(s, torch.cat([gate[2 * t:2 * t + 2], up[2 * t:2 * t + 2]]))
    assert torch.equal(gather_from_tp("decoder.layers.0.mlp.linear_fc1.weight", shards, layout), full)


def test_bad_parallel_sizes_are_explained():
    model = _qwen(tie=True, heads=8, kv=2, layers=4)
    layout = DecoderLayout.from_hf_config(model.config)
    with pytest.raises(ValueError, match="num_key_value_heads 2 is not divisible by tensor parallel size 4"):
        hf_to_megatron(_hf_state(model), layout, tp=4)
    with pytest.raises(ValueError, match="num_hidden_layers 4 is not divisible by pipeline parallel size 3"):
        hf_to_megatron(_hf_state(model), layout, pp=3)
