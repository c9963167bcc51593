"""Fault injection on the tiny agentic pipeline: a worker process of each role is SIGKILLed
mid-run (as a crash or the OOM killer would); the run completes every step and counts it."""
from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import pytest

from roll.cli import main as roll_main
from roll.distributed.chaos import ROLE_CLASSES, kill_worker
from roll.utils.checkpoint import COMPLETE_MARKER

from integration.helpers import REPO, read_metrics

pytestmark = pytest.mark.integration

CONFIG = REPO / "configs/agentic/sokoban_cpu.yaml"
# a line Ray forwarded from a worker process: "(pid=123) ..." or "(ActorWorker pid=123) ...", maybe coloured
RAY_WORKER_LINE = re.compile(r"^(\x1b\[[0-9;]*m)?\([^)]*\bpid=\d+[^)]*\)")


def _killer(out: Path, after_step: int, target: str, busy_with: str | None, result: dict,
            role: str | None = None) -> threading.Thread:
    def run():
        metrics = out / "logs" / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if metrics.exists() and f'"step": {after_step}' in metrics.read_text():
                break
            time.sleep(0.1)
        result["pid"] = kill_worker(ROLE_CLASSES[target], random.Random(0), busy_with=busy_with, wait_s=120, role=role)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_killed_workers_mid_run_are_restarted_and_the_run_completes(tmp_path, ray_cluster):
    """An env worker killed during step 2 and the inference worker killed during step 3 of one
    run (one start-up for both faults; the kills are a step apart so that each recovery is seen
    on its own)."""
    out = tmp_path / "run"
    env_kill: dict = {}
    infer_kill: dict = {}
    killers = [_killer(out, 1, "env", None, env_kill), _killer(out, 2, "infer", None, infer_kill)]
    # no validation scheduler: every env worker process is the training scheduler's. The
    # inference worker shares the trainer's slot (the colocated weight sync): on the broadcast
    # path a receiver killed mid-transfer also breaks the trainer's side of the gloo group, and
    # the trainer may then be reported dead as well, which stops the run by design (its state
    # is not trusted) instead of completing it
    rc = roll_main(["run", str(CONFIG), "max_steps=4", "save_steps=0", "eval_steps=0", "show_progress=false",
                    "val_env_manager=null", f"output_dir={out}", "actor_train.device_mapping=[0]",
                    "actor_infer.device_mapping=[0]", "actor_train.world_size=null", "actor_infer.world_size=null"])
    for killer in killers:
        killer.join(timeout=10)
    assert env_kill.get("pid"), "no live env worker process was found to kill"
    assert infer_kill.get("pid"), "no live infer worker process was found to kill"
    assert rc == 0
    metrics = read_metrics(out)
    assert all(s in metrics for s in range(1, 5)), sorted(metrics)
    last = metrics[4]
    assert last["system/restarts/actor_infer"] >= 1
    assert last["rollout/env_workers/restarts"] >= 1 and last["rollout/env_workers/serving"] == 1
    # the killed workers' episodes were retried or re-sent, not lost: every step trained
    assert all("actor/loss" in metrics[s] for s in range(1, 5))
    # the colocated placement's checks of tests/integration/test_agentic_pipeline.py (this run
    # stands for it): the weights of step 1 reached the inference worker before step 2's rollouts
    # (the inference kill comes later), every step has env metrics, the final checkpoint is whole
    assert metrics[2]["rollout/policy_version"] == 1.0
    assert all("env/SimpleSokoban/success" in metrics[s] for s in range(1, 5))
    ckpt = out / "checkpoints" / "step-4"
    assert (ckpt / COMPLETE_MARKER).exists() and (ckpt / "actor_train" / "trainer_state.pt").exists()


def test_killed_trainer_rank_stops_cleanly_and_resume_loses_no_finished_step(tmp_path, ray_cluster, capsys):
    """A trainer rank's optimizer state dies with it: the run stops with one clear message and a
    non-zero exit, and a resume from the checkpoint of every step redoes only the step in flight."""
    out = tmp_path / "run"
    args = ["run", str(CONFIG), "max_steps=4", "save_steps=1", "eval_steps=0", "show_progress=false",
            "val_env_manager=null", f"output_dir={out}"]
    result: dict = {}
    killer = _killer(out, 2, "train", "train", result)
    rc = roll_main(args)
    killer.join(timeout=10)
    assert result.get("pid"), "no trainer process was found training"
    err = capsys.readouterr().err
    assert rc == 1, err[-2000:]
    message = [line for line in err.splitlines() if line.startswith("roll: ")]
    # the shared test cluster forwards worker output (log_to_driver; `roll run` does not, see
    # tests/integration/test_console_output.py): a worker stopped mid-import may print Ray's own
    # SystemExit traceback there. Roll's lines are the rest, and carry none.
    own = "\n".join(line for line in err.splitlines() if not RAY_WORKER_LINE.match(line))
    assert message and "actor_train" in message[0] and "Traceback" not in own, err[-2000:]
    logged = max(read_metrics(out))
    latest = int((out / "checkpoints" / "latest").read_text().strip().removeprefix("step-"))
    assert latest == logged >= 2  # every finished step is in a checkpoint: only the step in flight is lost
    assert not (out / "final_model").exists()

    rc = roll_main(args + ["resume_from_checkpoint=true"])
    assert rc == 0
    metrics = read_metrics(out)
    assert all(s in metrics and "actor/loss" in metrics[s] for s in range(1, 5)), sorted(metrics)
    assert (out / "final_model").exists()


def test_killed_reward_worker_is_set_up_again_and_its_samples_scored(tmp_path, ray_cluster):
    """RLVR: the math reward worker is SIGKILLed mid-run; the samples it held are scored again on
    its restarted process and every step trains."""
    out = tmp_path / "rlvr"
    result: dict = {}
    killer = _killer(out, 1, "reward", None, result, role="reward.math")
    rc = roll_main(["run", str(REPO / "configs/rlvr/multi_domain_cpu.yaml"), "max_steps=3", "save_steps=0", "eval_steps=0",
                    "show_progress=false", f"output_dir={out}"])
    killer.join(timeout=10)
    assert result.get("pid"), "no reward worker process was found to kill"
    assert rc == 0
    metrics = read_metrics(out)
    assert all(s in metrics and "actor/loss" in metrics[s] for s in range(1, 4)), sorted(metrics)
    # the crash was noticed on a sample and the worker set up again (or, killed between steps,
    # on the next step's first math sample); the sample was scored, not failed
    assert metrics[3].get("reward/math/crash_recoveries", 0) >= 1, {k: v for k, v in metrics[3].items() if "math" in k}
