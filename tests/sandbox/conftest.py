"""Fixtures of the sandbox tests (helpers live in sandbox_helpers.py)."""
from __future__ import annotations

import pytest
from sandbox_helpers import TIGHT, Contained

from roll.sandbox import Sandbox


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    return Sandbox(TIGHT)


@pytest.fixture
def contained(sandbox) -> Contained:
    return Contained(sandbox)
