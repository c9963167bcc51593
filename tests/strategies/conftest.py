"""Shared fixtures for the strategy tests."""
from __future__ import annotations

import pytest
import torch.distributed as dist

from roll.strategies.torch_train import init_process_group
from roll.workers.base import free_port


@pytest.fixture(scope="session")
def single_rank_group():
    """A one-rank gloo process group for the in-process strategy tests, kept for the whole
    session: DeepSpeed caches the groups it derives from the first default group it sees, so a
    group destroyed and created again between modules breaks every later DeepSpeed engine."""
    own = not dist.is_initialized()
    if own:
        init_process_group(0, 1, "127.0.0.1", free_port(), timeout_s=60)
    yield
    if own and dist.is_initialized():
        dist.destroy_process_group()
