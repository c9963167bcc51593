"""`roll run` trains from an agent function (tests/endpoint/endpoint_agents.py:arithmetic), as
a user would: the function's module on PYTHONPATH, the shipped config
(configs/agentic/agent_function_cpu.yaml) with overrides."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_two_training_steps_from_an_agent_function(tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "agent.yaml"
    config.write_text(textwrap.dedent(f"""
        defaults: [{REPO / "configs/agentic/agent_function_cpu.yaml"}]
        max_steps: 2
        save_steps: 0
        rollout_batch_size: 4
        show_progress: false
        output_dir: {out}
        tracking: {{track_with: [jsonl], dump_trajectories: 4}}
        custom_envs:
          Sums:
            env_kwargs:
              function: endpoint_agents:arithmetic
              tasks: [{{a: 2, b: 3}}, {{a: 4, b: 4}}, {{a: 1, b: 6}}]
              timeout_s: 60
        train_env_manager: {{group_size: 2}}
        actor_train: {{training_args: {{per_device_train_batch_size: 2, gradient_accumulation_steps: 2}}}}
        actor_infer: {{generating_args: {{max_new_tokens: 6}}}}
        """))
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = f"{Path(__file__).parent}:{env.get('PYTHONPATH', '')}"  # driver and Ray workers import it
    proc = subprocess.run([sys.executable, "-m", "roll", "run", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {}
    with open(out / "logs" / "metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            rows.setdefault(int(row["step"]), {}).update(row)
    trained = [s for s, r in rows.items() if "actor/pg_loss" in r]
    assert len(trained) == 2, sorted(rows)
    for s in trained:
        r = rows[s]
        assert r["env/Sums/episodes"] == 4 and 1 <= r["env/Sums/agent/requests"] <= 2
        assert r["env/Sums/agent/segments"] == 1 and 0.0 < r["env/Sums/return"] <= 1.0
        assert r["rollout/response_tokens/mean"] > 0
    # the function's rewards reached the batch and moved the policy
    assert any(rows[s]["reward/advantages_max"] > 0 for s in trained)
    assert all(rows[s]["actor/grad_norm"] > 0 for s in trained)
    # the dumped episodes are the function's conversations, trained on the model's tokens only
    dumps = sorted((out / "trajectories").glob("step-*.jsonl.gz"))
    assert dumps
    with gzip.open(dumps[0], "rt") as f:
        record = json.loads(f.readline())
    text = json.dumps(record)
    assert " = ?" in text  # the function's prompt
    # what tests/integration/test_agentic_pipeline.py checks of every tiny config's run (this run
    # stands for configs/agentic/agent_function_cpu.yaml there): success metrics, the final
    # checkpoint, and `roll view` on the run
    from roll.utils.checkpoint import COMPLETE_MARKER
    from roll.viewer.report import build_report
    from roll.viewer.run_data import load_run

    assert all("env/Sums/success" in rows[s] for s in trained)
    ckpt = out / "checkpoints" / "step-2"
    assert (ckpt / COMPLETE_MARKER).exists() and (ckpt / "actor_train" / "trainer_state.pt").exists()
    data = load_run(out)
    assert data.trajectories and {t["kind"] for t in data.trajectories} == {"agentic"}
    assert all(t["turns"] and t["tokens"]["ids"] for t in data.trajectories)
    assert build_report(out, tmp_path / "report.html").stat().st_size > 0
    assert (out / "plots" / "learning_curves.png").exists()
