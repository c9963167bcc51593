"""What every bench shares: the docs/benchmarks.md section writer and the RESULT line.

A bench's full run rewrites its own ``## `` section of docs/benchmarks.md and nothing else; a
``--quick`` run (the same comparison, small) prints and never touches the docs, so a smoke run
cannot replace measured tables with small-run numbers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def replace_section(old: str, text: str) -> str:
    """``old`` with the section that ``text`` is (its first line is the ``## `` header)
    replaced, or appended; other sections untouched."""
    header = text.splitlines()[0].rstrip()
    if not header.startswith("## "):
        raise ValueError(f"a section starts with its '## ' header, got {header!r}")
    lines = old.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == header), None)
    body = text.rstrip("\n") + "\n"
    if start is None:
        return old.rstrip("\n") + "\n\n" + body
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "".join(lines[:start]) + body + ("\n" if end < len(lines) else "") + "".join(lines[end:])


def write_section(text: str, *, quick: bool, no_docs: bool = False, doc: Path = DOCS) -> bool:
    """Rewrite this bench's section of ``doc``, unless the run is ``--quick`` or ``--no-docs``.
    Returns whether the file was written."""
    if quick or no_docs:
        print(f"(docs not written: {'--quick run' if quick else '--no-docs'})")
        return False
    old = doc.read_text() if doc.exists() else "# Benchmarks\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(replace_section(old, text))
    return True


def result_line(figures: Mapping[str, Any]) -> str:
    """``RESULT key=value ...``: the headline figures, the last line of every bench."""
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    for key in figures:
        if not key or any(c.isspace() or c == "=" for c in key):
            raise ValueError(f"bad RESULT key {key!r}")
    return "RESULT " + " ".join(f"{k}={fmt(v)}" for k, v in figures.items())
