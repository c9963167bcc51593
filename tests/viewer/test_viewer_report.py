"""`roll view` / `roll plot` on run directories written here: the report is one offline file,
model text cannot escape its element, old and partial runs get a note instead of a crash,
plots are real PNGs, the server answers on localhost."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from roll.cli import main as roll_main
from roll.viewer import records as R
from roll.viewer.plots import write_plots
from roll.viewer.report import build_report, embed_json
from roll.viewer.run_data import (
    RunDirError,
    curve_panels,
    load_run,
    pick_steps,
)

EVIL = '</script><script>window.__pwned=1</script><!-- <img src=x onerror=alert(1)>'


def metrics_rows(steps: int = 3) -> list[dict]:
    rows = [{"step": 0, "time": 100.0, "val/env/Sok/success": 0.0, "val_greedy/env/Sok/success": 0.0}]
    for s in range(1, steps + 1):
        rows.append({
            "step": s, "time": 100.0 + 10 * s, "env/Sok/success": 0.1 * s, "env/Lake/success": 0.2,
            "env/Sok/return": -0.3 + s, "env/Sok/num_turns": 3, "env/Sok/invalid_action_rate": 1 - 0.2 * s,
            "env/Sok/token_nll": 1.2 - 0.1 * s,
            "actor/ppo_kl": 0.01 * s, "actor/entropy": 2.0 - 0.1 * s, "actor/loss": float("nan") if s == 2 else 0.5,
            "timing/step": 10.0, "timing/rollout": 6.0, "timing/actor_train": 3.0, "timing/rollout/env_share": 0.1,
        })
    return rows


def episode(step: int, group: str, k: int, success: bool, model_text: str = "<answer>Left</answer>") -> dict:
    tokens = {"ids": [1, 2, 3, 4], "text": ["<|im_start|>", "grid", "<answer>", "Left"], "mask": [0, 0, 1, 1],
              "logprobs": [0.0, 0.0, -0.1, -2.3], "advantages": [0.0, 0.0, 0.5, 0.5], "truncated": False}
    turns = [R.turn("Turn 1:\n#P_O#", model_text, -0.1, 0, {"actions": ["Left"], "valid": True, "error": ""})]
    return R.record("agentic", step, id=f"{group}/{k}", env_tag=group.split("/")[0], env_id="roll/Sokoban-v0",
                    group_id=group, seed=1, success=success, **{"return": 1.0 if success else -0.1},
                    advantage=0.5 if success else -0.5, trained=True, num_turns=1, terminated=True,
                    truncated=False, turns=turns, tokens=tokens)


def make_run(root: Path, steps: int = 3, dumps: bool = True) -> Path:
    run = root / "run"
    (run / "logs").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"pipeline": "agentic", "exp_name": "demo", "max_steps": steps,
                                                     "pretrain": "roll-tiny://tiny",
                                                     "algorithm": {"adv_estimator": "grpo"}}))
    with open(run / "logs" / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in metrics_rows(steps))  # NaN written as the bare token NaN, as json.dumps does
    if dumps:
        for s in range(1, steps + 1):
            R.write_step(run, s, [episode(s, "Sok/0", 0, True), episode(s, "Sok/0", 1, False, EVIL),
                                  episode(s, "Lake/0", 0, False)])
    return run


def embedded(html: str) -> dict:
    m = re.search(r'<script id="roll-data" type="application/json">(.*?)</script>', html, re.DOTALL)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def test_report_is_one_offline_file_with_the_run_data(tmp_path):
    run = make_run(tmp_path)
    path = build_report(run)
    assert path == run / "report.html"
    html = path.read_text()
    # self-contained: no external script, stylesheet, image or font
    assert not re.search(r'<(script|img|link|iframe)[^>]+(src|href)=', html, re.IGNORECASE)
    outside_refs = re.findall(r"https?://[^\s\"']+", html.replace("http://www.w3.org/2000/svg", ""))
    assert outside_refs == []  # (the SVG namespace is a name, never fetched)
    data = embedded(html)
    assert data["summary"]["name"] == "demo" and data["summary"]["steps_logged"] == 3
    assert data["summary"]["wall_s"] == 30.0
    ids = {p["id"] for p in data["panels"]}
    assert {"success", "return", "length", "invalid", "token_nll", "kl", "entropy", "loss", "timing", "step_time"} <= ids
    nll = next(p for p in data["panels"] if p["id"] == "token_nll")
    assert [s["name"] for s in nll["series"]] == ["Sok train"]  # a tag without the metric has no line
    success = next(p for p in data["panels"] if p["id"] == "success")
    names = {s["name"] for s in success["series"]}
    assert names == {"Sok train", "Lake train", "Sok val (sampled)", "Sok val (greedy)"}
    assert len(data["trajectories"]) == 9
    assert data["config_text"] == (run / "config.yaml").read_text()


def test_model_text_cannot_break_out_of_the_data_element(tmp_path):
    html = build_report(make_run(tmp_path)).read_text()
    assert "window.__pwned" in html  # the text is there ...
    assert EVIL not in html and "</script><script>window.__pwned" not in html  # ... but never as markup
    assert html.count("</script>") == 2  # the data element's and the script's own
    back = [t for t in embedded(html)["trajectories"] if t["turns"][0]["model_text"] == EVIL]
    assert len(back) == 3  # and it decodes to exactly what the model wrote
    assert "<" not in embed_json({"t": "</script>"})


def test_nan_metrics_become_gaps_not_invalid_json(tmp_path):
    data = embedded(build_report(make_run(tmp_path)).read_text())
    loss = next(p for p in data["panels"] if p["id"] == "loss")["series"][0]
    assert loss["x"] == [1, 3] and loss["y"] == [0.5, 0.5]


def test_timing_shares_are_fractions_of_the_step():
    panels = {p["id"]: p for p in curve_panels(read_metrics_rows())}
    shares = {s["name"]: s["y"] for s in panels["timing"]["series"]}
    assert shares == {"actor_train": [0.3, 0.3, 0.3], "rollout": [0.6, 0.6, 0.6]}


def read_metrics_rows() -> list[dict]:
    return [r for r in metrics_rows() if r["step"] > 0]


def test_run_without_dumps_gets_a_note(tmp_path):
    data = embedded(build_report(make_run(tmp_path, dumps=False)).read_text())
    assert data["trajectories"] == [] and "No trajectories" in data["no_trajectories_note"]
    assert data["panels"]


def test_old_text_dumps_are_shown_as_text(tmp_path):
    run = make_run(tmp_path, dumps=False)
    (run / "trajectories").mkdir()
    (run / "trajectories" / "step-000001.txt").write_text("## ep tag=Sok return=0.0\nhello")
    data = embedded(build_report(run).read_text())
    assert data["text_dumps"] == {"1": "## ep tag=Sok return=0.0\nhello"}
    assert "text dumps only" in data["no_trajectories_note"]


def test_a_run_that_has_only_started(tmp_path):
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "config.yaml").write_text("pipeline: sft\nexp_name: fresh\n")
    data = embedded(build_report(run).read_text())
    assert data["panels"] == [] and data["trajectories"] == [] and data["summary"]["steps_logged"] == 0


def test_broken_lines_and_files_are_reported_not_fatal(tmp_path):
    run = make_run(tmp_path, steps=2)
    with open(run / "logs" / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "env/Sok/succ')  # a run killed mid-write
    (run / "trajectories" / "step-000002.jsonl.gz").write_bytes(b"not gzip")
    data = load_run(run)
    assert [r["step"] for r in data.metrics] == [0, 1, 2]
    assert {t["step"] for t in data.trajectories} == {1}
    assert any("unreadable line" in s for s in data.skipped)
    assert any("step-000002.jsonl.gz" in s for s in data.skipped)
    notes = embedded(build_report(run).read_text())["notes"]
    assert len(notes) == 2


def test_not_a_run_dir(tmp_path, capsys):
    with pytest.raises(RunDirError, match="not a roll run directory"):
        load_run(tmp_path)
    assert roll_main(["view", str(tmp_path / "missing")]) == 1
    assert "is not a directory" in capsys.readouterr().err


def test_report_keeps_a_bounded_number_of_steps(tmp_path):
    run = make_run(tmp_path, steps=5)
    data = embedded(build_report(run, max_trajectory_steps=2).read_text())
    assert sorted({t["step"] for t in data["trajectories"]}) == [1, 5]
    assert any("2 of 5 dumped steps" in n for n in data["notes"])
    assert pick_steps([1, 2, 3, 4, 5, 6, 7], 3) == [1, 4, 7]
    assert pick_steps([1, 2], None) == [1, 2] and pick_steps([1, 2], 0) == []


def test_view_cli_writes_the_report(tmp_path, capsys):
    run = make_run(tmp_path)
    out = tmp_path / "elsewhere" / "r.html"
    assert roll_main(["view", str(run), "--out", str(out), "--max-steps", "0"]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    assert len(embedded(out.read_text())["trajectories"]) == 9


def test_plots_are_png_files(tmp_path, capsys):
    run = make_run(tmp_path)
    written = write_plots(run)
    names = {p.name for p in written}
    assert {"success.png", "kl.png", "timing.png", "learning_curves.png"} <= names
    for p in written:
        assert p.parent == run / "plots" and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 2000
    for p in written:
        p.unlink()
    assert roll_main(["plot", str(run)]) == 0  # roll plot redraws them
    assert f"plots in {run / 'plots'}" in capsys.readouterr().out
    assert (run / "plots" / "learning_curves.png").exists()


def test_plot_of_a_run_without_metrics_writes_nothing(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.yaml").write_text("pipeline: agentic\n")
    assert write_plots(run) == [] and not (run / "plots").exists()


def test_server_serves_the_current_report_on_localhost(tmp_path):
    from roll.viewer.server import make_server, serve_in_thread

    run = make_run(tmp_path, steps=1)
    server = make_server(run, port=0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        serve_in_thread(server)
        first = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        assert embedded(first)["summary"]["steps_logged"] == 1
        with open(run / "logs" / "metrics.jsonl", "a") as f:  # the run goes on ...
            f.write(json.dumps({"step": 2, "env/Sok/success": 1.0}) + "\n")
        again = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        assert embedded(again)["summary"]["steps_logged"] == 2  # ... and a reload shows it
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/secret.txt", timeout=10)
        assert e.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_a_chain_folder_gets_one_report_per_pipeline_stage(tmp_path, capsys):
    chain = tmp_path / "chain"
    (chain / "demos").mkdir(parents=True)
    (chain / "demos" / "config.yaml").write_text("pipeline: agentic\n")
    make_run(tmp_path).rename(chain / "rl")
    (chain / "chain_state.json").write_text(json.dumps({"stages": {
        "demos": {"status": "done", "kind": "demos"}, "rl": {"status": "done", "kind": "run"},
        "never_ran": {"status": "pending", "kind": "run"}}}))
    assert roll_main(["view", str(chain)]) == 0
    out = capsys.readouterr().out
    assert f"report of stage rl: {chain / 'rl' / 'report.html'}" in out
    assert (chain / "rl" / "report.html").is_file() and not (chain / "demos" / "report.html").exists()
    assert roll_main(["view", str(chain), "--out", str(tmp_path / "x.html")]) != 0
    assert "is a chain's folder" in capsys.readouterr().err
