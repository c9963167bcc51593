"""What a person sees while a run trains.

By default ``roll run`` prints one line per step (step/total, per env tag success, return and
invalid-action rate, or per RLVR domain reward and accuracy, or the SFT loss; KL, entropy,
seconds per step and the ETA), one line per validation round, and on a terminal a progress bar
that updates in place. On a pipe or CI log there is no bar (and so no carriage returns): just the
lines. The full metric dump is the ``stdout`` tracker's (roll/tracking/backends.py), shown with
``roll run --verbose``, which sets ``ROLL_VERBOSE=1``; every metric always goes to the file
trackers (``logs/metrics.jsonl``, TensorBoard, wandb).

:func:`quiet_process` is the per-process hook (driver and every Ray worker, through
``roll.utils.logging.setup_logging``) that keeps library progress bars off the console unless
``ROLL_VERBOSE=1``; :func:`quiet_console` keeps roll's INFO records in ``run.log`` only.
"""
from __future__ import annotations

import logging
import math
import os
import re
import shutil
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Mapping, Optional, TextIO

VERBOSE_ENV = "ROLL_VERBOSE"


def is_verbose() -> bool:
    """True when the run asked for everything on the console (``roll run --verbose``)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# ---------------------------------------------------------------------------- formatting
def format_value(value: float) -> str:
    """Short and fixed-looking: rates with 2 decimals, larger values with 3 significant digits."""
    if not math.isfinite(value):
        return str(value)
    if value != 0 and abs(value) < 0.01:
        return f"{value:.1e}"
    if abs(value) <= 10:
        return f"{value:.2f}"
    if abs(value) < 1000:
        return f"{value:.1f}"
    return f"{value:.3g}"


def format_duration(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h07m``."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# (metric suffix, label) per env tag (``env/<tag>/...``) and per RLVR domain (``reward/<tag>/...``)
_ENV_FIELDS = (("success", "success"), ("return", "return"), ("invalid_action_rate", "invalid"))
_DOMAIN_FIELDS = (("score", "reward"), ("success", "acc"), ("failed", "failed"))
_SHOWN_IF_NONZERO = {"failed"}  # counted failures are news only when there are some


def _per_tag(metrics: Mapping[str, float], prefix: str, fields: tuple[tuple[str, str], ...]) -> list[str]:
    """``<tag> success 0.25 return -0.10 invalid 0.40`` for every tag under ``prefix``, in tag order."""
    suffixes = "|".join(re.escape(s) for s, _ in fields)
    pattern = re.compile(rf"^{re.escape(prefix)}(?P<tag>[^/]+)/(?P<field>{suffixes})$")
    tags: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        m = pattern.match(key)
        if m:
            tags.setdefault(m["tag"], {})[m["field"]] = value
    out = []
    for tag in sorted(tags):
        shown = [f"{label} {format_value(v) if suffix not in _SHOWN_IF_NONZERO else int(v)}"
                 for suffix, label in fields if (v := tags[tag].get(suffix)) is not None
                 and (v or suffix not in _SHOWN_IF_NONZERO)]
        if shown:
            out.append(f"{tag} {' '.join(shown)}")
    return out


def _learning_part(metrics: Mapping[str, float], prefix: str = "") -> list[str]:
    """What the run is learning on: env tags (agentic), else domains (RLVR), else the loss (SFT)."""
    parts = _per_tag(metrics, f"{prefix}env/", _ENV_FIELDS)
    if not parts:
        parts = _per_tag(metrics, f"{prefix}reward/", _DOMAIN_FIELDS)
    if not parts:
        for key, label in (("sft/nll", "loss"), ("sft_nll", "nll"), ("actor/loss", "loss")):
            if f"{prefix}{key}" in metrics:
                parts.append(f"{label} {format_value(metrics[prefix + key])}")
                break
    return parts


def _optimisation_part(metrics: Mapping[str, float]) -> list[str]:
    """KL (to the reference when there is one, else between old and new policy) and entropy."""
    out = []
    if "actor/ref_kl" in metrics:
        out.append(f"kl {format_value(metrics['actor/ref_kl'])}")
    elif "actor/ppo_kl" in metrics:
        out.append(f"ppo_kl {format_value(metrics['actor/ppo_kl'])}")
    if "actor/entropy" in metrics:
        out.append(f"entropy {format_value(metrics['actor/entropy'])}")
    if "critic/vf_loss" in metrics:
        out.append(f"vf_loss {format_value(metrics['critic/vf_loss'])}")
    failed = metrics.get("rollout/episodes_failed", 0.0)
    if failed:  # counted failures are news: they are what a person must notice
        out.append(f"failed {int(failed)}")
    return out


def step_line(metrics: Mapping[str, float], step: int, total: int, step_s: Optional[float] = None,
              eta_s: Optional[float] = None) -> str:
    """One console line for a finished training step ``step`` of ``total``."""
    width = len(str(total))
    parts = [f"step {step:>{width}}/{total}"]
    learning = _learning_part(metrics)
    if learning:
        parts.append("  ".join(learning))
    opt = _optimisation_part(metrics)
    if opt:
        parts.append(" ".join(opt))
    timing = []
    if step_s is not None:
        timing.append(f"{step_s:.1f} s/step")
    if eta_s is not None and step < total:
        timing.append(f"ETA {format_duration(eta_s)}")
    if timing:
        parts.append(" ".join(timing))
    return " | ".join(parts)


_VAL_PREFIX = re.compile(r"^(val(?:_[a-z0-9]+)?)/")


def validation_line(metrics: Mapping[str, float], step: int, total: int) -> Optional[str]:
    """One console line for a validation round (``val/`` sampled, ``val_<mode>/`` e.g. greedy),
    or None when ``metrics`` hold no validation result."""
    prefixes = sorted({m[1] for m in map(_VAL_PREFIX.match, metrics) if m}, key=lambda p: (p != "val", p))
    parts = []
    for prefix in prefixes:
        learning = _learning_part(metrics, prefix + "/")
        if learning:
            mode = "sampled" if prefix == "val" else prefix[len("val_"):]
            parts.append(f"{mode}: {'  '.join(learning)}")
    if not parts:
        return None
    width = len(str(total))
    return " | ".join([f"val  {step:>{width}}/{total}", *parts])


class StepClock:
    """Seconds per step and the ETA, from the wall time between steps of this process (the
    mean of the last ``window`` steps, so a slow first step or a change of pace fades out)."""

    def __init__(self, window: int = 10, now=time.perf_counter):
        self._now = now
        self._last = now()
        self._times: deque[float] = deque(maxlen=window)

    def tick(self) -> float:
        """A step finished: its duration."""
        t = self._now()
        took, self._last = t - self._last, t
        self._times.append(took)
        return took

    def eta(self, done: int, total: int) -> Optional[float]:
        if not self._times:
            return None
        return max(0, total - done) * sum(self._times) / len(self._times)


def stream_is_terminal(stream: Optional[TextIO] = None) -> bool:
    stream = stream or sys.stdout
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class RunConsole:
    """The step loop's console: step and validation lines, and a progress bar on a terminal.

    Use as a context manager around the step loop; ``bar=False`` (``show_progress: false``)
    or a stdout that is not a terminal gives the lines without the bar.
    """

    def __init__(self, name: str, total: int, start: int = 0, bar: bool = True, stream: Optional[TextIO] = None):
        self.name, self.total, self.start = name, int(total), int(start)
        self.stream = stream
        self.clock = StepClock()
        self._bar_wanted = bar and stream is None and stream_is_terminal()
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> "RunConsole":
        self.clock = StepClock()
        if self._bar_wanted:
            from roll.utils.logging import progress

            self._progress = progress(True, transient=True)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.name, total=self.total, completed=self.start, status="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def print(self, line: str) -> None:
        if self._progress is not None:  # above the bar, which stays at the bottom
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.stream or sys.stdout, flush=True)

    def step(self, done: int, metrics: Mapping[str, float], status: str = "") -> None:
        """Training step ``done`` (1-based) finished with ``metrics``; a validation round that
        ran with it gets its own line."""
        took = self.clock.tick()
        self.print(step_line(metrics, done, self.total, took, self.clock.eta(done, self.total)))
        self.validation(done, metrics)
        if self._progress is not None:
            self._progress.update(self._task, completed=done, status=status)

    def validation(self, step: int, metrics: Mapping[str, float]) -> None:
        line = validation_line(metrics, step, self.total)
        if line is not None:
            self.print(line)


def _shown_path(path: Path) -> str:
    """Relative to the working directory when inside it (shorter to read and to paste)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_done_line(output_dir: Path, steps: int, wall_s: float) -> str:
    """The run's last console line: how long it took and where its results are."""
    out = Path(output_dir)
    parts = [f"done: {steps} steps in {format_duration(wall_s)}"]
    if (out / "final_model").is_dir():
        parts.append(f"model {_shown_path(out / 'final_model')}")
    if (out / "plots").is_dir():
        parts.append(f"curves {_shown_path(out / 'plots')}")
    parts.append(f"report: roll view {_shown_path(out)}")
    if (out / "run.log").exists():
        parts.append(f"log {_shown_path(out / 'run.log')}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------- worker logs
WORKER_LOGS_LINK = "logs/ray"
WORKER_LOGS_COPY = "logs/workers"
_owned_logs: Optional[Path] = None
"""This Ray session's log folder, when this process started the (local) cluster."""


def own_worker_logs() -> Optional[Path]:
    """Called after this process started a local Ray cluster: its workers' logs are the run's
    to keep (:func:`link_worker_logs`, :func:`copy_worker_logs`). None if Ray does not say where."""
    global _owned_logs
    try:
        from ray._private.worker import _global_node  # no public API names the session's folder

        _owned_logs = Path(_global_node.get_logs_dir_path())
    except (ImportError, AttributeError) as e:
        logger().warning("cannot find this Ray session's log folder (%s); worker logs stay in Ray's temp dir", e)
        _owned_logs = None
    return _owned_logs


def link_worker_logs(run_dir: Path) -> Optional[Path]:
    """``<run_dir>/logs/ray``: a link to the workers' log files, made when the run starts, so
    that they are found from the run directory even if the driver is killed."""
    if _owned_logs is None:
        return None
    link = Path(run_dir) / WORKER_LOGS_LINK
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if not link.is_symlink():
            return None  # not ours: leave it
        link.unlink()
    link.symlink_to(_owned_logs, target_is_directory=True)
    logger().info("worker logs: %s (%s)", link, _owned_logs)
    return link


def copy_worker_logs(run_dir: Path, max_bytes: int = 512 * 2**20) -> Optional[Path]:
    """Copy the workers' non-empty stdout/stderr files into ``<run_dir>/logs/workers/<session>``
    at the end of a run, so the run directory keeps them when Ray's temp dir is cleaned. Past
    ``max_bytes`` in all the copy stops (logged); the link still points at the rest."""
    if _owned_logs is None or not _owned_logs.is_dir():
        return None
    dest = Path(run_dir) / WORKER_LOGS_COPY / _owned_logs.parent.name
    copied = 0
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for path in sorted(_owned_logs.glob("worker-*")):
            size = path.stat().st_size
            if not size or path.suffix not in (".out", ".err"):
                continue
            if copied + size > max_bytes:
                logger().warning("worker logs over %d MiB: the rest stay in %s", max_bytes >> 20, _owned_logs)
                break
            shutil.copyfile(path, dest / path.name)
            copied += size
    except OSError as e:  # the run's own result stands; the link still leads to the logs
        logger().warning("could not copy worker logs into %s: %s", dest, e)
        return None
    return dest


def logger():
    from roll.utils.logging import get_logger

    return get_logger("roll.console")


# ---------------------------------------------------------------------------- quiet processes
def quiet_process() -> None:
    """Keep library progress bars off this process's output (driver or Ray worker) unless
    ``ROLL_VERBOSE=1``: Hugging Face's weight-loading and shard-writing bars, which every
    model load and save would print. Library warnings are fixed where they arise instead (none
    is filtered: a run of every shipped CPU config prints none). The environment variable
    reaches libraries imported later; the ones already imported are told directly."""
    if is_verbose():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


class _ConsoleLevel(logging.Filter):
    """Roll's log records on the console: warnings and errors; INFO too with --verbose; the
    level of ROLL_LOG_LEVEL when set. Read at each record: --verbose is known only once the
    command line is parsed, after the handler exists."""

    def filter(self, record: logging.LogRecord) -> bool:
        level = os.environ.get("ROLL_LOG_LEVEL")
        if level:
            threshold = logging.getLevelName(level.upper())
            threshold = threshold if isinstance(threshold, int) else logging.INFO
        else:
            threshold = logging.INFO if is_verbose() else logging.WARNING
        return record.levelno >= threshold


def quiet_console() -> None:
    """`roll run`'s driver: roll's INFO records go to ``run.log`` (and the console with
    --verbose), library progress bars are off (:func:`quiet_process`)."""
    from roll.utils.logging import setup_logging

    setup_logging()
    for handler in logging.getLogger("roll").handlers:
        if isinstance(handler, logging.FileHandler):
            continue
        if not any(isinstance(f, _ConsoleLevel) for f in handler.filters):
            handler.addFilter(_ConsoleLevel())
    quiet_process()
