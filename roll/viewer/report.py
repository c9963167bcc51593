"""The self-contained HTML report of a run (``roll view``).

One file: the page template, stylesheet and script shipped in ``roll/viewer/static/`` are
inlined, and the run's data is embedded as JSON, so the report opens offline, from any
directory, with no server and no network. The script draws the charts itself (SVG).
"""
from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

from roll.viewer.run_data import RunData, curve_panels, load_run, summary

_MARKER = re.compile(r"@@(CSS|JS|DATA|TITLE)@@")


def _asset(name: str) -> str:
    return resources.files("roll.viewer.static").joinpath(name).read_text(encoding="utf-8")


def _json_safe(x: Any) -> Any:
    """NaN/inf (JSON.parse rejects them) become null, everywhere in the structure."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def embed_json(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``<`` at all, so
    no text from a model or an env (``</script>``, ``<!--``) can end or change the element."""
    text = json.dumps(_json_safe(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def report_data(data: RunData) -> dict[str, Any]:
    notes = list(data.skipped)
    if not data.trajectories:
        if data.text_dumps:
            note = ("No structured trajectories: this run wrote text dumps only (older format), shown below "
                    "as text.")
        elif data.trajectory_steps:
            note = "No readable structured trajectories (see the notes above)."
        else:
            note = ("No trajectories: this run wrote no dumps (tracking.dump_trajectories is 0, or no step has "
                    "finished yet).")
    else:
        note = ""
    if len(data.picked_steps) < len(data.trajectory_steps):
        notes.append(f"Trajectories of {len(data.picked_steps)} of {len(data.trajectory_steps)} dumped steps are included "
                     f"(spread over the run); raise --max-steps to include more.")
    return {
        "summary": summary(data),
        "config_text": data.config_text,
        "panels": curve_panels(data.metrics),
        "trajectories": data.trajectories,
        "text_dumps": {str(k): v for k, v in data.text_dumps.items()},
        "notes": notes,
        "no_trajectories_note": note,
    }


def render_html(data: RunData) -> str:
    parts = {
        "CSS": _asset("report.css"),
        "JS": _asset("report.js"),
        "DATA": embed_json(report_data(data)),
        "TITLE": html.escape(data.name),
    }
    # one pass: text substituted in is never scanned for markers again
    return _MARKER.sub(lambda m: parts[m.group(1)], _asset("report.html"))


def build_report(run_dir: Path | str, out: Path | str | None = None, max_trajectory_steps: int | None = 40) -> Path:
    """Write the report of ``run_dir`` to ``out`` (default ``RUN_DIR/report.html``)."""
    data = load_run(run_dir, max_trajectory_steps=max_trajectory_steps)
    path = Path(out).expanduser() if out else data.run_dir / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(path)
    return path
