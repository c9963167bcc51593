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
def roll_logs(caplog):
    """``caplog`` for roll's own loggers, INFO and above. The ``roll`` logger does not propagate
    to the root logger (roll/utils/logging.py), and earlier tests in the session may have raised
    a ``roll.*`` logger's level, disabled it or stopped its propagation: for the test, every ``roll``
    logger is enabled and passes INFO on to ``roll``, which holds caplog's handler. A global
    ``logging.disable`` left behind (vLLM's ``suppress_logging`` context, in a test that did not
    finish it) is lifted for the test too."""
    disabled_below = logging.root.manager.disable
    logging.disable(logging.NOTSET)
    top = logging.getLogger("roll")
    children = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.startswith("roll.")]
    saved = [(lg, lg.level, lg.disabled, lg.propagate) for lg in [top, *children]]
    attached = caplog.handler in top.handlers
    if not attached:
        top.addHandler(caplog.handler)
    top.setLevel(logging.INFO)
    top.disabled = False
    for lg in children:
        lg.setLevel(logging.NOTSET)
        lg.disabled, lg.propagate = False, True
    caplog.handler.setLevel(logging.INFO)
    try:
        yield caplog
    finally:
        if not attached:
            top.removeHandler(caplog.handler)
        for lg, level, disabled, propagate in saved:
            lg.setLevel(level)
            lg.disabled, lg.propagate = disabled, propagate
        logging.disable(disabled_below)
