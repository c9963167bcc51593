"""MegatronStrategy: config derivation and guards on CPU; forward/train/sync on GPU (marked gpu)."""
from __future__ import annotations

import os
import socket

import pytest
import torch

from roll.config.roles import StrategyArgs, TrainingArgs, WorkerConfig
from roll.strategies.megatron import (
    MegatronStrategy,
    default_padded_vocab,
    parallel_sizes,
    transformer_config_kwargs,
)


def _cfg(path: str, **sc) -> WorkerConfig:
    return WorkerConfig(model_name_or_path=path, strategy_args=StrategyArgs("megatron", sc),
                        training_args=TrainingArgs(lr=1e-4, per_device_train_batch_size=2))


def test_parallel_sizes():
    assert parallel_sizes({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2}, 8) == (2, 2, 2)
    assert parallel_sizes({}, 3) == (1, 1, 3)
    with pytest.raises(ValueError, match="world size 6 is not a multiple"):
        parallel_sizes({"tensor_model_parallel_size": 4}, 6)


def test_transformer_config_from_tiny(tiny_model_dir):
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(tiny_model_dir)
    kw = transformer_config_kwargs(hf, tp=2, pp=1, dtype="bfloat16", overrides={"hidden_dropout": 0.1})
    assert kw["num_layers"] == hf.num_hidden_layers and kw["num_query_groups"] == hf.num_key_value_heads
    assert kw["kv_channels"] == hf.hidden_size // hf.num_attention_heads
    assert kw["add_qkv_bias"] is True  # qwen2 has q/k/v biases
    assert kw["gated_linear_unit"] and kw["normalization"] == "RMSNorm" and kw["bf16"]
    assert kw["hidden_dropout"] == 0.1  # passthrough overrides win
    assert default_padded_vocab(hf.vocab_size, 2) % 256 == 0 and default_padded_vocab(hf.vocab_size, 2) >= hf.vocab_size


def test_guards(tiny_model_dir):
    with pytest.raises(ValueError, match="unknown strategy_config keys"):
        MegatronStrategy(_cfg(tiny_model_dir, tensor_parallel=2))
    with pytest.raises(NotImplementedError, match="critic"):
        MegatronStrategy(_cfg(tiny_model_dir), critic=True)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs CUDA"):
            MegatronStrategy(_cfg(tiny_model_dir), device="cpu").setup()


@pytest.mark.gpu
def test_train_step_and_sync_on_gpu(tiny_model_dir):
    pytest.importorskip("megatron.core")
    from transformers import AutoModelForCausalLM

    from roll.strategies.torch_train import init_process_group

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    init_process_group(0, 1, "127.0.0.1", port)
    strat = MegatronStrategy(_cfg(tiny_model_dir), seed=0)
    strat.setup()
    hf = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    synced = {n: t.float().cpu() for b in strat.named_parameters_for_sync(64) for n, t in b}
    for n, t in synced.items():
        assert torch.equal(t, hf[n]), n  # sync before training returns the checkpoint exactly
    ids = torch.randint(3, 3000, (4, 16))
    from roll.data.batch import Batch

    batch = Batch(tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": torch.ones_like(ids)})
    with torch.no_grad():
        from roll.strategies.torch_train import forward_logprobs

        ref = forward_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), batch)
    assert (strat.logprobs(batch) - ref).abs().max() < 1e-3

    def loss_fn(mb, lp, extra):
        return -(lp * mb["response_mask"]).sum() / mb.meta["global_num_tokens"] * mb.meta["dp_size"], {}

    m1 = strat.train_step(batch, loss_fn)
    m2 = strat.train_step(batch, loss_fn)
    assert m2["loss"] < m1["loss"]
