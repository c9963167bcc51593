"""bench/gpu_check: the CPU-checkable parts (argument handling, the ~0.5B model config, the
dry run); the GPU run itself is recorded in docs/benchmarks.md when a GPU machine ran it."""
from __future__ import annotations


import pytest
from bench_loader import load_bench
import torch


@pytest.fixture(scope="module")
def gpu_check():
    return load_bench("gpu_check")


def test_args_defaults_quick_and_validation(gpu_check):
    a = gpu_check.parse_args([])
    assert (a.model, a.dtype, a.num_prompts, a.max_new_tokens, a.skip) == ("0.5b", "bfloat16", 64, 128, [])
    q = gpu_check.parse_args(["--quick", "--skip", "megatron", "deepspeed"])
    assert q.num_prompts == 16 and q.max_new_tokens == 32 and q.skip == ["megatron", "deepspeed"]
    for bad in (["--num-prompts", "0"], ["--gpu-memory-utilization", "1.5"], ["--skip", "nope"], ["--model", "7b"]):
        with pytest.raises(SystemExit):
            gpu_check.parse_args(bad)


def test_half_billion_config(gpu_check):
    from roll.strategies.megatron_convert import DecoderLayout

    cfg = gpu_check.model_config("0.5b", "bfloat16")
    n = gpu_check.count_parameters(cfg)
    assert 0.45e9 < n < 0.55e9
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    assert head_dim in (32, 64, 80, 96, 112, 128, 256)  # sizes vLLM's attention kernels support
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0
    DecoderLayout.from_hf_config(cfg).check(tp=1, pp=1)  # the Megatron phase can convert it


def test_dry_run_and_no_gpu(gpu_check, capsys):
    assert gpu_check.main(["--dry-run", "--model", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("RESULT dry_run=1 params=")
    if not torch.cuda.is_available():
        assert gpu_check.main(["--model", "smoke"]) == 2


def test_results_table(gpu_check):
    md = gpu_check.table([("vllm", "ok", "12 tok/s"), ("megatron", "FAIL", "ImportError: x")])
    lines = md.splitlines()
    assert lines[0].startswith("| phase") and len(lines) == 4 and "FAIL" in lines[3]
