"""Tracker backends: stdout, jsonl, tensorboard, wandb, swanlab.

Each backend is registered in ``roll.registry.TRACKERS`` and built with keyword arguments
``run_name, log_dir, config, project, resume_step`` plus its own options. ``requires`` names
the package a backend imports and the setup.py extra that installs it; ``create_tracker``
checks it before any backend starts.
"""
from __future__ import annotations

import html
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional, TextIO

from roll.registry import TRACKERS
from roll.tracking.base import finite_or_none
from roll.utils.console import is_verbose


def _fmt(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


@TRACKERS.register("stdout")
class StdoutTracker:
    """The full metric dump on the console: one line per logged step, metrics grouped by
    namespace, and sample texts (cut at ``max_text_chars``; 0 shows none).

    Shown with ``roll run --verbose`` (``ROLL_VERBOSE=1``) or ``full: true``; by default the
    console carries the short step lines of roll/utils/console.py instead, and this backend
    prints nothing (the dump of a step is about 2,000 characters). ``full: false`` keeps it
    silent even with --verbose."""

    requires = (None, None)

    def __init__(self, *, run_name: str, log_dir: str, config: dict, project: str,
                 resume_step: Optional[int] = None, max_text_chars: int = 2000, full: Optional[bool] = None,
                 stream: Optional[TextIO] = None):
        self.run_name = run_name
        self.max_text_chars = max_text_chars
        self.full = full
        self.stream = stream

    @property
    def shown(self) -> bool:
        return is_verbose() if self.full is None else bool(self.full)

    def _print(self, line: str) -> None:
        # Look sys.stdout up at each call: rich's live display swaps it while a bar is shown.
        print(line, file=self.stream or sys.stdout, flush=True)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        if not self.shown:
            return
        groups: dict[str, list[str]] = {}
        for key in sorted(metrics, key=lambda k: ("/" in k, k)):  # plain keys first
            ns, _, name = key.rpartition("/")
            groups.setdefault(ns, []).append(f"{name}={_fmt(metrics[key])}")
        body = " | ".join(f"{ns}: {' '.join(items)}" if ns else " ".join(items) for ns, items in groups.items())
        self._print(f"[step {step}] {body}")

    def log_text(self, key: str, text: str, step: int) -> None:
        if self.max_text_chars <= 0 or not self.shown:
            return
        shown = text if len(text) <= self.max_text_chars else text[: self.max_text_chars] + f"... [{len(text)} chars]"
        self._print(f"[step {step}] {key}:\n{shown}")

    def finish(self) -> None:
        pass


def _truncate_jsonl(path: Path, resume_step: int) -> None:
    """Keep only the records of steps <= resume_step (the resumed run rewrites the rest)."""
    kept = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by the crash we resume from
                continue
            if int(record.get("step", 0)) <= resume_step:
                kept.append(line if line.endswith("\n") else line + "\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)


@TRACKERS.register("jsonl")
class JsonlTracker:
    """``<log_dir>/metrics.jsonl`` (one record per step) and ``<log_dir>/samples.jsonl`` (texts)."""

    requires = (None, None)

    def __init__(self, *, run_name: str, log_dir: str, config: dict, project: str,
                 resume_step: Optional[int] = None):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.samples_path = self.dir / "samples.jsonl"
        if resume_step is not None:
            for path in (self.metrics_path, self.samples_path):
                if path.exists():
                    _truncate_jsonl(path, resume_step)
            mode = "a"
        else:
            mode = "w"  # a fresh run in this directory replaces the old records
        self._metrics = open(self.metrics_path, mode)
        self._samples = open(self.samples_path, mode)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        record = {"step": step, "time": round(time.time(), 3), **{k: finite_or_none(v) for k, v in metrics.items()}}
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()

    def log_text(self, key: str, text: str, step: int) -> None:
        self._samples.write(json.dumps({"step": step, "key": key, "text": text}, ensure_ascii=False) + "\n")
        self._samples.flush()

    def finish(self) -> None:
        self._metrics.close()
        self._samples.close()


@TRACKERS.register("tensorboard")
class TensorboardTracker:
    """Event files under ``<log_dir>/tensorboard`` (``tensorboard --logdir <log_dir>``)."""

    requires = ("tensorboard", None)

    def __init__(self, *, run_name: str, log_dir: str, config: dict, project: str,
                 resume_step: Optional[int] = None, flush_secs: int = 30):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step hides what an interrupted run wrote after the step we resume from.
        purge = resume_step + 1 if resume_step is not None else None
        self.writer = SummaryWriter(str(Path(log_dir) / "tensorboard"), purge_step=purge, flush_secs=flush_secs)
        if config and resume_step is None:
            self.writer.add_text("config", _code_block(json.dumps(config, indent=2, default=str)), 0)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def log_text(self, key: str, text: str, step: int) -> None:
        self.writer.add_text(key, _code_block(text), step)

    def finish(self) -> None:
        self.writer.flush()
        self.writer.close()


def _code_block(text: str) -> str:
    # TensorBoard renders text as markdown; indenting keeps grids and code verbatim.
    return "\n".join("    " + line for line in text.split("\n"))


def _previous_run_id(log_dir: str, backend: str, resume_step: Optional[int]) -> Optional[str]:
    """The hosted run id an interrupted job stored in ``<log_dir>/<backend>_run_id``, when resuming."""
    path = Path(log_dir) / f"{backend}_run_id"
    if resume_step is not None and path.exists():
        return path.read_text().strip() or None
    return None


def _store_run_id(log_dir: str, backend: str, run_id: Any) -> None:
    if run_id:
        path = Path(log_dir) / f"{backend}_run_id"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{run_id}\n")


@TRACKERS.register("wandb")
class WandbTracker:
    """Weights & Biases; ``WANDB_MODE=offline`` writes the run under ``<log_dir>/wandb`` for a later ``wandb sync``."""

    requires = ("wandb", "wandb")
    hosted = True

    def __init__(self, *, run_name: str, log_dir: str, config: dict, project: str,
                 resume_step: Optional[int] = None, **init_kwargs: Any):
        import wandb

        Path(log_dir).mkdir(parents=True, exist_ok=True)
        previous = _previous_run_id(log_dir, "wandb", resume_step)
        if previous:
            init_kwargs.setdefault("id", previous)
            init_kwargs.setdefault("resume", "allow")
        self._wandb = wandb
        self.run = wandb.init(
            project=init_kwargs.pop("project", project),
            name=init_kwargs.pop("name", run_name),
            dir=init_kwargs.pop("dir", log_dir),
            config=config,
            **init_kwargs,
        )
        _store_run_id(log_dir, "wandb", getattr(self.run, "id", None))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_text(self, key: str, text: str, step: int) -> None:
        self.run.log({key: self._wandb.Html(f"<pre>{html.escape(text)}</pre>")}, step=step)

    def log_table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        """Sample trajectories as a wandb Table (one row per trajectory)."""
        self.run.log({key: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

    def finish(self) -> None:
        self.run.finish()


@TRACKERS.register("swanlab")
class SwanlabTracker:
    """SwanLab; ``mode: local`` or ``offline`` (in tracker_kwargs.swanlab) keeps it on this machine."""

    requires = ("swanlab", "swanlab")
    hosted = True

    def __init__(self, *, run_name: str, log_dir: str, config: dict, project: str,
                 resume_step: Optional[int] = None, **init_kwargs: Any):
        import swanlab

        Path(log_dir).mkdir(parents=True, exist_ok=True)
        previous = _previous_run_id(log_dir, "swanlab", resume_step)
        if previous:
            init_kwargs.setdefault("id", previous)
            init_kwargs.setdefault("resume", "allow")
        self._swanlab = swanlab
        self.run = swanlab.init(
            project=init_kwargs.pop("project", project),
            experiment_name=init_kwargs.pop("experiment_name", run_name),
            logdir=init_kwargs.pop("logdir", str(Path(log_dir) / "swanlab")),
            config=config,
            **init_kwargs,
        )
        _store_run_id(log_dir, "swanlab", getattr(self.run, "id", None))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._swanlab.log(dict(metrics), step=step)

    def log_text(self, key: str, text: str, step: int) -> None:
        self._swanlab.log({key: self._swanlab.Text(text)}, step=step)

    def finish(self) -> None:
        self._swanlab.finish()
