"""The default console of `roll run` (roll/utils/console.py): step lines, validation lines,
ETA, and the stdout tracker's dump only with --verbose."""
from __future__ import annotations

import io

from roll.tracking.backends import StdoutTracker
from roll.utils.console import (RunConsole, StepClock, format_duration, format_value, run_done_line, step_line,
                                validation_line)

AGENTIC = {
    "actor/loss": 0.01, "actor/ppo_kl": 0.00123, "actor/entropy": 2.3456, "actor/lr": 1e-4,
    "env/FrozenLake/success": 0.25, "env/FrozenLake/return": 0.25, "env/FrozenLake/invalid_action_rate": 0.125,
    "env/FrozenLake/num_turns": 4.0, "env/Sokoban/success": 0.0, "env/Sokoban/return": -0.3,
    "env/Sokoban/invalid_action_rate": 1.0, "rollout/episodes_failed": 0.0, "timing/step": 4.2,
    "reward/score_mean": 0.1,
}
RLVR = {
    "actor/ref_kl": 0.02, "actor/ppo_kl": 0.5, "actor/entropy": 1.0, "reward/math/score": 0.5,
    "reward/math/success": 0.5, "reward/math/failed": 0.0, "reward/code/score": 0.75, "reward/code/success": 0.25,
    "reward/score_mean": 0.6, "rollout/math/samples": 8.0,
}
SFT = {"sft/nll": 1.23456, "actor/loss": 1.23456, "actor/lr": 1e-5, "data/epoch": 0.5}


def test_agentic_step_line_has_what_a_person_watches():
    line = step_line(AGENTIC, 3, 10, step_s=4.2, eta_s=29.4)
    assert line == ("step  3/10 | FrozenLake success 0.25 return 0.25 invalid 0.12  "
                    "Sokoban success 0.00 return -0.30 invalid 1.00 | ppo_kl 1.2e-03 entropy 2.35 | 4.2 s/step ETA 29s")
    assert "\n" not in line and len(line) < 200


def test_rlvr_step_line_per_domain_and_reference_kl():
    line = step_line(RLVR, 1, 2, step_s=12.04, eta_s=12.0)
    assert line == "step 1/2 | code reward 0.75 acc 0.25  math reward 0.50 acc 0.50 | kl 0.02 entropy 1.00 | 12.0 s/step ETA 12s"


def test_sft_step_line_shows_the_loss():
    assert step_line(SFT, 7, 7, step_s=0.5, eta_s=0.0) == "step 7/7 | loss 1.23 | 0.5 s/step"  # no ETA on the last step


def test_failed_episodes_and_rewards_are_shown():
    assert "failed 3" in step_line({**AGENTIC, "rollout/episodes_failed": 3.0}, 1, 2)
    all_failed = {**RLVR, "reward/qa/failed": 4.0}  # no score: every qa reward raised
    assert "  qa failed 4 |" in step_line(all_failed, 1, 2)


def test_validation_line_sampled_then_greedy():
    metrics = {"val_greedy/env/FrozenLake/success": 0.5, "val/env/FrozenLake/success": 0.25,
               "val/env/FrozenLake/return": 0.25, "val/rollout/groups": 8.0, **AGENTIC}
    assert validation_line(metrics, 4, 10) == ("val   4/10 | sampled: FrozenLake success 0.25 return 0.25 | "
                                               "greedy: FrozenLake success 0.50")
    assert validation_line(AGENTIC, 4, 10) is None
    assert validation_line({"val/reward/math/score": 0.5}, 0, 2) == "val  0/2 | sampled: math reward 0.50"
    assert validation_line({"val/sft_nll": 2.0}, 2, 2) == "val  2/2 | sampled: nll 2.00"


def test_values_and_durations():
    assert [format_value(v) for v in (0.0, 0.004, 0.5, -0.3, 12.345, 123456.0, float("nan"))] == [
        "0.00", "4.0e-03", "0.50", "-0.30", "12.3", "1.23e+05", "nan"]
    assert [format_duration(s) for s in (4.4, 65, 3600 * 3 + 7 * 60, float("inf"))] == ["4s", "1m05s", "3h07m", "?"]


def test_eta_is_the_recent_mean_times_the_steps_left():
    now = iter([0.0, 10.0, 12.0, 14.0]).__next__
    clock = StepClock(window=2, now=now)
    assert clock.eta(0, 5) is None
    assert clock.tick() == 10.0 and clock.eta(1, 5) == 40.0
    clock.tick()
    clock.tick()  # the slow first step has left the window
    assert clock.eta(3, 5) == 4.0
    assert clock.eta(5, 5) == 0.0


def test_run_console_prints_one_line_per_step_and_no_bar_off_a_terminal():
    out = io.StringIO()
    with RunConsole("run", total=2, stream=out) as con:
        con.step(1, AGENTIC)
        con.step(2, {**AGENTIC, "val/env/FrozenLake/success": 1.0})
    lines = out.getvalue().splitlines()
    assert [ln.split(" | ")[0] for ln in lines] == ["step 1/2", "step 2/2", "val  2/2"]
    assert "\r" not in out.getvalue() and "━" not in out.getvalue()


def test_stdout_tracker_dump_only_when_verbose(monkeypatch):
    out = io.StringIO()
    tracker = StdoutTracker(run_name="r", log_dir="", config={}, project="p", stream=out)
    monkeypatch.delenv("ROLL_VERBOSE", raising=False)
    tracker.log(AGENTIC, 1)
    tracker.log_text("rollout/trajectories", "turn 1 ...", 1)
    assert out.getvalue() == ""
    monkeypatch.setenv("ROLL_VERBOSE", "1")
    tracker.log(AGENTIC, 2)
    tracker.log_text("rollout/trajectories", "turn 1 ...", 2)
    dump = out.getvalue()
    assert dump.startswith("[step 2] ") and "actor: entropy=2.346" in dump and "turn 1 ..." in dump
    silent = StdoutTracker(run_name="r", log_dir="", config={}, project="p", stream=out, full=False)
    silent.log(AGENTIC, 3)
    assert "[step 3]" not in out.getvalue()


def test_done_line_names_what_exists(tmp_path):
    (tmp_path / "final_model").mkdir()
    (tmp_path / "run.log").write_text("")
    line = run_done_line(tmp_path, 4, 95.0)
    assert line.startswith("done: 4 steps in 1m35s; model ")
    assert f"report: roll view {tmp_path}" in line and "curves" not in line


def test_done_line_paths_are_relative_inside_the_working_directory(tmp_path, monkeypatch):
    run = tmp_path / "output" / "exp"
    (run / "plots").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert run_done_line(run, 2, 3.0) == "done: 2 steps in 3s; curves output/exp/plots; report: roll view output/exp"
