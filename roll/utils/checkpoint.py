"""Atomic, rotating checkpoints.

A checkpoint is a directory ``<root>/step-<N>`` written first under a temporary name and
renamed into place only when complete, followed by an atomic update of ``<root>/latest``.
A crash (even SIGKILL) while writing leaves at worst a ``.tmp-*`` directory, which is ignored
and cleaned up later; the previous checkpoint stays the latest usable one.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from roll.utils.logging import get_logger

logger = get_logger(__name__)

COMPLETE_MARKER = "COMPLETE"
STATE_FILE = "driver_state.json"
RNG_FILE = "driver_rng.pkl"
_STEP_RE = re.compile(r"^step-(\d+)$")


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointManager:
    """Writes ``step-N`` directories atomically and keeps the newest ``max_to_keep``."""

    def __init__(self, root: str | os.PathLike, max_to_keep: int = 3):
        self.root = Path(root)
        self.max_to_keep = max_to_keep
        self.root.mkdir(parents=True, exist_ok=True)

    def step_dir(self, step: int) -> Path:
        return self.root / f"step-{step}"

    def save(self, step: int, write: Callable[[Path], Optional[dict[str, Any]]], state: Optional[dict[str, Any]] = None) -> Path:
        """Call ``write(tmp_dir)`` to fill the checkpoint (it may return extra JSON state),
        then publish it atomically."""
        self._clean_partial()
        tmp = self.root / f".tmp-step-{step}-{os.getpid()}-{int(time.time() * 1000)}"
        tmp.mkdir(parents=True)
        extra = write(tmp) or {}
        with open(tmp / RNG_FILE, "wb") as f:
            pickle.dump(rng_state(), f)
        payload = {"step": step, "time": time.time(), **(state or {}), **extra}
        (tmp / STATE_FILE).write_text(json.dumps(payload, indent=2, default=str))
        (tmp / COMPLETE_MARKER).write_text(str(step))
        _fsync_dir(tmp)
        final = self.step_dir(step)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        _write_atomic(self.root / "latest", final.name)
        self._rotate()
        logger.info("checkpoint saved: %s", final)
        return final

    def complete_checkpoints(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.root.iterdir():
            m = _STEP_RE.match(p.name)
            if m and (p / COMPLETE_MARKER).exists():
                out.append((int(m.group(1)), p))
        return sorted(out)

    def latest(self) -> Optional[Path]:
        """The newest complete checkpoint, or None."""
        pointer = self.root / "latest"
        if pointer.exists():
            candidate = self.root / pointer.read_text().strip()
            if (candidate / COMPLETE_MARKER).exists():
                return candidate
        done = self.complete_checkpoints()
        return done[-1][1] if done else None

    @staticmethod
    def read_state(path: str | os.PathLike) -> dict[str, Any]:
        path = Path(path)
        if not (path / COMPLETE_MARKER).exists():
            raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE_MARKER} marker)")
        state = json.loads((path / STATE_FILE).read_text())
        with open(path / RNG_FILE, "rb") as f:
            state["rng"] = pickle.load(f)
        return state

    def _rotate(self) -> None:
        if self.max_to_keep <= 0:
            return
        done = self.complete_checkpoints()
        for _, p in done[: -self.max_to_keep]:
            shutil.rmtree(p, ignore_errors=True)

    def _clean_partial(self) -> None:
        for p in self.root.glob(".tmp-step-*"):
            shutil.rmtree(p, ignore_errors=True)
