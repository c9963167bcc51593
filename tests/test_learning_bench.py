"""bench/learning.py: argument handling, the --quick sizes, metric parsing, gains, the curve
PNG and the docs section rewrite (the chain itself runs the CLI: see `python bench/learning.py --quick`)."""
import json
import os
import sys
import time
from pathlib import Path

import pytest
from bench_loader import load_bench

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    return load_bench("learning")


def test_args_and_quick_sizes(bench):
    a = bench.parse_args(["--quick", "--envs", "sokoban", "--ppo", "--seed", "7"])
    assert a.quick and a.ppo == [] and a.envs == ["sokoban"] and a.seed == 7
    assert bench.parse_args(["--ppo", "frozenlake"]).ppo == ["frozenlake"] and bench.parse_args([]).ppo is None
    with pytest.raises(SystemExit):
        bench.parse_args(["--envs", "chess"])
    full, quick = bench.env_specs(False), bench.env_specs(True)
    assert bench.parse_args(["--envs", "multi"]).envs == ["multi"]
    # the multi-env chain trains on both envs' demonstrations, each with its own noise
    assert [t for t, _, _ in full["multi"].demo_sets] == ["FrozenLake", "SimpleSokoban"]
    assert {t: e for t, e, _ in full["multi"].demo_sets}["FrozenLake"] == full["frozenlake"].epsilon
    for name in ("frozenlake", "sokoban", "multi"):
        assert quick[name].rl_steps < full[name].rl_steps and quick[name].sft_steps < full[name].sft_steps
        # validation must land on the last step, so the end point is the final model
        assert full[name].rl_steps % full[name].eval_steps == 0 and quick[name].rl_steps % quick[name].eval_steps == 0
        for path in (full[name].sft_config, *full[name].rl_configs.values()):
            assert (ROOT / path).is_file(), path


def test_configs_load(bench):
    from roll.config import load_config

    for spec in bench.env_specs(False).values():
        grpo = load_config(str(ROOT / spec.rl_configs["grpo"]))
        for tag in spec.val_tags:  # the multi-env chain reports every validation env
            assert tag in grpo.val_env_manager.tags
        if "ppo" not in spec.rl_configs:
            continue
        ppo = load_config(str(ROOT / spec.rl_configs["ppo"]))
        assert grpo.algorithm.adv_estimator == "gigpo" and "step_weight" in grpo.algorithm.adv_estimator_args
        # observation-only prompts: no instruction, no system prompt, the grid alone
        env = grpo.custom_envs[spec.tag]
        assert not env.include_instruction and env.system_prompt == "" and env.turn_template == "{observation}"
        assert ppo.algorithm.adv_estimator == "gae" and ppo.critic is not None
        assert set(grpo.val_decoding) == {"sampled", "greedy"} and grpo.val_env_manager.seed_offset == 100000
        assert spec.tag in grpo.custom_envs and grpo.train_env_manager.mode == "step"


def _rows(tag):
    rows = [{"step": 0, f"val/env/{tag}/success": 0.25, f"val_greedy/env/{tag}/success": 0.10}]
    for s in range(1, 5):
        rows.append({"step": s, f"env/{tag}/success": 0.2 + 0.1 * s})
    rows[-1].update({f"val/env/{tag}/success": 0.55, f"val_greedy/env/{tag}/success": 0.60})
    return rows


def test_curves_gains_and_plot(bench, tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows("FrozenLake")))
    c = bench.curves(bench.read_metrics(path), "FrozenLake")
    assert c["val_sampled"] == [(0, 0.25), (4, 0.55)] and c["val_greedy"] == [(0, 0.10), (4, 0.60)]
    assert [s for s, _ in c["train"]] == [1, 2, 3, 4]
    g = bench.gains(c)
    assert g["sampled_gain"] == pytest.approx(30.0) and g["greedy_gain"] == pytest.approx(50.0)
    assert g["gain"] == pytest.approx(30.0)  # the smaller of the two
    assert (g["greedy_peak"], g["greedy_peak_step"]) == (pytest.approx(60.0), 4.0)
    # a peak before the end: the earliest best round
    mid = {**c, "val_greedy": [(0, 0.1), (2, 0.7), (3, 0.7), (4, 0.6)]}
    assert (bench.gains(mid)["greedy_peak"], bench.gains(mid)["greedy_peak_step"]) == (pytest.approx(70.0), 2.0)
    png = tmp_path / "c" / "frozenlake.png"
    bench.plot({"grpo": c}, "t", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="step 0"):
        bench.gains(bench.curves(_rows("FrozenLake")[1:], "FrozenLake"))


