"""Fixtures of the sandbox tests (helpers live in sandbox_helpers.py)."""
from __future__ import annotations

import pytest
from sandbox_helpers import ROOMY, TIGHT, Contained

from roll.sandbox import Sandbox


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """Small limits but room on the clock: for programs that must succeed on a loaded machine."""
    return Sandbox(ROOMY)


@pytest.fixture
def contained() -> Contained:
    """Runs hostile programs under the tight limits."""
    return Contained(Sandbox(TIGHT))
