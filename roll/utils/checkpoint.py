"""Atomic, verified, rotating checkpoints that never run code when loaded.

A checkpoint is a directory ``<root>/step-<N>``:

- the roles' files (written by the workers, e.g. ``actor_train/model.safetensors``),
- ``driver_state.json`` (the step and the pipeline's own JSON state),
- ``driver_rng.json`` (the driver's Python, NumPy and torch generator states),
- ``MANIFEST.json`` (every other file with its size and sha256), written after all of them,
- ``COMPLETE``, written last.

It is filled under a temporary name and renamed into place only when complete, then
``<root>/latest`` is updated atomically. A crash (even SIGKILL) while writing leaves at worst a
``.tmp-*`` directory, which is ignored and removed by the next save; a write that fails (a full
disk) removes its temporary directory and raises :class:`CheckpointError`; the previous
checkpoint is never touched.

Loading goes through :meth:`CheckpointManager.find_resumable` / :func:`verify_checkpoint` in
the driver, before any worker reads a file: a checkpoint whose files do not match its manifest
(truncated, edited), that has no ``COMPLETE`` marker, or that holds pickled Python objects is
skipped with a warning naming it and why, and the newest good one is used. Nothing here or in
the strategies unpickles arbitrary objects: JSON for driver state, safetensors for weights and
``torch.load(weights_only=True)`` (:func:`safe_torch_load`) for optimizer state.
"""
from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import random
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from roll.errors import CheckpointError
from roll.utils.logging import get_logger

logger = get_logger(__name__)

COMPLETE_MARKER = "COMPLETE"
STATE_FILE = "driver_state.json"
RNG_FILE = "driver_rng.json"
MANIFEST_FILE = "MANIFEST.json"
MANIFEST_VERSION = 1
_STEP_RE = re.compile(r"^step-(\d+)$")
# Files an older roll wrote with pickle: such a checkpoint is refused, never read.
_PICKLE_SUFFIXES = (".pkl", ".pickle")
# Files torch.save wrote: their pickle opcodes are inspected (not executed) in the driver.
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")
# The few non-tensor classes DeepSpeed stores in its optimizer files (roll/strategies/deepspeed.py
# loads them with torch.load(weights_only=True) and exactly these allowed).
DEEPSPEED_SAFE_GLOBALS = (
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
)


# ---- driver RNG state as JSON ------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    """The driver's generator states as plain JSON values."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {"name": name, "keys": [int(k) for k in keys], "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached)},
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii"),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (a malformed state is a CheckpointError)."""
    try:
        py, npy = state["python"], state["numpy"]
        random.setstate((int(py["version"]), tuple(int(x) for x in py["state"]), py["gauss"]))
        np.random.set_state((str(npy["name"]), np.asarray(npy["keys"], dtype=np.uint32), int(npy["pos"]),
                             int(npy["has_gauss"]), float(npy["cached_gaussian"])))
        raw = bytearray(base64.b64decode(state["torch"], validate=True))
        torch.set_rng_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{RNG_FILE}: not a valid generator state ({type(e).__name__}: {e})") from None


# ---- files ---------------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    _write_durable(tmp, text)
    os.replace(tmp, path)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _payload_files(ckpt_dir: Path) -> list[str]:
    """Every file of a checkpoint except the manifest and the marker, as sorted relative paths."""
    out = []
    for p in ckpt_dir.rglob("*"):
        if p.is_file() or p.is_symlink():
            rel = p.relative_to(ckpt_dir).as_posix()
            if rel not in (MANIFEST_FILE, COMPLETE_MARKER):
                out.append(rel)
    return sorted(out)


def _hash_all(ckpt_dir: Path, files: Iterable[str]) -> dict[str, str]:
    files = list(files)
    # hashlib releases the GIL, so a few threads read several shards at once
    with ThreadPoolExecutor(max_workers=max(1, min(4, len(files)))) as pool:
        digests = pool.map(lambda rel: sha256_file(ckpt_dir / rel), files)
        return dict(zip(files, digests))