def test_section_text_has_table_commands_and_result(bench):
    c = bench.curves(_rows("FrozenLake"), "FrozenLake")
    results = {"frozenlake": {"epsilon": 0.75, "wall_s": {"grpo": 600.0},
                              "algos": {"grpo": {**bench.gains(c), "curves": c}}}}
    text = bench.section_text(results, ["roll run x.yaml seed=42"], "RESULT frozenlake_gain_pp=30.0", "docs/learning_curves")
    assert text.startswith("## Learning\n")
    assert "| frozenlake | grpo | 0.75 | 10.0 | 60.0 | 25.0 | 55.0 | +30.0 | 600 | - |" in text  # no stage times
    results["frozenlake"]["wall_s"].update(demos=30.0, sft=270.0)
    timed = bench.section_text(results, [], "RESULT", "docs/learning_curves")
    assert "| +30.0 | 600 | 15 |" in timed  # the chain: (30 + 270 + 600) s
    assert "roll run x.yaml seed=42" in text and "RESULT frozenlake_gain_pp=30.0" in text
    assert "- frozenlake grpo: 0: 10 / 25, 4: 60 / 55" in text


def test_section_text_multi_env_table(bench):
    per_tag = {}
    for tag in ("FrozenLake", "LargerSokoban"):
        c = bench.curves(_rows(tag), tag)
        per_tag[tag] = {**bench.gains(c), "curves": c}
    multi = {"epsilon": 0.5, "wall_s": {"demos": 10.0, "sft": 290.0, "grpo": 900.0},
             "algos": {"grpo": {**per_tag["FrozenLake"], "per_tag": per_tag}}}
    text = bench.section_text({"multi": multi}, [], "RESULT", "docs/learning_curves")
    # the generalisation table has one row per validation env, and no row in the main table
    # start, peak (step) and end per decoding mode
    assert "| LargerSokoban | 10.0 | 60.0 (4) | 60.0 | 25.0 | 55.0 (4) | 55.0 | +30.0 |" in text
    assert "| multi | grpo |" not in text
    assert "RL wall 900 s, chain 20 min" in text and "- multi grpo LargerSokoban: 0: 10 / 25, 4: 60 / 55" in text


