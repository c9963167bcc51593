"""The chain runner (roll/pipelines/chain.py): which stage runs, is skipped or resumes on a
rerun, and that a bad stage stops the chain before anything starts.

The stages here are real demos stages (expert episodes, no Ray, a second each) and run
stages whose interrupted state is a real checkpoint on disk; the integration test
(tests/integration/test_main_job.py) runs a whole chain with Ray."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from roll.cli import main as cli_main
from roll.config.validate import ConfigError
from roll.pipelines.chain import (STATE_FILE, decide, is_chain_file, load_chain, preflight_chain, read_state,
                                  run_chain, _resume_action)
from roll.utils.checkpoint import CheckpointManager

REPO = Path(__file__).resolve().parents[2]
ENV_CFG = str(REPO / "configs/agentic/frozenlake_cpu.yaml")
SFT_CFG = str(REPO / "configs/agentic/learning/frozenlake_sft.yaml")
MAIN = REPO / "configs/agentic/frozenlake_main_cpu.yaml"


def write_chain(tmp_path: Path, stages: dict, name: str = "chain.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"exp_name": "t", "output_dir": str(tmp_path / "out"), "seed": 3,
                                    "stages": stages}, sort_keys=False))
    return path


def demos(epsilon: float = 0.5, episodes: int = 3) -> dict:
    return {"kind": "demos", "config": ENV_CFG, "demos": {"episodes": episodes, "epsilon": epsilon}}


def run(path: Path, overrides=()) -> tuple[dict, list]:
    chain, stages = load_chain(path, list(overrides))
    return run_chain(chain, stages), stages


def stage_lines(out: str) -> dict[str, str]:
    """stage name -> its ``== stage`` line of the runner's output."""
    lines = {}
    for line in out.splitlines():
        if line.startswith("== stage "):
            lines[line.split()[3]] = line
    return lines


def test_finished_stages_are_recorded_and_skipped(tmp_path, capsys):
    path = write_chain(tmp_path, {"d1": demos(), "d2": demos(0.0)})
    _, stages = run(path)
    state = read_state(tmp_path / "out")
    assert {n: r["status"] for n, r in state["stages"].items()} == {"d1": "done", "d2": "done"}
    assert all(Path(state["stages"][st.name]["output"]) == st.output and st.output.exists() for st in stages)
    mtimes = [st.output.stat().st_mtime_ns for st in stages]
    capsys.readouterr()
    run(path)
    lines = stage_lines(capsys.readouterr().out)
    assert "skipped (done" in lines["d1"] and "skipped (done" in lines["d2"]
    assert [st.output.stat().st_mtime_ns for st in stages] == mtimes


def test_missing_output_of_a_finished_stage_reruns_it_and_the_later_ones(tmp_path, capsys):
    path = write_chain(tmp_path, {"d1": demos(), "d2": demos(0.0), "d3": demos(1.0)})
    _, stages = run(path)
    stages[1].output.unlink()
    capsys.readouterr()
    run(path)
    lines = stage_lines(capsys.readouterr().out)
    assert "skipped" in lines["d1"]
    assert "running (its output" in lines["d2"] and "is missing" in lines["d2"]
    assert "running (an earlier stage ran again)" in lines["d3"]
    assert stages[1].output.exists()


def test_changed_stage_config_reruns_from_that_stage(tmp_path, capsys):
    path = write_chain(tmp_path, {"d1": demos(), "d2": demos(0.0)})
    run(path)
    capsys.readouterr()
    run(path, ["stages.d2.demos.episodes=2"])
    lines = stage_lines(capsys.readouterr().out)
    assert "skipped" in lines["d1"] and "config or input changed" in lines["d2"]


def test_an_interrupted_chain_resumes_at_the_interrupted_stage(tmp_path, capsys):
    path = write_chain(tmp_path, {"d1": demos(), "d2": demos(0.0), "d3": demos(1.0)})
    run(path)
    # what the state file holds after a crash inside d2: d1 done, d2 started
    state = read_state(tmp_path / "out")
    state["stages"]["d2"]["status"] = "running"
    del state["stages"]["d3"]
    (tmp_path / "out" / STATE_FILE).write_text(json.dumps(state))
    capsys.readouterr()
    run(path)
    lines = stage_lines(capsys.readouterr().out)
    assert "skipped" in lines["d1"]
    assert "running (interrupted; a demos stage starts over)" in lines["d2"]
    assert "running (not run yet)" in lines["d3"]
    assert read_state(tmp_path / "out")["stages"]["d3"]["status"] == "done"


def _checkpoint(stage_dir: Path, step: int) -> None:
    CheckpointManager(stage_dir / "checkpoints").save(step, lambda d: (d / "weights.txt").write_text("w") and None)


def test_an_interrupted_run_stage_resumes_from_its_checkpoint_or_is_done(tmp_path, capsys):
    sft = {"config": SFT_CFG, "overrides": {"max_steps": 4}}
    path = write_chain(tmp_path, {"d1": demos(), "sft": sft})
    chain, stages = load_chain(path)
    st = stages[1]
    assert st.cfg.resume_from_checkpoint is True and st.cfg.data.train_files == [str(stages[0].output)]
    record = {"status": "running", "fingerprint": st.fingerprint}
    assert decide(st, record, earlier_ran=False)[0] == "resume"
    assert _resume_action(st) == ("run", "interrupted before its first checkpoint")
    _checkpoint(st.dir, 2)
    assert _resume_action(st) == ("resume", "interrupted; from checkpoint step 2 of 4")
    _checkpoint(st.dir, 4)
    assert _resume_action(st)[0] == "run"  # the last step, but no final_model: train again
    (st.output / "config.json").parent.mkdir(parents=True)
    (st.output / "config.json").write_text("{}")
    assert _resume_action(st)[0] == "skip"
    # the whole chain: d1 done, sft interrupted after its last checkpoint -> recorded, nothing runs
    state = {"stages": {"d1": {"status": "done", "fingerprint": stages[0].fingerprint, "output": str(stages[0].output)},
                        "sft": {**record, "output": str(st.output), "wall_s": 12.0}}}
    stages[0].output.parent.mkdir(parents=True, exist_ok=True)
    stages[0].output.write_text("")
    (tmp_path / "out" / STATE_FILE).write_text(json.dumps(state))
    capsys.readouterr()
    run_chain(chain, stages)
    lines = stage_lines(capsys.readouterr().out)
    assert "skipped" in lines["d1"] and "finished (checkpoint step 4) before the interruption" in lines["sft"]
    assert read_state(tmp_path / "out")["stages"]["sft"]["status"] == "done"


