"""The compiled init (roll/sandbox/init.c) and its build: cached per user by source hash, safe
when several processes build at once, refused when someone else could replace it, a logged
fallback to the Python init where it cannot be built, and a read-only copy inside each run.
(The init's behaviour inside runs is covered by the adversarial, basics and hardening modules,
which run every test with each init.)"""
from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import tempfile

import pytest
from sandbox_helpers import ROOMY

from roll.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, as_config
from roll.sandbox.init_build import (
    ENV_CHOICE,
    SOURCE,
    InitBuildError,
    build_c_init,
    find_compiler,
    load_c_init,
    resolve_init,
)

needs_compiler = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on PATH")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    return build_c_init(str(tmp_path_factory.mktemp("init-cache")))


@needs_compiler
def test_the_build_is_cached_by_source_hash(built):
    st = os.stat(built)
    assert stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == os.geteuid()
    assert os.path.basename(built).startswith("init-") and len(os.path.basename(built)) > 20
    again = build_c_init(os.path.dirname(built))
    assert again == built and os.stat(again).st_mtime_ns == st.st_mtime_ns  # not rebuilt
    assert os.listdir(os.path.dirname(built)) == [os.path.basename(built)]  # no temporary left


@needs_compiler
def test_another_source_is_another_binary(built, tmp_path):
    source = tmp_path / "init.c"
    with open(SOURCE) as f:
        source.write_text(f.read() + "\n/* changed */\n")
    other = build_c_init(os.path.dirname(built), source=str(source))
    assert other != built and os.path.dirname(other) == os.path.dirname(built)
    os.unlink(other)


