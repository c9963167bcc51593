"""Shared fixtures: one local Ray cluster per test session, and the cached tiny model."""
from __future__ import annotations

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
