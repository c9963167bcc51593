"""The repository layout: `roll/` never imports `envs/` or `pipelines/` code statically."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = ("roll.envs", "roll.pipelines", "envs", "pipelines")


def _imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """Absolute names of every module a file imports (relative imports resolved)."""
    package = list(path.relative_to(root).parts[:-1])  # a module's and an __init__'s package alike
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from roll import envs` imports roll.envs too.
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _violations(path: Path, root: Path = REPO) -> list[str]:
    out = []
    for line, module in _imported_modules(path, root):
        if any(module == f or module.startswith(f + ".") for f in FORBIDDEN):
            out.append(f"{path.relative_to(root)}:{line} imports {module}")
    return out


def test_roll_never_imports_envs_or_pipelines():
    files = sorted((REPO / "roll").rglob("*.py"))
    assert len(files) > 10
    problems = [v for f in files for v in _violations(f)]
    assert not problems, "roll/ must load envs and pipelines by entry-point string:\n" + "\n".join(problems)


def test_the_scan_catches_each_form(tmp_path):
    pkg = tmp_path / "roll" / "sub"
    pkg.mkdir(parents=True)
    cases = {
        "a.py": "import roll.envs.sokoban\n",
        "b.py": "from roll.pipelines.agentic import AgenticPipeline\n",
        "c.py": "from roll import envs\n",
        "d.py": "from ..envs import parsing\n",
        "e.py": "import pipelines\n",
        "ok.py": "import roll.config\nfrom roll.registry import PIPELINES\nimport importlib\nimportlib.import_module('roll.envs')\n",
    }
    for name, text in cases.items():
        (pkg / name).write_text(text)
    for name in cases:
        assert bool(_violations(pkg / name, root=tmp_path)) == (name != "ok.py"), name


@pytest.mark.parametrize("name", ["roll", "envs", "pipelines", "configs", "tests", "docs"])
def test_top_level_folders(name):
    assert (REPO / name).is_dir()


@pytest.mark.parametrize("package,folder", [("roll.envs", "envs"), ("roll.pipelines", "pipelines")])
def test_envs_and_pipelines_install_under_roll(package, folder):
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve().parent == (REPO / folder).resolve()
