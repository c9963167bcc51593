"""Reading a run directory for the report and the plots: resolved config, metrics, curves,
trajectory dumps (structured ``.jsonl.gz`` or the text dumps of older runs).

Nothing here needs Ray, torch or the run's model: a run directory copied to a laptop is enough.
"""
from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from roll.errors import RollError
from roll.utils.logging import get_logger
from roll.viewer.records import SCHEMA_VERSION, TRAJECTORY_DIR

logger = get_logger("roll.viewer")

_STEP_FILE = re.compile(r"^step-(\d+)\.(jsonl\.gz|txt)$")


class RunDirError(RollError):
    """The path is not a run directory the viewer can read."""


@dataclass
class RunData:
    """Everything the report shows about one run."""

    run_dir: Path
    config: dict[str, Any] = field(default_factory=dict)
    config_text: str = ""
    metrics: list[dict[str, Any]] = field(default_factory=list)
    """One merged record per logged step, in step order."""
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    """Structured records (roll/viewer/records.py), in step order."""
    text_dumps: dict[int, str] = field(default_factory=dict)
    """Step -> text of an older run's ``step-NNNNNN.txt`` dump."""
    trajectory_steps: list[int] = field(default_factory=list)
    """Steps with a structured dump (all of them, also those the report leaves out)."""
    picked_steps: list[int] = field(default_factory=list)
    """The steps among them whose dumps were read (``max_trajectory_steps``)."""
    skipped: list[str] = field(default_factory=list)
    """What could not be read, and why (shown in the report; nothing is dropped silently)."""

    @property
    def kind(self) -> str:
        return str(self.config.get("pipeline") or (self.trajectories[0]["kind"] if self.trajectories else "unknown"))

    @property
    def name(self) -> str:
        return str(self.config.get("exp_name") or self.run_dir.name)


def _log_dir(run_dir: Path, config: dict[str, Any]) -> Path:
    configured = (config.get("tracking") or {}).get("log_dir")
    return Path(configured) if configured else run_dir / "logs"


