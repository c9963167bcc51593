"""One logging setup for the driver and every worker, and rich progress bars."""
from __future__ import annotations

import logging
import os
import sys

_CONFIGURED = False
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str | int | None = None) -> None:
    """Configure the `roll` logger once per process (level from ROLL_LOG_LEVEL, default INFO)."""
    global _CONFIGURED
    if _CONFIGURED:
        return
    _CONFIGURED = True
    level = level or os.environ.get("ROLL_LOG_LEVEL", "INFO")
    logger = logging.getLogger("roll")
    logger.setLevel(level)
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.propagate = False
    from roll.utils.console import quiet_process

    quiet_process()  # library progress bars, in the driver and in every Ray worker


def get_logger(name: str) -> logging.Logger:
    setup_logging()
    if not name.startswith("roll"):
        name = f"roll.{name}"
    return logging.getLogger(name)


def progress(enabled: bool = True, **kwargs):
    """A rich Progress for long work; disabled (a no-op bar) when not wanted."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        disable=not enabled,
        **kwargs,
    )
