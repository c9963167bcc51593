"""Shared fixtures: one local Ray cluster per test session, and the cached tiny model."""
from __future__ import annotations

import logging
import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import pytest

_MARKERS = {"unit", "integration", "slow", "gpu", "vllm"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not _MARKERS.intersection(m.name for m in item.iter_markers()):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster shared by the whole test session (ray.init takes seconds)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # always a private cluster, never one another process started
            num_cpus=8,
            include_dashboard=False,
            namespace="roll-tests",
            log_to_driver=True,
            runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}},
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Path of the cached tiny model + tokenizer (built once, loaded with from_pretrained)."""
    from roll.models.tiny import tiny_model_path

    return tiny_model_path("tiny")


@pytest.fixture(scope="session")
def small_model_dir():
    from roll.models.tiny import tiny_model_path

    return tiny_model_path("small")


@pytest.fixture(scope="session")
def multi_env_run(tmp_path_factory, ray_cluster):
    """A real 2-step run of configs/agentic/multi_env_cpu.yaml (two training env tags, three
    validation tags) with validation at steps 0 and 2, cut to one group of 4 episodes per
    training tag: the tiny-config run of tests/integration/test_agentic_pipeline.py and the
    report tests/viewer/test_browser.py opens. Readers only; a test that writes works on a copy."""
    from pathlib import Path

    from roll.cli import main as roll_main

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("multi_env") / "run"
    rc = roll_main(["run", str(repo / "configs/agentic/multi_env_cpu.yaml"), "max_steps=2", "eval_steps=2",
                    "save_steps=0", "show_progress=false", "rollout_batch_size=8", "val_batch_size=3",
                    "train_env_manager.num_groups_partition=[1,1]", f"output_dir={out}"])
    assert rc == 0
    return out


@pytest.fixture
def log_calls(monkeypatch):
    """``calls = log_calls(module.logger)``: what that logger is asked to log during the test, as
    ``(level, message)`` pairs, e.g. ``("WARNING", "...")``. Recorded at the call, so it does not
    depend on the logging state earlier tests leave behind (logger levels, disabled loggers, a
    global ``logging.disable``, handlers), which made captured records come and go in the full
    suite while each file passed alone."""
    def watch(logger: logging.Logger) -> list[tuple[str, str]]:
        calls: list[tuple[str, str]] = []
        for level in ("debug", "info", "warning", "error"):
            def record(msg, *args, _level=level.upper(), **kwargs):
                calls.append((_level, str(msg) % args if args else str(msg)))
            monkeypatch.setattr(logger, level, record)
        return calls
    return watch
