"""Hugging Face <-> Megatron-Core weight layouts for Qwen2 / Llama-style decoders (pure torch).

Megatron-Core's GPT model (transformer-engine layer spec) stores a decoder layer as:

=================================================================  =========================================
Megatron-Core name (per pipeline stage, local layer index)         Hugging Face source
=================================================================  =========================================
``embedding.word_embeddings.weight`` [V/tp, H] (first stage)       ``model.embed_tokens.weight`` (vocab rows split)
``decoder.layers.{i}.self_attention.linear_qkv.layer_norm_weight`` ``model.layers.{i}.input_layernorm.weight``
``decoder.layers.{i}.self_attention.linear_qkv.weight``            q/k/v_proj, fused per query group (below)
``decoder.layers.{i}.self_attention.linear_qkv.bias``              q/k/v_proj biases (Qwen2), same fusion
``decoder.layers.{i}.self_attention.linear_proj.weight`` [H, Q/tp] ``o_proj.weight`` (input columns split)
``decoder.layers.{i}.mlp.linear_fc1.layer_norm_weight``            ``post_attention_layernorm.weight``
``decoder.layers.{i}.mlp.linear_fc1.weight`` [2F/tp, H]            ``[gate_proj shard; up_proj shard]``
``decoder.layers.{i}.mlp.linear_fc2.weight`` [H, F/tp]             ``down_proj.weight`` (input columns split)
``decoder.final_layernorm.weight`` (last stage)                    ``model.norm.weight``
``output_layer.weight`` [V/tp, H] (last stage, untied only)        ``lm_head.weight``
=================================================================  =========================================

Grouped-query QKV: with ``g = num_key_value_heads`` groups of ``r = heads / g`` query heads,
the fused weight is, for each group, its ``r`` query heads, then its key head, then its value
head ([g * (r + 2) * head_dim, H]); tensor parallelism gives each rank ``g / tp`` whole groups.
The fused MLP input is ``[gate; up]`` per rank, so each rank's rows are its slice of gate
followed by its slice of up. Vocabulary rows may be padded (``padded_vocab_size``); padding
rows are zeros going in and dropped coming back. Norms are replicated on every TP rank.

Everything here is slicing and concatenation, so HF -> Megatron -> HF is bit-exact.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DecoderLayout:
    """The shape facts the conversion needs, read from a HF config."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    padded_vocab_size: int | None = None

    @classmethod
    def from_hf_config(cls, config, padded_vocab_size: int | None = None) -> DecoderLayout:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            num_layers=config.num_hidden_layers, hidden_size=config.hidden_size, num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads, head_dim=head_dim,
            ffn_hidden_size=config.intermediate_size, vocab_size=config.vocab_size,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            padded_vocab_size=padded_vocab_size,
        )

    @property
    def vocab_rows(self) -> int:
        return self.padded_vocab_size or self.vocab_size

    def check(self, tp: int, pp: int) -> None:
        problems = []
        if self.num_heads % self.num_kv_heads:
            problems.append(f"num_attention_heads {self.num_heads} is not a multiple of num_key_value_heads {self.num_kv_heads}")
        if self.num_kv_heads % tp:
            problems.append(f"num_key_value_heads {self.num_kv_heads} is not divisible by tensor parallel size {tp}")
        if self.ffn_hidden_size % tp:
            problems.append(f"intermediate_size {self.ffn_hidden_size} is not divisible by tensor parallel size {tp}")
        if self.vocab_rows % tp:
            problems.append(f"(padded) vocab size {self.vocab_rows} is not divisible by tensor parallel size {tp}")
        if self.vocab_rows < self.vocab_size:
            problems.append(f"padded_vocab_size {self.vocab_rows} is smaller than vocab_size {self.vocab_size}")
        if self.num_layers % pp:
            problems.append(f"num_hidden_layers {self.num_layers} is not divisible by pipeline parallel size {pp}")
        if problems:
            raise ValueError("megatron layout: " + "; ".join(problems))

    def stage_layers(self, pp_rank: int, pp: int) -> range:
        per = self.num_layers // pp
        return range(pp_rank * per, (pp_rank + 1) * per)


