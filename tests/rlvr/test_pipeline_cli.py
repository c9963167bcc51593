"""The multi-domain CPU config through the CLI, as a user runs it (subprocess)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = "configs/rlvr/multi_domain_cpu.yaml"
DOMAINS = ("math", "code", "ifeval", "mcq", "qa")

pytestmark = pytest.mark.integration


def roll(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "roll"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "roll"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO, check=False)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs" / "metrics.jsonl").read_text().splitlines()]


def test_two_steps_every_domain_with_per_domain_metrics(tmp_path):
    out = tmp_path / "run"
    proc = roll("run", CONFIG, "max_steps=2", f"output_dir={out}", "show_progress=false")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    train = [r for r in recs if "actor/loss" in r or "rollout/groups_kept" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        for tag in DOMAINS:
            assert r[f"rollout/{tag}/groups"] >= 1, (tag, r)  # every domain is sampled every step
            assert f"rollout/{tag}/response_length" in r
        for tag in ("math", "code", "ifeval", "mcq"):
            assert 0.0 <= r[f"reward/{tag}/score"] <= 1.0
            assert r[f"reward/{tag}/failed"] == 0
        # the tiny judge writes no parseable score: those samples fail, are counted, and the step trains on the rest
        assert r["rollout/qa/samples"] >= 2
        assert r["reward/qa/failed"] == r.get("reward/qa/errors/JudgeParseError", 0)
        assert r["rollout/batch_samples"] >= 8
        assert "actor/loss" in r and "timing/rollout" in r
    val = [r for r in recs if "val/reward/math/score" in r]
    assert val and all(f"val/rollout/{t}/samples" in val[-1] for t in DOMAINS)
    assert (out / "final_model" / "config.json").exists()
    from roll.viewer.report import build_report
    from roll.viewer.run_data import load_run

    dumped = [t for t in load_run(out).trajectories if t["step"] == 2]
    assert {t["env_tag"] for t in dumped} == set(DOMAINS)  # a group of every domain first
    assert all(t["kind"] == "rlvr" and t["num_turns"] == 1 and t["turns"][0]["observation"] for t in dumped)
    assert any(t["advantage"] is not None for t in dumped)  # written after the advantages
    assert build_report(out).exists() and (out / "plots" / "learning_curves.png").exists()


def test_reward_timeouts_fail_samples_and_the_step_completes(tmp_path):
    out = tmp_path / "run"
    # a math reward can never finish in a microsecond: every math sample times out (a hung verifier)
    # (the same run checks the validation data: the math training file listed among the validation files)
    proc = roll("run", CONFIG, "max_steps=1", f"output_dir={out}", "show_progress=false", "eval_steps=0",
                "rewards.math.timeout_s=0.000001", "data.max_sampling_rounds=0",
                "data.val_files=[data/rlvr/math_val.jsonl,data/rlvr/math_train.jsonl,data/rlvr/code_val.jsonl]")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = records(out)
    assert r["data/val/math/prompts_in_train"] == 224 and "data/val/code/prompts_in_train" not in r
    assert "224 of the 299 math validation prompts are also training prompts" in proc.stderr, proc.stderr[-3000:]
    # (a verifier may still beat the timer by a hair; the deterministic hang is in test_reward_worker)
    assert r["reward/math/failed_timeout"] >= 1
    assert r["reward/math/errors/TimeoutError"] == r["reward/math/failed_timeout"] == r["reward/math/failed"]
    assert r["reward/qa/errors/JudgeParseError"] >= 1  # a raising reward, in the same step
    assert "actor/loss" in r  # the other domains trained


def test_async_generation_trains_each_batch_one_version_behind_and_resumes(tmp_path):
    """``rollout.async_generation_ratio=1`` through the real workers: every batch after the first
    was generated while the previous one trained (policy lag 1), validation and a checkpoint
    in between, and a resume from that checkpoint continues."""
    out = tmp_path / "run"
    args = ("run", CONFIG, f"output_dir={out}", "show_progress=false", "rollout.async_generation_ratio=1",
            "eval_steps=2", "save_steps=2", "tracking.dump_trajectories=0")
    proc = roll(*args, "max_steps=3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    train = [r for r in records(out) if "actor/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert [r["rollout/policy_lag"] for r in train] == [0.0, 1.0, 1.0]
    assert all(r["timing/rollout"] > 0 for r in train) and all("timing/rollout_wait" in r for r in train[1:])
    assert any("val/reward/math/score" in r for r in records(out) if r["step"] == 2)
    # from the checkpoint written while step 3's batch was generating ahead
    proc = roll(*args, "max_steps=4", f"resume_from_checkpoint={out / 'checkpoints' / 'step-2'}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    train = [r for r in records(out) if "actor/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert [r["rollout/policy_lag"] for r in train[2:]] == [0.0, 1.0]  # the resume generates step 3 again