def test_run_cmd_jobs_limit_and_reuse(bench, tmp_path, monkeypatch):
    """--jobs N: at most N stage subprocesses at once; a reused stage does not run again."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    trace = tmp_path / "trace.txt"
    script = (f"import time; f = open({str(trace)!r}, 'a'); f.write('+'); f.flush(); "
              "time.sleep(0.4); f.write('-'); f.close()")
    monkeypatch.setattr(bench, "_SLOTS", threading.BoundedSemaphore(2))
    cmds = [[sys.executable, "-c", script, f"stage{i}"] for i in range(5)]
    with ThreadPoolExecutor(5) as pool:
        walls = list(pool.map(lambda i: bench.run_cmd(cmds[i], tmp_path / f"s{i}.log", [], reuse=True), range(5)))
    depth, peak = 0, 0
    for ch in trace.read_text():
        depth += 1 if ch == "+" else -1
        peak = max(peak, depth)
    assert len(trace.read_text()) == 10 and peak == 2
    assert all(w >= 0.4 for w in walls)
    # every stage left its marker: the same command is reused, not run
    again = bench.run_cmd(cmds[0], tmp_path / "s0.log", [], reuse=True)
    assert again == walls[0] and len(trace.read_text()) == 10
    assert bench.parse_args(["--jobs", "3"]).jobs == 3 and bench.parse_args([]).jobs == 1


def test_an_interrupted_checkpointing_stage_resumes_and_counts_its_earlier_time(bench, tmp_path):
    """A stage with save_steps= that was interrupted (its .running.json left behind) reruns under
    --reuse with resume_from_checkpoint=true, and its wall adds the earlier attempt's time up to
    its last checkpoint; the resume arguments do not enter the marker's command comparison nor the
    commands the docs show."""
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    seen = tmp_path / "argv.txt"
    cmd = [sys.executable, "-c", f"import sys; open({str(seen)!r}, 'w').write(' '.join(sys.argv[1:]))",
           "run", "x.yaml", "save_steps=5"]
    log = tmp_path / "stage.log"
    start = time.time() - 100
    log.with_suffix(".running.json").write_text(json.dumps({"start": start, "earlier_s": 7.0}))
    latest = out / "checkpoints" / "latest"
    latest.write_text("step-5")
    os.utime(latest, (start + 60, start + 60))  # the interrupted attempt checkpointed 60 s in
    shown: list[str] = []
    wall = bench.run_cmd(cmd, log, shown, reuse=True, out_dir=out)
    assert seen.read_text().endswith("save_steps=5 resume_from_checkpoint=true")
    assert 67.0 <= wall < 77.0 and not log.with_suffix(".running.json").exists()
    assert "resume_from_checkpoint" not in shown[0] and "save_steps" not in shown[0]
    # the marker matches the command as given, with or without the resume arguments
    assert bench.run_cmd(cmd[:-1], log, [], reuse=True, out_dir=out) == wall
    # without --reuse an earlier attempt is not resumed
    log.with_suffix(".running.json").write_text(json.dumps({"start": start, "earlier_s": 0.0}))
    bench.run_cmd(cmd, log, [], reuse=False, out_dir=out)
    assert seen.read_text().endswith("save_steps=5")


def test_merge_earlier_keeps_envs_not_run_now(bench, tmp_path):
    """`--envs multi` alone: the section still holds the frozenlake row an earlier run left."""
    (tmp_path / "frozenlake").mkdir()
    (tmp_path / "frozenlake" / "result.json").write_text(json.dumps({"epsilon": 0.5, "commands": ["roll run fl.yaml"]}))
    (tmp_path / "sokoban").mkdir()  # no result there: nothing to keep
    now = {"multi": {"epsilon": 0.5, "commands": ["roll run multi.yaml"]}}
    merged, commands = bench.merge_earlier(now, tmp_path, ["frozenlake", "sokoban", "multi"])
    assert list(merged) == ["frozenlake", "multi"] and merged["multi"] is now["multi"]
    assert commands == ["roll run fl.yaml", "roll run multi.yaml"]
    # an env run now replaces what an earlier run left
    merged, _ = bench.merge_earlier({"frozenlake": {"commands": []}}, tmp_path, ["frozenlake"])
    assert merged["frozenlake"] == {"commands": []}
    # a checkout without the earlier run's outputs: the record the docs keep
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "sokoban.json").write_text(json.dumps({"epsilon": 0.0, "commands": ["roll run sk.yaml"]}))
    merged, commands = bench.merge_earlier(now, tmp_path / "elsewhere", ["frozenlake", "sokoban", "multi"], kept)
    assert list(merged) == ["sokoban", "multi"] and commands == ["roll run sk.yaml", "roll run multi.yaml"]


def test_the_docs_keep_a_record_of_every_env_in_the_section(bench):
    """What a run of other envs merges back: each record in docs/learning_curves/ has what the
    section's table and RESULT line read."""
    kept = bench.ROOT / "docs" / "learning_curves"
    for name in ("frozenlake", "sokoban", "multi"):
        r = json.loads((kept / f"{name}.json").read_text())
        assert r["commands"] and "grpo" in r["algos"] and r["wall_s"]["grpo"] > 0
        g = r["algos"]["grpo"]
        assert g["gain"] == pytest.approx(min(g["greedy_end"] - g["greedy_start"], g["sampled_end"] - g["sampled_start"]), abs=0.051)


def test_reuse_reruns_a_stage_whose_config_or_inputs_changed(bench, tmp_path, monkeypatch):
    """A marker is reused only while the stage's composed config (its `defaults:` included) and
    its input files are as they were; the file it writes (`--out`) and its output_dir are not inputs."""
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    (tmp_path / "base.yaml").write_text("lr: 1.0\n")
    (tmp_path / "run.yaml").write_text("defaults: [base.yaml]\nsteps: 3\n")
    (tmp_path / "data.jsonl").write_text('{"a": 1}\n')
    runs = tmp_path / "runs.txt"
    script = f"import sys; open({str(runs)!r}, 'a').write('x'); open(sys.argv[-1], 'w').write('written')"
    cmd = [sys.executable, "-c", script, "run.yaml", "data.train_files=[data.jsonl]",
           f"output_dir={tmp_path / 'out'}", "--out", str(tmp_path / "made.jsonl")]
    log = tmp_path / "stage.log"

    def count():
        bench.run_cmd(cmd, log, [], reuse=True)
        return len(runs.read_text())

    assert count() == 1 and (tmp_path / "made.jsonl").read_text() == "written"
    assert count() == 1  # nothing changed (the file it wrote does not count): reused
    (tmp_path / "base.yaml").write_text("lr: 2.0\n")  # a base config edited
    assert count() == 2 and count() == 2
    (tmp_path / "data.jsonl").write_text('{"a": 2}\n')  # an earlier stage wrote other data
    assert count() == 3 and count() == 3
    # a marker from before digests existed is judged by its command alone
    marker = log.with_suffix(".done.json")
    done = json.loads(marker.read_text())
    del done["inputs"]
    marker.write_text(json.dumps(done))
    (tmp_path / "run.yaml").write_text("defaults: [base.yaml]\nsteps: 4\n")
    assert count() == 3
