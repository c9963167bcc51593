"""CheckpointManager: atomic publish, rotation, survival of a SIGKILL mid-write, manifests
and their verification with fallback, JSON driver state, refusal of pickled files, and a
full disk during a write."""
from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from roll.errors import CheckpointError
from roll.utils import checkpoint as checkpoint_module
from roll.utils.checkpoint import (
    COMPLETE_MARKER,
    MANIFEST_FILE,
    STATE_FILE,
    CheckpointManager,
    rng_state,
    safe_torch_load,
    set_rng_state,
    sha256_file,
    verify_checkpoint,
    write_manifest,
)


def _write_payload(value: str):
    def write(d):
        (d / "payload.txt").write_text(value)
    return write


def test_save_publishes_and_rotates(tmp_path):
    mgr = CheckpointManager(tmp_path, max_to_keep=2)
    for step in (1, 2, 3):
        mgr.save(step, _write_payload(f"s{step}"), {"tracker_step": step})
    steps = [s for s, _ in mgr.complete_checkpoints()]
    assert steps == [2, 3]
    latest = mgr.latest()
    assert latest.name == "step-3"
    assert (latest / "payload.txt").read_text() == "s3"
    state = CheckpointManager.read_state(latest)
    assert state["step"] == 3 and state["tracker_step"] == 3 and "torch" in state["rng"]


def test_partial_directory_is_ignored(tmp_path):
    mgr = CheckpointManager(tmp_path, max_to_keep=0)
    mgr.save(1, _write_payload("good"))
    # A half-written step-2 without its marker, as a crash in an older layout would leave.
    (tmp_path / "step-2").mkdir()
    (tmp_path / "step-2" / "payload.txt").write_text("half")
    (tmp_path / "latest").write_text("step-2")
    assert mgr.latest().name == "step-1"


def test_sigkill_during_write_keeps_previous_checkpoint(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from roll.utils.checkpoint import CheckpointManager
        mgr = CheckpointManager({str(tmp_path)!r}, max_to_keep=3)
        def one(d):
            (d / "payload.txt").write_text("one")
        mgr.save(1, one)
        def slow(d):
            (d / "payload.txt").write_text("two-partial")
            print("WRITING", flush=True)
            time.sleep(60)
        mgr.save(2, slow)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "WRITING"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    mgr = CheckpointManager(tmp_path, max_to_keep=3)
    latest = mgr.latest()
    assert latest is not None and latest.name == "step-1"
    assert (latest / COMPLETE_MARKER).exists()
    assert (latest / "payload.txt").read_text() == "one"
    # The next save cleans up the partial temporary directory.
    assert list(tmp_path.glob(".tmp-step-2-*"))
    mgr.save(2, _write_payload("two"))
    assert not list(tmp_path.glob(".tmp-step-*"))
    assert mgr.latest().name == "step-2"


# ---- manifest, verification and fallback ---------------------------------------------------------
def _write_weights(value: float):
    def write(d):
        (d / "actor_train").mkdir()
        torch.save({"w": torch.full((64,), value)}, d / "actor_train" / "trainer_state.pt")
        (d / "actor_train" / "model.safetensors").write_bytes(bytes(range(256)) * 64)
        return {"cursor": int(value)}
    return write


def _three(tmp_path):
    mgr = CheckpointManager(tmp_path / "checkpoints", max_to_keep=0)
    for step in (1, 2, 3):
        mgr.save(step, _write_weights(float(step)))
    return mgr


def test_manifest_lists_every_file_with_size_and_sha256(tmp_path):
    mgr = _three(tmp_path)
    ckpt = mgr.step_dir(3)
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())["files"]
    assert sorted(manifest) == ["actor_train/model.safetensors", "actor_train/trainer_state.pt",
                                "driver_rng.json", "driver_state.json"]
    for rel, meta in manifest.items():
        assert meta["size"] == (ckpt / rel).stat().st_size
        assert meta["sha256"] == sha256_file(ckpt / rel)
    state = verify_checkpoint(ckpt)
    assert state["step"] == 3 and state["cursor"] == 3


def test_truncated_file_falls_back_to_newest_good_with_a_warning(tmp_path, log_calls):
    mgr = _three(tmp_path)
    weights = mgr.step_dir(3) / "actor_train" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # COMPLETE is still there
    with pytest.raises(CheckpointError, match=r"step-3.*model.safetensors has 100 bytes"):
        verify_checkpoint(mgr.step_dir(3))
    calls = log_calls(checkpoint_module.logger)
    path, state = mgr.find_resumable()
    assert path.name == "step-2" and state["step"] == 2
    assert any(level == "WARNING" and "step-3" in m and "model.safetensors" in m for level, m in calls)


def test_same_size_corruption_is_caught_by_the_hash(tmp_path):
    mgr = _three(tmp_path)
    weights = mgr.step_dir(3) / "actor_train" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[1000] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors does not match its sha256"):
        verify_checkpoint(mgr.step_dir(3))
    assert mgr.find_resumable()[0].name == "step-2"


def test_missing_complete_marker_is_skipped_with_a_warning(tmp_path, log_calls):
    mgr = _three(tmp_path)
    (mgr.step_dir(3) / COMPLETE_MARKER).unlink()
    calls = log_calls(checkpoint_module.logger)
    path, _ = mgr.find_resumable()
    assert path.name == "step-2"
    assert any(level == "WARNING" and "step-3" in m and COMPLETE_MARKER in m for level, m in calls)