@needs_compiler
def test_concurrent_builds_leave_one_whole_binary(tmp_path):
    cache = str(tmp_path / "cache")
    code = "import sys; from roll.sandbox.init_build import build_c_init; print(build_c_init(sys.argv[1]))"
    procs = [subprocess.Popen([sys.executable, "-c", code, cache], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {out.decode().strip() for out, _ in outs}
    assert len(paths) == 1 and os.listdir(cache) == [os.path.basename(paths.pop())]
    init = load_c_init(os.path.join(cache, os.listdir(cache)[0]))  # runs, and refuses outside a namespace
    assert init.kind == "c" and init.memfd is not None
    os.close(init.memfd)


@needs_compiler
def test_the_compiled_init_refuses_outside_a_pid_namespace_and_bad_settings(built):
    # outside a namespace, kill(-1) would reach every process of the caller's uid
    r = subprocess.run([built, "3;1;1;RLIMIT_CPU=1", "/bin/true"], capture_output=True, timeout=30, check=False)
    assert r.returncode == 126 and b"refusing" in r.stderr
    # as PID 1 (a namespace of its own), malformed settings are refused before anything runs
    for settings in ("3;1;1", "3;x;1;RLIMIT_CPU=1", "3;1;1;RLIMIT_BOGUS=1", "1;1;1;RLIMIT_CPU=1"):
        r = subprocess.run(["bwrap", "--unshare-user", "--unshare-pid", "--as-pid-1", "--ro-bind", "/", "/",
                            "--proc", "/proc", built, settings, "/bin/echo", "ran"],
                           capture_output=True, timeout=30, cwd="/", check=False)
        assert r.returncode == 126 and b"ran" not in r.stdout, (settings, r)


@needs_compiler
def test_an_untrusted_cache_is_refused(built, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could swap the binary the init runs as (root, in root mode)
    with pytest.raises(InitBuildError, match="writable by nobody else"):
        build_c_init(str(shared))
    cache = os.path.dirname(built)
    os.chmod(built, 0o777)
    try:
        with pytest.raises(InitBuildError, match="writable by nobody else"):
            build_c_init(cache)
    finally:
        os.chmod(built, 0o755)


@needs_compiler
def test_a_home_without_a_writable_cache_uses_a_private_temp_dir(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    path = build_c_init()
    assert os.path.dirname(path) == str(tmp_path / "tmp" / f"roll-sandbox-init-{os.geteuid()}")
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700


def test_a_failed_build_says_why_and_leaves_nothing(tmp_path):
    if find_compiler() is None:
        pytest.skip("no C compiler on PATH")
    source = tmp_path / "broken.c"
    source.write_text("int main(void) { return undeclared; }\n")
    cache = tmp_path / "cache"
    with pytest.raises(InitBuildError, match="undeclared"):
        build_c_init(str(cache), source=str(source))
    assert os.listdir(cache) == []


def _capture_warnings(monkeypatch) -> list[str]:
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())
    monkeypatch.setattr(logging.getLogger("roll.sandbox.init_build"), "handlers", [handler])
    return messages


def test_without_a_compiler_auto_falls_back_to_the_python_init_with_one_warning(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built there yet
    monkeypatch.delenv(ENV_CHOICE, raising=False)
    warnings = _capture_warnings(monkeypatch)
    sandbox = Sandbox(ROOMY.replace(bwrap="/usr/bin/bwrap"))
    results = [sandbox.run_python("print(6 * 7)") for _ in range(2)]
    assert all(r.ok and r.stdout == "42\n" and r.init == "python" for r in results), results
    assert len(warnings) == 1 and "no C compiler" in warnings[0], warnings
    strict = Sandbox(ROOMY.replace(bwrap="/usr/bin/bwrap", init="c"))
    for _ in range(2):
        with pytest.raises(SandboxUnavailable, match="no C compiler"):
            strict.run_python("print(1)")
    assert not (tmp_path / "cache" / "roll" / "sandbox-init").exists() or not any(
        n.startswith(".build-") for n in os.listdir(tmp_path / "cache" / "roll" / "sandbox-init"))


def test_the_choice_is_validated(monkeypatch):
    with pytest.raises(ValueError, match="init must be auto, c or python"):
        SandboxConfig(init="java")
    with pytest.raises(Exception, match="init"):
        as_config({"init": "java"})
    monkeypatch.setenv(ENV_CHOICE, "java")
    with pytest.raises(ValueError, match=ENV_CHOICE):
        resolve_init("auto")
    assert resolve_init("python").kind == "python"  # an explicit choice is not overridden


@needs_compiler
def test_the_init_inside_the_sandbox_cannot_be_changed_or_read(monkeypatch):
    monkeypatch.delenv(ENV_CHOICE, raising=False)
    r = Sandbox(ROOMY.replace(init="c")).run_python(
        "import json, os\n"
        "out = {}\n"
        "for name, act in [('write', lambda: open('/.sandbox-init', 'r+b')),\n"
        "                  ('chmod', lambda: os.chmod('/.sandbox-init', 0o777)),\n"
        "                  ('unlink', lambda: os.unlink('/.sandbox-init')),\n"
        "                  ('exe', lambda: os.readlink('/proc/1/exe')),\n"
        "                  ('maps', lambda: open('/proc/1/maps').read())]:\n"
        "    try:\n"
        "        act()\n"
        "        out[name] = 'done'\n"
        "    except OSError as e:\n"
        "        out[name] = e.errno\n"
        "print(json.dumps(out))\n"
    )
    assert r.ok and r.init == "c", r
    out = json.loads(r.stdout)
    assert "done" not in out.values(), out


@pytest.mark.parametrize("kind", ["c", "python"])
def test_each_init_enforces_its_backstop_deadline_and_reports_it(kind, built, monkeypatch):
    """The parent's deadline normally comes first; the init's own (timeout_s + 5 s) holds when
    the parent is gone. Run as PID 1 directly, with a 0.3 s backstop."""
    monkeypatch.delenv(ENV_CHOICE, raising=False)
    from roll.sandbox.isolation import init_args

    r_fd, w_fd = os.pipe()
    try:
        argv = init_args(ROOMY, w_fd, -4.7, kind)  # backstop: timeout_s + 5 s = 0.3 s
        if kind == "c":
            argv[0] = built
        proc = subprocess.run(["bwrap", "--unshare-user", "--unshare-pid", "--as-pid-1", "--ro-bind", "/", "/",
                               "--proc", "/proc", *argv, "/bin/sh", "-c", "sleep 20 & sleep 20"],
                              capture_output=True, timeout=15, cwd="/", pass_fds=(w_fd,), check=False)
        os.close(w_fd)
        w_fd = -1
        with os.fdopen(r_fd, "rb") as f:
            r_fd = -1
            report = json.loads(f.read())
    finally:
        for fd in (r_fd, w_fd):
            if fd >= 0:
                os.close(fd)
    assert proc.returncode == 137, proc
    assert report["limit"] == "timeout" and os.WIFSIGNALED(report["status"]), report
    assert os.WTERMSIG(report["status"]) == 9 and isinstance(report["cpu_s"], float), report
