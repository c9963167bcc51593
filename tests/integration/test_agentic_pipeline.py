"""The agentic pipeline end to end on the tiny model: every tiny CPU config through the CLI,
placements, checkpoints and the final Hugging Face model. Most runs are shared with other tests
(tests/conftest.py, tests/integration/conftest.py): a run's start-up costs more than its steps."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from roll.cli import main as roll_main
from roll.config.loader import load_raw

from .helpers import REPO, check_run, check_view

pytestmark = pytest.mark.integration

# chains (`stages:`, e.g. frozenlake_main_cpu.yaml) run in tests/integration/test_main_job.py;
# these run elsewhere with the same checks (each run start costs more than its steps):
# sokoban_cpu.yaml (README's main job) in test_main_job_command_runs_two_steps, multi_env_cpu.yaml
# in test_multi_env_config_two_steps (the run tests/viewer/test_browser.py also reads),
# agent_function_cpu.yaml in tests/endpoint/test_agent_function_cli.py and frozenlake_cpu.yaml
# (step mode, GiGPO) as the base of the main job's grpo stage in tests/integration/test_main_job.py
RUN_ELSEWHERE = ("base_cpu.yaml", "sokoban_cpu.yaml", "multi_env_cpu.yaml", "agent_function_cpu.yaml",
                 "frozenlake_cpu.yaml")
# configs that differ from base_cpu.yaml only in their env (and its token budget): one run plays
# all their envs, a group each (test_envs_of_several_configs_in_one_run); every config is still
# loaded, validated and planned on its own in tests/test_configs_validate.py and tests/test_configs_plan.py
ONE_RUN = ("code_cpu.yaml", "webshop_cpu.yaml")
TINY_AGENTIC = sorted(p for p in (REPO / "configs" / "agentic").glob("*_cpu.yaml")
                      if p.name not in RUN_ELSEWHERE + ONE_RUN and "stages" not in yaml.safe_load(p.read_text()))


def _without_idle_validation(config: Path) -> list[str]:
    """With eval_steps=0 the validation env workers only start and stop again. Where they would
    play the training env tags (every tiny config but multi_env_cpu.yaml) that start-up repeats
    what the training env workers do, so they are left out; the validation rounds themselves run
    in test_main_job_command_runs_two_steps and tests/integration/test_main_job.py."""
    raw = load_raw(config)
    val = raw.get("val_env_manager")
    if val is None or set(val.get("tags") or []) <= set(raw["train_env_manager"]["tags"]):
        return ["val_env_manager=null"]
    return []


def test_main_job_command_runs_two_steps(console_run, tmp_path):
    """README's main job, shortened: the real CLI in a subprocess (the run whose console
    tests/integration/test_console_output.py reads; tests/integration/conftest.py)."""
    out, proc = console_run
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = check_run(out, 2)
    assert "val/env/SimpleSokoban/success" in metrics[0]
    assert "val/env/SimpleSokoban/success" in metrics[2]
    assert sorted(p.name for p in (out / "trajectories").glob("step-*")) == ["step-000001.jsonl.gz", "step-000002.jsonl.gz"]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out / "final_model")
    tok = AutoTokenizer.from_pretrained(out / "final_model")
    assert model.config.vocab_size >= len(tok)
    check_view(out, tmp_path / "report.html")


def test_multi_env_config_two_steps(multi_env_run, tmp_path):
    """configs/agentic/multi_env_cpu.yaml, two training env tags and three validation tags
    (the session's ``multi_env_run``, tests/conftest.py; smaller batches, validation at 0 and 2)."""
    metrics = check_run(multi_env_run, 2)
    for step in (1, 2):
        assert {"env/SimpleSokoban/success", "env/FrozenLake/success"} <= set(metrics[step]), sorted(metrics[step])
    for tag in ("LargerSokoban", "SokobanDifferentSymbols", "FrozenLake"):
        assert f"val/env/{tag}/success" in metrics[0] and f"val/env/{tag}/success" in metrics[2], tag
    check_view(multi_env_run, tmp_path / "report.html")


@pytest.mark.parametrize("config", TINY_AGENTIC, ids=lambda p: p.stem)
def test_tiny_config_two_steps(config, tmp_path, ray_cluster):
    out = tmp_path / "run"
    rc = roll_main(["run", str(config), "max_steps=2", "save_steps=0", "eval_steps=0", "show_progress=false",
                    f"output_dir={out}", *_without_idle_validation(config)])
    assert rc == 0
    check_run(out, 2)
    check_view(out)


def test_envs_of_several_configs_in_one_run(tmp_path, ray_cluster):
    """The first of ``ONE_RUN`` with the envs of all of them, one group of 4 episodes each (the
    largest token budget of them, the first's)."""
    configs = [REPO / "configs" / "agentic" / name for name in ONE_RUN]
    envs = {tag: spec for c in configs for tag, spec in load_raw(c)["custom_envs"].items()}
    tags = [tag for c in configs for tag in load_raw(c)["train_env_manager"]["tags"]]
    assert len(tags) == len(envs) == len(configs)  # one env each
    assert load_raw(configs[0])["actor_infer"]["generating_args"]["max_new_tokens"] == max(
        load_raw(c)["actor_infer"]["generating_args"]["max_new_tokens"] for c in configs)
    out = tmp_path / "run"
    rc = roll_main(["run", str(configs[0]), "max_steps=2", "save_steps=0", "eval_steps=0", "show_progress=false",
                    f"output_dir={out}", "val_env_manager=null", f"rollout_batch_size={4 * len(tags)}",
                    *(f"custom_envs.{tag}={json.dumps(spec)}" for tag, spec in envs.items()),
                    f"train_env_manager.tags=[{','.join(tags)}]", "train_env_manager.group_size=4",
                    f"train_env_manager.num_groups_partition=[{','.join('1' * len(tags))}]"])
    assert rc == 0
    metrics = check_run(out, 2)
    for step in (1, 2):
        assert {f"env/{tag}/success" for tag in tags} <= set(metrics[step]), sorted(metrics[step])
    check_view(out)


def test_disaggregated_placement_completes(resumable_run):
    """The trainer and the inference worker on device slots of their own: the session's
    ``resumable_run`` (tests/integration/conftest.py; RESUMABLE in helpers.py maps them to slots
    0 and 1). Both on one slot (colocated) is the layout of
    tests/faults/test_pipeline_faults.py::test_killed_workers_mid_run_are_restarted_and_the_run_completes,
    which makes the same checks."""
    metrics = check_run(resumable_run, 3)
    # the weights of step 1 reached the inference worker before step 2's rollouts
    assert metrics[2]["rollout/policy_version"] == 1.0