def test_no_good_checkpoint_is_a_clear_error(tmp_path):
    mgr = _three(tmp_path)
    for step in (1, 2, 3):
        (mgr.step_dir(step) / STATE_FILE).write_text('{"step": ')
    with pytest.raises(CheckpointError) as e:
        mgr.find_resumable()
    message = str(e.value)
    assert "no usable checkpoint" in message and all(f"step-{s}" in message for s in (1, 2, 3))
    assert CheckpointManager(tmp_path / "empty").find_resumable() is None  # nothing saved yet: start fresh


def test_broken_driver_state_names_the_file(tmp_path):
    mgr = _three(tmp_path)
    ckpt = mgr.step_dir(3)
    (ckpt / STATE_FILE).write_text('{"step": 3,')
    write_manifest(ckpt)  # consistent manifest: the JSON itself is what is broken
    with pytest.raises(CheckpointError, match=r"step-3/driver_state.json: not valid JSON"):
        verify_checkpoint(ckpt)


def test_state_naming_another_step_is_refused(tmp_path):
    mgr = _three(tmp_path)
    ckpt = mgr.step_dir(2)
    (ckpt / STATE_FILE).write_text(json.dumps({"step": 6}))
    write_manifest(ckpt)
    with pytest.raises(CheckpointError, match="says step 6, but the directory is step-2"):
        verify_checkpoint(ckpt)


# ---- no code runs on load ----------------------------------------------------------------------------
class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_old_pickle_checkpoint_is_refused_without_running_it(tmp_path):
    """The layout an older roll wrote: driver_rng.pkl read with pickle.load."""
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "checkpoints" / "step-1"
    ckpt.mkdir(parents=True)
    (ckpt / STATE_FILE).write_text(json.dumps({"step": 1}))
    (ckpt / "driver_rng.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    (ckpt / COMPLETE_MARKER).write_text("1")
    (tmp_path / "checkpoints" / "latest").write_text("step-1")
    with pytest.raises(CheckpointError, match="pickle files.*driver_rng.pkl"):
        CheckpointManager.read_state(ckpt)
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        CheckpointManager(tmp_path / "checkpoints").find_resumable()
    assert not marker.exists()


def test_torch_file_with_a_payload_is_refused_in_the_driver_and_the_worker(tmp_path):
    marker = tmp_path / "PWNED"
    mgr = _three(tmp_path)
    ckpt = mgr.step_dir(3)
    state_file = ckpt / "actor_train" / "trainer_state.pt"
    torch.save({"w": torch.zeros(3), "evil": _Payload(marker)}, state_file)
    write_manifest(ckpt)  # whoever crafts a checkpoint can also write a matching manifest
    with pytest.raises(CheckpointError, match=r"trainer_state.pt: holds Python objects.*io.open"):
        verify_checkpoint(ckpt)
    with pytest.raises(CheckpointError, match="trainer_state.pt: refused to load"):
        safe_torch_load(state_file)  # what the strategies call in the workers
    assert not marker.exists()
    assert safe_torch_load(mgr.step_dir(2) / "actor_train" / "trainer_state.pt")["w"][0] == 2.0


def test_rng_state_is_json_and_round_trips():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    random.random(), np.random.normal(), torch.rand(1)  # a cached gaussian in numpy's state
    state = json.loads(json.dumps(rng_state()))
    expected = (random.random(), np.random.normal(), torch.rand(2).tolist())
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_rng_state(state)
    assert (random.random(), np.random.normal(), torch.rand(2).tolist()) == expected
    with pytest.raises(CheckpointError, match="driver_rng.json"):
        set_rng_state({"python": {}, "numpy": {}, "torch": ""})


# ---- a full disk ----------------------------------------------------------------------------------
def _fill_disk_subprocess(root, limit_bytes: int, size: int) -> subprocess.CompletedProcess:
    """Save step 1, then a step 2 of ``size`` bytes under RLIMIT_FSIZE ``limit_bytes`` (writes
    past the cap fail with EFBIG)."""
    script = textwrap.dedent(
        f"""
        import resource, signal
        from roll.errors import CheckpointError
        from roll.utils.checkpoint import CheckpointManager
        mgr = CheckpointManager({str(root)!r}, max_to_keep=1)
        def weights(data):
            return lambda d: (d / "weights.dat").write_bytes(data) and None
        mgr.save(1, weights(b"1" * 1000))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, resource.RLIM_INFINITY))
        try:
            mgr.save(2, weights(b"2" * {size}))
        except CheckpointError as e:
            print("ERROR", e)
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def _assert_previous_intact(root, out: str):
    assert "ERROR could not write checkpoint step-2" in out and "previous checkpoints are unchanged" in out, out
    mgr = CheckpointManager(root)
    path, state = mgr.find_resumable()
    assert path.name == "step-1" and state["step"] == 1
    assert (path / "weights.dat").read_bytes() == b"1" * 1000
    assert not list(root.glob(".tmp-*")) and not mgr.step_dir(2).exists()


def test_file_size_cap_during_a_write_keeps_the_previous_checkpoint(tmp_path):
    proc = _fill_disk_subprocess(tmp_path, 100_000, 400_000)
    assert proc.returncode == 0, proc.stderr
    _assert_previous_intact(tmp_path, proc.stdout)
    assert "File too large" in proc.stdout


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs (needs CAP_SYS_ADMIN; skipped elsewhere, where the RLIMIT test covers it)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_during_a_write_keeps_the_previous_checkpoint(small_tmpfs):
    root = small_tmpfs / "checkpoints"
    proc = _fill_disk_subprocess(root, 1 << 30, 4 << 20)  # no cap to speak of: the 1 MiB disk fills
    assert proc.returncode == 0, proc.stderr
    _assert_previous_intact(root, proc.stdout)
    assert "the disk is full" in proc.stdout and "No space left on device" in proc.stdout
