"""bench/tool_task.py: the docs section names the chain's settings as the config gives them
(dotted override keys or nested), and bench/symbols_probe.py's cosine measure (the chain and the
probe run the CLI and real models: see `python bench/tool_task.py --quick`)."""
import json
from pathlib import Path

import pytest
import torch
import yaml
from bench_loader import load_bench

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tool_task():
    return load_bench("tool_task")


def test_setting_reads_dotted_and_nested_keys(tool_task):
    o = {"actor_train": {"training_args": {"lr": 3e-4}}, "algorithm.early_stop_kl": 0.02}
    assert tool_task.setting(o, "actor_train.training_args.lr") == 3e-4
    assert tool_task.setting(o, "algorithm.early_stop_kl") == 0.02
    assert tool_task.setting(o, "algorithm.gamma") is None
    o["actor_train.training_args.lr"] = 1e-4  # a dotted override wins over the nested value it replaces
    assert tool_task.setting(o, "actor_train.training_args.lr") == 1e-4
    assert tool_task.schedule({}) == "" and "cosine" in tool_task.schedule({"actor_train.training_args.lr_scheduler_type": "cosine"})
    assert tool_task.kl_bound({}) == "" and "0.02" in tool_task.kl_bound(o)


def test_section_describes_the_config_it_ran(tool_task):
    grpo = yaml.safe_load((ROOT / tool_task.CONFIG).read_text())["stages"]["grpo"]["overrides"]
    lr = tool_task.setting(grpo, "actor_train.training_args.lr")
    stages = {k: {"wall_s": 1.0} for k in tool_task.STAGES}
    run = {"seed": 42, "episodes": 128, "base_episodes": 128, "summary": {"stages": stages}, "wall_s": 6.0, "load_before": "1", "load_after": "1",
           "demo_success": 50.0, "untrained_greedy": 0.0, "untrained_sampled": 0.0, "start_greedy": 0.0,
           "start_sampled": 46.1, "end_greedy": 100.0, "end_sampled": 96.1, "gain_greedy": 100.0, "gain_sampled": 50.0,
           "rounds": [{"step": 0, "greedy": 0.0, "sampled": 0.461, "calls_greedy": 0.0, "calls_sampled": 0.48},
                      {"step": 64, "greedy": 1.0, "sampled": 0.961, "calls_greedy": 1.0, "calls_sampled": 1.0}]}
    text = tool_task.section_text([run], "python bench/tool_task.py", "RESULT tool_gain_pp=50")
    assert f"lr {lr:g}" in text
    assert "| 42 |" in text and "+100.0 / +50.0" in text and "0.00 -> 1.00" in text
    assert "64: 100 / 96" in text and text.rstrip().endswith("```")
    json.dumps(run)  # the record is plain JSON


def test_symbols_probe_mean_cosine():
    probe = load_bench("symbols_probe")
    emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert probe.mean_cos(emb, [0, 1]) == pytest.approx(1.0)
    assert probe.mean_cos(emb, [0, 2]) == pytest.approx(0.0)
    assert probe.mean_cos(emb, [0, 1, 3]) == pytest.approx(-1.0 / 3)
