"""The sandbox's contract: results, inputs, environment, the unprivileged user, modes, errors."""
from __future__ import annotations

import logging
import os
import threading
import time

import pytest
from sandbox_helpers import ROOMY, TIGHT, process_table

from roll.config.validate import ConfigError
from roll.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, as_config
from roll.sandbox.isolation import SANDBOX_UID_INSIDE


def test_hello_stdin_files_and_args(sandbox):
    r = sandbox.run_python(
        "import sys\nprint(sys.stdin.read().upper(), end='')\nprint(open('data/in.txt').read())\nprint(sys.argv[1:])\n",
        stdin="abc\n", files={"data/in.txt": "file text"}, args=["x", "y z"],
    )
    assert r.ok and r.exit_code == 0 and r.signal is None
    assert r.stdout == "ABC\nfile text\n['x', 'y z']\n"
    assert not (r.stdout_truncated or r.stderr_truncated or r.timed_out or r.oom)
    assert r.isolation in ("userns", "root")
    assert 0 < r.wall_time_s < ROOMY.timeout_s and r.cpu_time_s > 0


def test_exit_code_stderr_and_signal(sandbox):
    r = sandbox.run_python("import sys\nsys.stderr.write('bad\\n')\nsys.exit(3)\n")
    assert (r.exit_code, r.signal, r.stderr, r.ok) == (3, None, "bad\n", False)
    r = sandbox.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert (r.exit_code, r.signal) == (None, 11)


def test_large_stdin_is_fed_and_unread_stdin_does_not_hang(sandbox):
    data = "x" * (3 << 20)
    r = sandbox.run_python("import sys\nprint(len(sys.stdin.read()))\n", stdin=data)
    assert r.stdout == f"{len(data)}\n"
    r = sandbox.run_python("print('ignored stdin')\n", stdin=data)
    assert r.ok and r.stdout == "ignored stdin\n"


def test_environment_is_cleared_and_user_is_unprivileged(sandbox, monkeypatch):
    monkeypatch.setenv("ROLL_HOST_ONLY", "1")
    r = sandbox.run_python(
        "import os, socket\n"
        "print(os.getuid(), os.getgid(), os.getcwd(), socket.gethostname())\n"
        "print(sorted(os.environ))\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
    )
    lines = r.stdout.splitlines()
    uid, gid, cwd, host = lines[0].split()
    if sandbox.mode == "userns":
        assert (int(uid), int(gid)) == (SANDBOX_UID_INSIDE, SANDBOX_UID_INSIDE)
    else:
        assert int(uid) >= TIGHT.root_uid_base
    assert (cwd, host) == (TIGHT.work_dir, "sandbox")
    assert eval(lines[1]) == ["HOME", "LANG", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PATH", "PWD",
                              "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "TMPDIR"]
    assert int(lines[2], 16) == 0  # no capabilities at all


def test_host_sees_an_unprivileged_uid_while_the_program_runs():
    """As root, RLIMIT_NPROC is not enforced: the sandboxed process must not be root on the host."""
    sandbox = Sandbox(ROOMY)
    token = "roll-uid-probe-" + str(os.getpid())
    done = {}
    t = threading.Thread(target=lambda: done.update(r=sandbox.run_python("import time\ntime.sleep(1.5)\n", args=[token])))
    t.start()
    uids = set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not uids:
        uids = {uid for _, uid, cmd in process_table().values() if token in cmd and "python3" in cmd}
        time.sleep(0.05)
    t.join()
    assert done["r"].ok
    assert uids and 0 not in uids
    if os.geteuid() == 0:  # a uid leased for this run alone, in every mode
        assert len(uids) == 1 and TIGHT.root_uid_base <= min(uids) < TIGHT.root_uid_base + TIGHT.root_uid_count


def test_file_names_cannot_escape(sandbox):
    for bad in ("../x", "/etc/x", "a/../../x", "", "a//b", "./x"):
        with pytest.raises(ValueError):
            sandbox.run_python("pass", files={bad: "x"})
    with pytest.raises(ValueError):
        sandbox.run([])


def test_config_validation():
    with pytest.raises(ValueError):
        SandboxConfig(isolation="docker")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SandboxConfig(timeout_s=0)
    with pytest.raises(ValueError):
        SandboxConfig(work_dir="/usr")
    with pytest.raises(ConfigError, match="did you mean 'timeout_s'"):
        as_config({"timeout": 3})
    assert as_config({"timeout_s": 3}).timeout_s == 3


def test_missing_interpreter_is_an_infrastructure_error():
    with pytest.raises(SandboxUnavailable, match="interpreter"):
        Sandbox(TIGHT.replace(python="/usr/bin/no-such-python")).run_python("print(1)")


def test_missing_bwrap_is_refused_with_a_clear_error():
    sb = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap"))
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*allow_unsafe_fallback"):
        sb.run_python("print(1)")


def test_unsafe_fallback_runs_and_warns_every_time():
    sb = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap", allow_unsafe_fallback=True, timeout_s=5))
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("roll.sandbox.executor")
    logger.addHandler(handler)
    try:
        for _ in range(2):
            r = sb.run_python("import os, sys\nprint(sys.stdin.read(), os.getuid())\n", stdin="hi")
            assert r.ok and r.isolation == "unsafe" and r.stdout.split()[0] == "hi"
            assert r.init == ""  # no namespace, no init of ours
            if os.geteuid() == 0:
                assert int(r.stdout.split()[1]) != 0  # still dropped to a leased uid
    finally:
        logger.removeHandler(handler)
    warnings = [rec for rec in records if rec.levelno == logging.WARNING and "WITHOUT isolation" in rec.getMessage()]
    assert len(warnings) == 2


def test_unsafe_fallback_still_enforces_the_deadline():
    sb = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap", allow_unsafe_fallback=True, timeout_s=1))
    r = sb.run_python("import time\ntime.sleep(30)\n")
    assert r.timed_out and r.wall_time_s < 2.5


@pytest.mark.skipif(os.geteuid() != 0, reason="isolation 'root' needs root")
def test_root_mode_drops_to_a_leased_uid_and_limits_processes():
    sb = Sandbox(TIGHT.replace(isolation="root"))
    r = sb.run_python(
        "import os, time\nprint(os.getuid())\nn = 0\ntry:\n"
        "    for _ in range(100):\n        if os.fork() == 0:\n            time.sleep(20)\n            os._exit(0)\n        n += 1\n"
        "except OSError:\n    print('blocked', n)\n"
    )
    uid_line, blocked = r.stdout.splitlines()
    assert r.isolation == "root" and TIGHT.root_uid_base <= int(uid_line) < TIGHT.root_uid_base + TIGHT.root_uid_count
    assert blocked.startswith("blocked") and int(blocked.split()[1]) < TIGHT.max_processes
    nxt = Sandbox(ROOMY.replace(isolation="root")).run_python("print('ok')")
    assert nxt.ok and nxt.stdout == "ok\n"