def read_metrics(path: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """metrics.jsonl -> one record per step (several lines of one step merged, later wins)."""
    rows: dict[int, dict[str, Any]] = {}
    bad = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                step = int(rec["step"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                bad += 1  # e.g. the last line of a run killed mid-write
                continue
            rows.setdefault(step, {}).update(rec)
    if bad and skipped is not None:
        skipped.append(f"{path}: {bad} unreadable line(s) skipped")
    return [rows[s] for s in sorted(rows)]


def _read_dump(path: Path) -> list[dict[str, Any]]:
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if not isinstance(rec, dict) or rec.get("schema") != SCHEMA_VERSION:
                    raise ValueError(f"not a schema-{SCHEMA_VERSION} trajectory record")
                out.append(rec)
    return out


def pick_steps(steps: list[int], limit: int | None) -> list[int]:
    """At most ``limit`` steps spread evenly over ``steps``, first and last included
    (``None``: all of them; 0: none)."""
    if limit is None or len(steps) <= limit:
        return list(steps)
    if limit <= 0:
        return []
    if limit == 1:
        return [steps[-1]]
    idx = sorted({round(i * (len(steps) - 1) / (limit - 1)) for i in range(limit)})
    return [steps[i] for i in idx]


def load_run(run_dir: Path | str, max_trajectory_steps: int | None = 40) -> RunData:
    """Read a run directory, with the trajectories of at most ``max_trajectory_steps`` dumped
    steps (None: all; 0: none). Missing parts (no metrics yet, no dumps) are fine; a path
    that holds none of config.yaml, logs/ or trajectories/ is a :class:`RunDirError`."""
    run_dir = Path(run_dir).expanduser().resolve()
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory (expected a run's output_dir)")
    data = RunData(run_dir=run_dir)
    cfg_path = run_dir / "config.yaml"
    if cfg_path.exists():
        data.config_text = cfg_path.read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(data.config_text)
            data.config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as e:
            data.skipped.append(f"{cfg_path}: not valid YAML ({e})")
    metrics_path = _log_dir(run_dir, data.config) / "metrics.jsonl"
    if metrics_path.exists():
        data.metrics = read_metrics(metrics_path, data.skipped)
    traj_dir = run_dir / TRAJECTORY_DIR
    if not (cfg_path.exists() or metrics_path.exists() or traj_dir.is_dir()):
        raise RunDirError(f"{run_dir} has no config.yaml, logs/metrics.jsonl or trajectories/: not a roll run directory")
    structured: dict[int, Path] = {}
    if traj_dir.is_dir():
        for p in sorted(traj_dir.iterdir()):
            m = _STEP_FILE.match(p.name)
            if not m:
                continue
            step = int(m.group(1))
            if m.group(2) == "txt":
                data.text_dumps[step] = p.read_text(encoding="utf-8", errors="replace")
            else:
                structured[step] = p
    data.trajectory_steps = sorted(structured)
    data.picked_steps = pick_steps(data.trajectory_steps, max_trajectory_steps)
    for step in data.picked_steps:
        try:
            data.trajectories += _read_dump(structured[step])
        except (OSError, EOFError, zlib.error, json.JSONDecodeError, ValueError) as e:
            data.skipped.append(f"{structured[step]}: {type(e).__name__}: {e}")
    for note in data.skipped:
        logger.warning("%s", note)
    return data


# ---- curves ------------------------------------------------------------------------------------
_SPLIT = r"(?P<split>val[^/]*/)?"
TAG_PANELS: list[tuple[str, str, list[str]]] = [
    ("success", "Success rate", [rf"^{_SPLIT}env/(?P<tag>[^/]+)/success$", rf"^{_SPLIT}reward/(?P<tag>[^/]+)/success$"]),
    ("return", "Return (agentic) / reward score (RLVR)",
     [rf"^{_SPLIT}env/(?P<tag>[^/]+)/return$", rf"^{_SPLIT}reward/(?P<tag>[^/]+)/score$"]),
    ("length", "Episode length (turns) / response length (tokens)",
     [rf"^{_SPLIT}env/(?P<tag>[^/]+)/num_turns$", rf"^{_SPLIT}rollout/(?P<tag>[^/]+)/response_length$"]),
    ("invalid", "Invalid action rate", [rf"^{_SPLIT}env/(?P<tag>[^/]+)/invalid_action_rate$"]),
    ("token_nll", "Token NLL (sampled: the policy's entropy per token)",
     [rf"^{_SPLIT}env/(?P<tag>[^/]+)/token_nll$"]),
]
"""Per-env-tag panels: (id, title, key patterns with ``tag`` and an optional val split)."""
GLOBAL_PANELS: list[tuple[str, str, list[str]]] = [
    ("kl", "KL", [r"^actor/ppo_kl$", r"^actor/ppo_kl_max$", r"^actor/ref_kl$", r"^actor/kl_loss$"]),
    ("entropy", "Entropy", [r"^actor/entropy$"]),
    ("loss", "Loss", [r"^actor/loss$", r"^critic/loss$", r"^sft/nll$", r"^val/sft_nll$"]),
    ("step_time", "Seconds per step", [r"^timing/step$"]),
]


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _series(metrics: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in metrics:
        y = _finite(row.get(key))
        if y is not None:
            xs.append(int(row["step"]))
            ys.append(y)
    return xs, ys


def _split_name(split: str | None) -> str:
    if not split:
        return "train"
    s = split.rstrip("/")
    return {"val": "val (sampled)", "val_greedy": "val (greedy)"}.get(s, s)


def curve_panels(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Learning-curve panels, the one description both the HTML report and the PNG plots draw:
    ``[{"id", "title", "series": [{"name", "tag", "split", "key", "x", "y"}]}]``. Panels with
    no data are left out; per-tag panels have one series per (tag, split)."""
    keys = sorted({k for row in metrics for k in row if k not in ("step", "time")})
    panels = []
    for pid, title, patterns in TAG_PANELS + GLOBAL_PANELS:
        series = []
        for key in keys:
            for pat in patterns:
                m = re.match(pat, key)
                if not m:
                    continue
                x, y = _series(metrics, key)
                if x:
                    gd = m.groupdict()
                    tag = gd.get("tag") or ""
                    split = _split_name(gd.get("split")) if "split" in gd else "train"
                    name = f"{tag} {split}" if tag else key
                    series.append({"name": name, "tag": tag, "split": split, "key": key, "x": x, "y": y})
                break
        if series:
            panels.append({"id": pid, "title": title, "series": series})
    shares = timing_shares(metrics)
    if shares:
        panels.append({"id": "timing", "title": "Share of step time per phase", "series": shares})
    return panels


def timing_shares(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase (``timing/<phase>`` seconds, one level deep), its share of ``timing/step``."""
    phases = sorted({k for row in metrics for k in row
                     if k.startswith("timing/") and k.count("/") == 1 and k != "timing/step"})
    out = []
    for key in phases:
        xs, ys = [], []
        for row in metrics:
            total, part = _finite(row.get("timing/step")), _finite(row.get(key))
            if total and part is not None:
                xs.append(int(row["step"]))
                ys.append(part / total)
        if xs:
            out.append({"name": key.split("/", 1)[1], "tag": "", "split": "train", "key": key, "x": xs, "y": ys})
    return out


def summary(data: RunData) -> dict[str, Any]:
    """The run's headline facts for the report's summary table."""
    cfg = data.config
    rows = data.metrics
    times = [r["time"] for r in rows if isinstance(r.get("time"), (int, float))]
    last_train = next((r for r in reversed(rows) if int(r["step"]) > 0), {})
    latest_ckpt = None
    ckpt_dir = data.run_dir / "checkpoints"
    if ckpt_dir.is_dir():
        steps = sorted(int(p.name[5:]) for p in ckpt_dir.glob("step-*") if p.name[5:].isdigit())
        latest_ckpt = steps[-1] if steps else None
    headline = {k: v for k, v in last_train.items() if re.match(r"^(val[^/]*/)?(env|reward)/[^/]+/(success|return|score)$", k)}
    return {
        "name": data.name,
        "pipeline": data.kind,
        "model": cfg.get("pretrain", ""),
        "run_dir": str(data.run_dir),
        "max_steps": cfg.get("max_steps"),
        "steps_logged": max((int(r["step"]) for r in rows), default=0),
        "wall_s": round(max(times) - min(times), 1) if len(times) > 1 else None,
        "adv_estimator": (cfg.get("algorithm") or {}).get("adv_estimator"),
        "final_model": (data.run_dir / "final_model").is_dir(),
        "latest_checkpoint": latest_ckpt,
        "trajectory_steps": len(data.trajectory_steps),
        "trajectories_shown": len(data.trajectories),
        "last": {k: headline[k] for k in sorted(headline)},
    }