def test_a_bad_stage_fails_the_chain_before_anything_runs(tmp_path, monkeypatch):
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("the chain started Ray before checking every stage")

    monkeypatch.setattr(ray, "init", no_ray)  # the suite's shared cluster may be up already
    bad = {"config": ENV_CFG, "overrides": {"custom_envs": {"FrozenLake": {"env_id": "roll/FrozenLak-v0"}}}}
    path = write_chain(tmp_path, {"d1": demos(), "rl": bad})
    with pytest.raises(ConfigError) as e:
        run(path)
    assert any(p.startswith("stages.rl: ") and "FrozenLak-v0" in p for p in e.value.errors)
    assert not (tmp_path / "out" / "d1").exists()
    # schema problems of a stage (a typo) are caught when the chain loads, with the stage named
    path = write_chain(tmp_path, {"d1": demos(), "rl": {"config": ENV_CFG, "overrides": {"max_stepz": 3}}}, "typo.yaml")
    with pytest.raises(ConfigError) as e:
        load_chain(path)
    assert any(p.startswith("stages.rl: ") and "max_stepz" in p and "max_steps" in p for p in e.value.errors)
    path = write_chain(tmp_path, {"d1": {**demos(), "kind": "train"}}, "kind.yaml")
    with pytest.raises(ConfigError, match="kind"):
        load_chain(path)
    path = write_chain(tmp_path, {"rl": {"config": ENV_CFG, "input": "pretrain"}}, "input.yaml")
    with pytest.raises(ConfigError, match="no earlier demos or run stage"):
        load_chain(path)
    later = {"sft": {"config": SFT_CFG, "inputs": {"data.train_files": "d2"}}, "d2": demos()}
    with pytest.raises(ConfigError, match=r"stages.sft: inputs: data.train_files: 'd2': each must name an earlier"):
        load_chain(write_chain(tmp_path, later, "inputs.yaml"))


def test_a_stage_fed_by_two_earlier_stages(tmp_path):
    """``inputs`` wires a model and a demos file that are not the nearest stage's output; the
    stage's fingerprint follows both, so a changed demos stage reruns it."""
    stages = {"d_clean": demos(0.0), "d_noisy": demos(0.5),
              "short": {"config": SFT_CFG, "overrides": {"data": {"with_tools": False}}},
              "sft": {"config": SFT_CFG, "inputs": {"pretrain": "short", "data.train_files": "d_noisy"}}}
    _, loaded = load_chain(write_chain(tmp_path, stages))
    by = {st.name: st for st in loaded}
    out = tmp_path / "out"
    assert by["short"].cfg.data.train_files == [str(out / "d_noisy" / "demos.jsonl")]  # auto: the nearest
    assert by["sft"].cfg.data.train_files == [str(out / "d_noisy" / "demos.jsonl")]
    assert by["sft"].cfg.pretrain == str(out / "short" / "final_model")
    assert (by["sft"].upstream, by["sft"].input_key) == ("short", "pretrain")
    assert not by["short"].cfg.data.with_tools and by["sft"].cfg.data.with_tools
    stages["d_noisy"] = demos(0.25)
    _, again = load_chain(write_chain(tmp_path, stages))
    changed = [a.name for a, b in zip(loaded, again) if a.fingerprint != b.fingerprint]
    assert changed == ["d_noisy", "short", "sft"]


def test_the_main_chain_wires_each_output_into_the_next_stage_and_passes_preflight(tmp_path):
    chain, stages = load_chain(MAIN, [f"output_dir={tmp_path}"])
    by = {st.name: st for st in stages}
    assert list(by) == ["baseline", "demos", "sft", "grpo"]
    assert by["baseline"].upstream is None and by["baseline"].cfg.pretrain == "roll-tiny://tiny"
    assert by["sft"].cfg.data.train_files == [str(tmp_path / "demos" / "demos.jsonl")]
    assert by["grpo"].cfg.pretrain == str(tmp_path / "sft" / "final_model")
    # the untrained baseline is validated on exactly the grpo stage's held-out episodes
    for key in ("val_batch_size", "val_env_manager", "custom_envs", "seed"):
        assert getattr(by["baseline"].cfg, key) == getattr(by["grpo"].cfg, key)
    assert all(st.cfg.output_dir == str(tmp_path / st.name) for st in stages)
    assert preflight_chain(stages) == []


def test_cli_plan_and_chain_detection(tmp_path, capsys):
    assert is_chain_file(MAIN) and not is_chain_file(ENV_CFG)
    assert cli_main(["plan", str(MAIN), f"output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "4 stages" in out and "pretrain <- sft" in out and "pre-flight OK" in out
    path = write_chain(tmp_path, {"rl": {"config": ENV_CFG, "overrides": {"pretrain": str(tmp_path / "nope")}}})
    assert cli_main(["plan", str(path)]) == 1
    assert "stages.rl: pretrain:" in capsys.readouterr().out