def write_manifest(ckpt_dir: Path) -> dict[str, Any]:
    """Write ``MANIFEST.json``: size and sha256 of every file of ``ckpt_dir``."""
    files = _payload_files(ckpt_dir)
    for rel in files:
        if (ckpt_dir / rel).is_symlink():
            raise CheckpointError(f"{ckpt_dir / rel}: a checkpoint may not contain symbolic links")
    digests = _hash_all(ckpt_dir, files)
    manifest = {"version": MANIFEST_VERSION, "algorithm": "sha256",
                "files": {rel: {"size": (ckpt_dir / rel).stat().st_size, "sha256": digests[rel]} for rel in files}}
    _write_durable(ckpt_dir / MANIFEST_FILE, json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def read_json(path: Path) -> Any:
    """A JSON file of a checkpoint; a missing or malformed one is a CheckpointError naming it."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None


def unsafe_globals(path: Path, allowed: Iterable[str] = ()) -> list[str]:
    """The Python globals a ``torch.save`` file would have to import to load, other than
    tensors, plain containers and ``allowed``; found by reading its pickle opcodes without
    executing them."""
    from torch.serialization import get_unsafe_globals_in_checkpoint

    try:
        found = get_unsafe_globals_in_checkpoint(str(path))
    except Exception as e:  # not a torch zip file: cannot be loaded safely either
        raise CheckpointError(f"{path}: not a torch checkpoint that can be loaded with weights_only=True "
                              f"({type(e).__name__}: {e})") from None
    return sorted(set(found) - set(allowed))


def safe_torch_load(path: str | os.PathLike, allowed_globals: Iterable[type] = (), map_location: Any = "cpu") -> Any:
    """``torch.load(weights_only=True)`` with ``allowed_globals`` allowlisted: tensors and plain
    containers only, so a crafted file cannot run code. Anything else is a CheckpointError."""
    path = Path(path)
    try:
        with torch.serialization.safe_globals(list(allowed_globals)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: refused to load (it is not plain tensors and containers, or it is "
                              f"damaged): {first}") from None


def verify_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Check a checkpoint before anything loads it; return its driver state (with ``rng``).

    Raises CheckpointError naming the directory and the reason: no COMPLETE marker, pickle
    files (an older roll's format, refused), no or a broken manifest, a file missing, of the
    wrong size or with the wrong sha256, a torch file holding Python objects, a driver state
    that is not valid JSON or names another step.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory")
    if not (path / COMPLETE_MARKER).exists():
        raise CheckpointError(f"{path}: no {COMPLETE_MARKER} marker (its write did not finish)")
    files = _payload_files(path)
    pickled = [rel for rel in files if rel.endswith(_PICKLE_SUFFIXES)]
    if pickled:
        raise CheckpointError(f"{path}: holds pickle files ({', '.join(pickled)}), written by an older roll; "
                              "it is not loaded, because unpickling a file can run code. Start a fresh run "
                              "or load its model weights with model_name_or_path / pretrain")
    if not (path / MANIFEST_FILE).exists():
        raise CheckpointError(f"{path}: no {MANIFEST_FILE} (written by an older roll or damaged)")
    manifest = read_json(path / MANIFEST_FILE)
    listed = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict):
        raise CheckpointError(f"{path / MANIFEST_FILE}: no 'files' mapping")
    problems = []
    for rel, meta in listed.items():
        f = path / rel
        if not f.is_file():
            problems.append(f"{rel} is missing")
        elif not isinstance(meta, dict) or f.stat().st_size != meta.get("size"):
            problems.append(f"{rel} has {f.stat().st_size} bytes, the manifest says {meta.get('size') if isinstance(meta, dict) else '?'}")
    unlisted = sorted(set(files) - set(listed))
    if unlisted:
        problems.append(f"files not in the manifest: {', '.join(unlisted[:5])}")
    if not problems:
        digests = _hash_all(path, [rel for rel in listed])
        problems += [f"{rel} does not match its sha256" for rel, meta in listed.items() if digests[rel] != meta.get("sha256")]
    if problems:
        raise CheckpointError(f"{path}: damaged: {'; '.join(problems)}")
    for rel in listed:
        if rel.endswith(_TORCH_SUFFIXES):
            bad = unsafe_globals(path / rel, DEEPSPEED_SAFE_GLOBALS)
            if bad:
                raise CheckpointError(f"{path / rel}: holds Python objects that loading would import "
                                      f"({', '.join(bad[:5])}); refused, it could run code")
    state = read_json(path / STATE_FILE)
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheckpointError(f"{path / STATE_FILE}: no integer 'step'")
    m = _STEP_RE.match(path.name)
    if m and int(m.group(1)) != state["step"]:
        raise CheckpointError(f"{path / STATE_FILE}: says step {state['step']}, but the directory is {path.name}")
    state["rng"] = read_json(path / RNG_FILE)
    return state


def _root_cause(exc: BaseException) -> str:
    """The innermost error of a chain (a Ray task error wraps the worker's own), in one line."""
    seen, cur = 0, exc
    while seen < 8:
        nxt = getattr(cur, "cause", None) or cur.__cause__
        if nxt is None or nxt is cur:
            break
        cur, seen = nxt, seen + 1
    if isinstance(cur, OSError) and cur.strerror:
        where = f" ({cur.filename})" if cur.filename else ""
        return f"{type(cur).__name__}: {cur.strerror}{where}"
    text = str(cur).strip().splitlines()
    return f"{type(cur).__name__}: {text[-1] if text else ''}"


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
        then publish it atomically. Any failure (a full disk, a worker error) removes the
        temporary directory and raises CheckpointError; earlier checkpoints are untouched."""
        self._clean_partial()
        tmp = self.root / f".tmp-step-{step}-{os.getpid()}-{int(time.time() * 1000)}"
        try:
            tmp.mkdir(parents=True)
            extra = write(tmp) or {}
            _write_durable(tmp / RNG_FILE, json.dumps(rng_state()))
            payload = {"step": step, "time": time.time(), **(state or {}), **extra}
            _write_durable(tmp / STATE_FILE, json.dumps(payload, indent=2, default=str))
            write_manifest(tmp)
            _write_durable(tmp / COMPLETE_MARKER, str(step))
            _fsync_dir(tmp)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, CheckpointError) or not isinstance(e, Exception):
                raise
            hint = " (the disk is full)" if isinstance(e, OSError) and e.errno == errno.ENOSPC else ""
            raise CheckpointError(f"could not write checkpoint step-{step} under {self.root}{hint}: "
                                  f"{_root_cause(e)}; the previous checkpoints are unchanged") from e
        final = self.step_dir(step)
        old = None
        if final.exists():  # a fresh run replacing an older run's step: keep it until the new one is in place
            old = self.root / f".tmp-replaced-{final.name}-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        _write_atomic(self.root / "latest", final.name)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self._rotate(step)
        logger.info("checkpoint saved: %s", final)
        return final

    def step_dirs(self) -> list[tuple[int, Path]]:
        """Every ``step-N`` directory, complete or not, by step."""
        out = []
        for p in self.root.iterdir():
            m = _STEP_RE.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p))
        return sorted(out)

    def complete_checkpoints(self) -> list[tuple[int, Path]]:
        return [(s, p) for s, p in self.step_dirs() if (p / COMPLETE_MARKER).exists()]

    def _candidates(self) -> list[Path]:
        """Newest first: the one ``latest`` points to, then the older ones. Steps above the
        pointer belong to an earlier run in this directory that a fresh run restarted."""
        dirs = self.step_dirs()
        pointer = self.root / "latest"
        top = None
        if pointer.exists():
            m = _STEP_RE.match(pointer.read_text().strip())
            if m and self.step_dir(int(m.group(1))).is_dir():
                top = int(m.group(1))
        if top is None:
            return [p for _, p in reversed(dirs)]
        return [p for s, p in reversed(dirs) if s <= top]

    def latest(self) -> Optional[Path]:
        """The newest complete checkpoint (not verified), or None."""
        for p in self._candidates():
            if (p / COMPLETE_MARKER).exists():
                return p
        return None

    def find_resumable(self) -> Optional[tuple[Path, dict[str, Any]]]:
        """The newest checkpoint that passes :func:`verify_checkpoint`, with its state.

        Each one skipped is a warning naming it and why. None when there is no checkpoint at
        all; a CheckpointError listing every reason when there are some but none is usable.
        """
        rejected = []
        for p in self._candidates():
            try:
                state = verify_checkpoint(p)
            except CheckpointError as e:
                logger.warning("checkpoint skipped: %s", e)
                rejected.append(str(e))
                continue
            if rejected:
                logger.warning("resuming from the older checkpoint %s instead", p)
            return p, state
        if rejected:
            raise CheckpointError(f"no usable checkpoint in {self.root}:\n  " + "\n  ".join(rejected))
        return None

    @staticmethod
    def read_state(path: str | os.PathLike) -> dict[str, Any]:
        """The verified driver state of one checkpoint (see :func:`verify_checkpoint`)."""
        return verify_checkpoint(path)

    def _rotate(self, step: int) -> None:
        if self.max_to_keep <= 0:
            return
        # only checkpoints up to the one just written: higher steps are an earlier run's
        done = [(s, p) for s, p in self.complete_checkpoints() if s <= step]
        for _, p in done[: -self.max_to_keep]:
            shutil.rmtree(p, ignore_errors=True)

    def _clean_partial(self) -> None:
        for p in self.root.glob(".tmp-*"):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