# ---- fused tensors (full, i.e. tensor-parallel gathered) ------------------------------------------
def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: DecoderLayout) -> torch.Tensor:
    """q [nq*d, ...], k/v [nkv*d, ...] -> grouped [nkv*(r+2)*d, ...] (works for weights and biases)."""
    g, d = layout.num_kv_heads, layout.head_dim
    r = layout.num_heads // g
    rest = q.shape[1:]
    groups = torch.cat([q.reshape(g, r * d, *rest), k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1)
    return groups.reshape(g * (r + 2) * d, *rest)


def split_qkv(qkv: torch.Tensor, layout: DecoderLayout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`fuse_qkv` for a fused tensor holding ``qkv.shape[0] // ((r+2)*d)`` groups."""
    d = layout.head_dim
    r = layout.num_heads // layout.num_kv_heads
    rest = qkv.shape[1:]
    g = qkv.shape[0] // ((r + 2) * d)
    groups = qkv.reshape(g, (r + 2) * d, *rest)
    q, k, v = torch.split(groups, [r * d, d, d], dim=1)
    return q.reshape(g * r * d, *rest), k.reshape(g * d, *rest), v.reshape(g * d, *rest)


def _pad_vocab(w: torch.Tensor, layout: DecoderLayout) -> torch.Tensor:
    extra = layout.vocab_rows - w.shape[0]
    return torch.cat([w, w.new_zeros(extra, *w.shape[1:])]) if extra > 0 else w


# ---- tensor-parallel sharding of one full Megatron tensor ------------------------------------------
_ROW_SPLIT = ("linear_proj.weight", "linear_fc2.weight")  # split the input (column) dim
_REPLICATED = ("layer_norm_weight", "final_layernorm.weight", "linear_proj.bias", "linear_fc2.bias")


def shard_for_tp(name: str, full: torch.Tensor, tp: int, layout: DecoderLayout) -> list[torch.Tensor]:
    """Split one full Megatron tensor into its ``tp`` rank shards."""
    if tp == 1:
        return [full]
    if name.endswith(_REPLICATED):
        return [full] * tp
    if name.endswith(_ROW_SPLIT):
        return list(torch.chunk(full, tp, dim=1))
    if name.endswith(("linear_fc1.weight", "linear_fc1.bias")):
        gate, up = torch.chunk(full, 2, dim=0)
        return [torch.cat([g, u]) for g, u in zip(torch.chunk(gate, tp), torch.chunk(up, tp))]
    # linear_qkv (whole query groups per rank, groups are contiguous), embeddings, output layer
    return list(torch.chunk(full, tp, dim=0))


def gathered_shape(name: str, shard_shape: tuple, tp: int, layout: DecoderLayout) -> torch.Size:
    """The full shape of a tensor whose TP shards have ``shard_shape`` (no data moves: meta tensors)."""
    return gather_from_tp(name, [torch.empty(shard_shape, device="meta")] * tp, layout).shape


def gather_from_tp(name: str, shards: list[torch.Tensor], layout: DecoderLayout) -> torch.Tensor:
    """Inverse of :func:`shard_for_tp`."""
    if len(shards) == 1 or name.endswith(_REPLICATED):
        return shards[0]
    if name.endswith(_ROW_SPLIT):
        return torch.cat(shards, dim=1)
    if name.endswith(("linear_fc1.weight", "linear_fc1.bias")):
        halves = [torch.chunk(s, 2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return torch.cat(shards, dim=0)


# ---- whole-model conversion -----------------------------------------------------------------------
_SAME_IN_LAYER = {  # Megatron name in decoder layer i -> HF name in model.layers.i, tensor unchanged
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
}


def hf_to_megatron_full(hf: Mapping[str, torch.Tensor], layout: DecoderLayout) -> dict[str, torch.Tensor]:
    """HF state dict -> full (unsharded) Megatron tensors with GLOBAL layer indices."""
    out: dict[str, torch.Tensor] = {"embedding.word_embeddings.weight": _pad_vocab(hf["model.embed_tokens.weight"], layout)}
    for i in range(layout.num_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        out.update({m + meg: hf[h + name] for meg, name in _SAME_IN_LAYER.items()})
        for kind in ("weight", "bias"):  # biases: Qwen2 only
            if kind == "weight" or h + "self_attn.q_proj.bias" in hf:
                qkv = [hf[f"{h}self_attn.{p}_proj.{kind}"] for p in "qkv"]
                out[f"{m}self_attention.linear_qkv.{kind}"] = fuse_qkv(*qkv, layout)
        out[m + "mlp.linear_fc1.weight"] = torch.cat([hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]])
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    if not layout.tie_word_embeddings:
        out["output_layer.weight"] = _pad_vocab(hf["lm_head.weight"], layout)
    return out


_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")


def megatron_full_to_hf(name: str, full: torch.Tensor, layout: DecoderLayout) -> Iterator[tuple[str, torch.Tensor]]:
    """One full Megatron tensor (global layer index) -> its HF tensors. Used by weight sync, which
    streams gathered tensors one at a time."""
    match = _LAYER.match(name)
    h, rest = (f"model.layers.{match.group(1)}.", match.group(2)) if match else ("", name)
    if name == "decoder.final_layernorm.weight":
        yield "model.norm.weight", full
    elif name in ("embedding.word_embeddings.weight", "output_layer.weight"):  # padding rows dropped
        yield "model.embed_tokens.weight" if name.startswith("embedding") else "lm_head.weight", full[: layout.vocab_size]
    elif match and rest in _SAME_IN_LAYER:
        yield h + _SAME_IN_LAYER[rest], full
    elif match and rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
        kind = rest.rsplit(".", 1)[1]
        yield from ((h + f"self_attn.{p}_proj.{kind}", t) for p, t in zip("qkv", split_qkv(full, layout)))
    elif match and rest == "mlp.linear_fc1.weight":
        yield from zip((h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"), torch.chunk(full, 2, dim=0))
    else:
        raise KeyError(f"megatron layout: no Hugging Face counterpart for {name!r}")


def global_to_local(name: str, pp_rank: int, pp: int, layout: DecoderLayout) -> str | None:
    """Megatron name with a global layer index -> the name on pipeline stage ``pp_rank`` (None if
    the tensor lives on another stage)."""
    match = _LAYER.match(name)
    if match:
        layers = layout.stage_layers(pp_rank, pp)
        i = int(match.group(1))
        return f"decoder.layers.{i - layers.start}.{match.group(2)}" if i in layers else None
    if name.startswith("embedding."):
        return name if pp_rank == 0 else None
    return name if pp_rank == pp - 1 else None  # final norm, output layer


def local_to_global(name: str, pp_rank: int, pp: int, layout: DecoderLayout) -> str:
    match = _LAYER.match(name)
    if not match:
        return name
    return f"decoder.layers.{int(match.group(1)) + layout.stage_layers(pp_rank, pp).start}.{match.group(2)}"


def hf_to_megatron(hf: Mapping[str, torch.Tensor], layout: DecoderLayout, tp: int = 1, pp: int = 1) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """HF state dict -> ``{(pp_rank, tp_rank): megatron state dict}`` (local layer indices)."""
    layout.check(tp, pp)
    full = hf_to_megatron_full(hf, layout)
    shards: dict[tuple[int, int], dict[str, torch.Tensor]] = {(p, t): {} for p in range(pp) for t in range(tp)}
    for name, tensor in full.items():
        pieces = shard_for_tp(name, tensor, tp, layout)
        for p in range(pp):
            local = global_to_local(name, p, pp, layout)
            if local is not None:
                for t in range(tp):
                    shards[(p, t)][local] = pieces[t].clone()
    return shards


def megatron_to_hf(shards: Mapping[tuple[int, int], Mapping[str, torch.Tensor]], layout: DecoderLayout, tp: int = 1, pp: int = 1) -> dict[str, torch.Tensor]:
    """Inverse of :func:`hf_to_megatron`. A tied model gets ``lm_head.weight`` from the embedding."""
    layout.check(tp, pp)
    hf: dict[str, torch.Tensor] = {}
    for p in range(pp):
        for local in shards[(p, 0)]:
            full = gather_from_tp(local, [shards[(p, t)][local] for t in range(tp)], layout)
            for name, tensor in megatron_full_to_hf(local_to_global(local, p, pp, layout), full, layout):
                hf[name] = tensor.clone()
    if layout.tie_word_embeddings and "lm_head.weight" not in hf:
        hf["lm_head.weight"] = hf["model.embed_tokens.weight"]
    return hf
