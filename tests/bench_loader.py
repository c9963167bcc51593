"""Loading a bench script (bench/<name>.py) as a module in tests. Imported by name from any
test folder (pytest puts tests/, the folder of the root conftest.py, on sys.path)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py, executed as the module ``bench_<name>``. bench/ goes on sys.path first
    (the benches import bench/common.py and each other by name), and the module is registered
    in sys.modules (dataclasses look their module up there)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
