"""Algorithm tests run tiny tensors: one intra-op thread is ~10x faster than many threads
contending on a shared CPU, and the previous setting is restored afterwards."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
