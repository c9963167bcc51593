"""Fixtures of the sandbox tests (helpers live in sandbox_helpers.py)."""
from __future__ import annotations

import pytest
from sandbox_helpers import ROOMY, TIGHT, Contained

from roll.sandbox import Sandbox
from roll.sandbox.init_build import ENV_CHOICE

# Every test of these modules runs once with the compiled init and once with the Python one
# (both implement one contract; the configs of the tests leave `init: auto`).
INIT_KINDS = ("c", "python")
RUN_WITH_EACH_INIT = {"test_sandbox_adversarial", "test_sandbox_basics", "test_sandbox_hardening", "test_cgroup"}


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.rsplit(".", 1)[-1] in RUN_WITH_EACH_INIT:
        metafunc.parametrize("init_kind", INIT_KINDS, indirect=True)


@pytest.fixture(autouse=True)
def init_kind(request, monkeypatch) -> str | None:
    """The init forced for this test (through ROLL_SANDBOX_INIT), or None: the default."""
    kind = getattr(request, "param", None)
    if kind is not None:
        monkeypatch.setenv(ENV_CHOICE, kind)
    return kind


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """Small limits but room on the clock: for programs that must succeed on a loaded machine."""
    return Sandbox(ROOMY)


@pytest.fixture
def contained() -> Contained:
    """Runs hostile programs under the tight limits."""
    return Contained(Sandbox(TIGHT))
