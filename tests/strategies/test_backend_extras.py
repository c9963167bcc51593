"""Every optional engine behind a strategy is imported through one guard: where it is missing,
the strategy fails with an ImportError that names the extra installing it, and the package
(registry included) imports without it."""
from __future__ import annotations

import importlib
import importlib.util

import pytest

from roll.strategies.base import import_backend

BACKENDS = [  # (strategy module, its import guard, the engine's top-level package, the extra)
    ("roll.strategies.megatron", "_import_megatron", "megatron", "megatron"),
    ("roll.strategies.sglang", "_import_sglang", "sglang", "sglang"),
    ("roll.strategies.vllm", "_import_vllm", "vllm", "vllm"),
]


@pytest.mark.parametrize("module,guard,engine,extra", BACKENDS, ids=[b[2] for b in BACKENDS])
def test_a_missing_engine_names_its_extra(module, guard, engine, extra):
    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is installed")
    with pytest.raises(ImportError, match=f"`{extra}` extra"):
        getattr(importlib.import_module(module), guard)()


def test_import_backend_returns_the_module_or_names_the_extra():
    assert import_backend("json", "demo", "demo", "").dumps([1]) == "[1]"
    with pytest.raises(ImportError, match=r"the demo strategy needs roll_no_such_engine .*`demo-extra` extra on CPU"):
        import_backend("roll_no_such_engine", "demo", "demo-extra", "on CPU")
