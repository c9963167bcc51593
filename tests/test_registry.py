"""The generic registry: lazy entry points, duplicates, listing, suggestions."""
from __future__ import annotations

import sys
import textwrap

import pytest

from roll.registry import REGISTRIES, TRACKERS, Registry, RegistryError, load_entry_point


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """A module on sys.path that nothing has imported yet, and that records being imported."""
    name = f"roll_test_plugin_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        IMPORTED = True

        def gae(values):
            """Generalised advantage estimation (test double of a real estimator)."""
            return [v * 2 for v in values]

        class Nested:
            class Inner:
                pass
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_entry_point_is_imported_lazily(plugin_module):
    reg = Registry("thing")
    reg.register("gae", f"{plugin_module}:gae")
    assert plugin_module not in sys.modules  # registering imports nothing
    fn = reg.get("gae")
    assert plugin_module in sys.modules
    assert fn([1, 2]) == [2, 4]
    assert reg.get("gae") is fn  # loaded once, then cached


def test_nested_attribute_entry_point(plugin_module):
    inner = load_entry_point(f"{plugin_module}:Nested.Inner")
    assert inner.__qualname__ == "Nested.Inner"


def test_decorator_registers_and_returns_the_object():
    reg = Registry("thing")

    @reg.register("double", doc="doubles")
    def double(x):
        return 2 * x

    assert double(2) == 4 and reg.get("double") is double
    assert reg.entries()[0].doc == "doubles"


def test_duplicate_id_is_an_error():
    reg = Registry("thing")
    reg.register("a", "pkg.mod:one")
    with pytest.raises(RegistryError, match="duplicate thing id 'a': already registered as pkg.mod:one"):
        reg.register("a", "pkg.mod:two")
    reg.register("a", "pkg.mod:one")  # the same entry again (a re-imported module) is fine

    def f():
        pass

    def g():
        pass

    reg.register("f", f)
    with pytest.raises(RegistryError, match="duplicate"):
        reg.register("f", g)


def test_listing_sorted_with_docs(plugin_module):
    reg = Registry("thing")
    reg.register("zeta", f"{plugin_module}:gae", doc="last")
    reg.register("alpha", load_entry_point(f"{plugin_module}:gae"))
    assert reg.ids() == ["alpha", "zeta"]
    entries = reg.entries()
    assert entries[0].doc == "Generalised advantage estimation (test double of a real estimator)."
    assert entries[0].entry_point == f"{plugin_module}:gae"
    assert entries[1].entry_point == f"{plugin_module}:gae" and entries[1].doc == "last"
    assert "alpha" in reg and "beta" not in reg


def test_unknown_id_suggests_closest():
    reg = Registry("advantage estimator")
    reg.register("reinforce_pp", "m:a")
    reg.register("grpo", "m:b")
    with pytest.raises(RegistryError) as err:
        reg.get("reinforce_ppp")
    assert "unknown advantage estimator 'reinforce_ppp'; did you mean 'reinforce_pp'?" in str(err.value)
    with pytest.raises(RegistryError, match=r"registered: grpo, reinforce_pp"):
        reg.get("zzz")


def test_autoload_module_runs_once_on_first_lookup(tmp_path, monkeypatch):
    name = f"roll_test_autoload_{tmp_path.name.replace('-', '_')}"
    reg = Registry("thing", autoload=[name])
    (tmp_path / f"{name}.py").write_text(
        "import sys\nfrom roll.registry import Registry\n"
        f"reg = sys.modules['{__name__}']._CURRENT\n"
        "reg.register('builtin', 'math:sqrt', doc='square root')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    globals()["_CURRENT"] = reg
    try:
        assert reg.ids() == ["builtin"]
        assert reg.get("builtin")(9.0) == 3.0
        assert name in sys.modules
    finally:
        sys.modules.pop(name, None)
        globals().pop("_CURRENT", None)


def test_bad_entry_points():
    reg = Registry("thing")
    reg.register("missing", "roll_no_such_package_xyz.mod:thing")
    with pytest.raises(RegistryError, match="needs a package that is not installed"):
        reg.get("missing")
    with pytest.raises(RegistryError, match="must look like 'package.module:attr'"):
        load_entry_point("no_colon_here")


def test_project_registries():
    assert set(REGISTRIES) == {"strategies", "advantages", "losses", "rewards", "filters", "trackers", "pipelines"}
    assert {"stdout", "jsonl", "tensorboard", "wandb", "swanlab"} <= set(TRACKERS.ids())
    assert {"agentic", "rlvr", "sft"} <= set(REGISTRIES["pipelines"].ids())


def test_autoload_is_complete_before_any_thread_reads_the_registry(tmp_path, monkeypatch):
    """Envs are made in a thread pool: a second thread asking while the first is still importing
    the autoload module must wait for it, not see an empty registry (it reported
    "unknown tool 'calculator' (registered: none)" for every roll/Tools-v0 env but the first)."""
    import sys
    import threading

    from roll.registry import Registry

    (tmp_path / "slow_builtins.py").write_text(
        "import time\nfrom tests_slow_registry import REG\ntime.sleep(0.3)\nREG.register('calc', 'math:sqrt')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("tool", autoload=["slow_builtins"])
    holder = type(sys)("tests_slow_registry")
    holder.REG = reg
    monkeypatch.setitem(sys.modules, "tests_slow_registry", holder)
    results = []

    def get():
        try:
            results.append(reg.get("calc"))
        except Exception as e:  # the failure under test, collected for the assertion
            results.append(e)

    threads = [threading.Thread(target=get) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    import math

    assert results == [math.sqrt] * 4
