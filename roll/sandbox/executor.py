"""Run one untrusted program in the sandbox and return a structured result.

The parent never trusts the child: it feeds stdin, caps what it reads, enforces the wall-clock
deadline itself (and the run's CPU time when the run has a cgroup), and after the run makes sure
the sandbox's PID namespace is gone (when its init process dies, the kernel kills every process
left in it, including `setsid` orphans). The init (roll/sandbox/init.py) reports the program's
exact wait status and the run's CPU time through a pipe of its own (init.c compiled, or init.py:
init_build.py chooses).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from roll.sandbox import seccomp
from roll.sandbox.cgroup import RunCgroup, detect_parent
from roll.sandbox.config import SandboxConfig, as_config
from roll.sandbox.init_build import InitBuildError, SandboxInit, resolve_init
from roll.sandbox.isolation import (
    LAUNCH_ENV,
    SandboxError,
    SandboxUnavailable,
    UidLeases,
    bwrap_args,
    check_file_name,
    cpu_seconds,
    drop_privileges_args,
    find_tools,
    init_args,
    kill_uid_processes,
    prlimit_args,
    resolve_mode,
    run_probe,
)
from roll.utils.logging import get_logger

logger = get_logger(__name__)

_DRAIN_GRACE_S = 0.25  # after the program exited, how long its pipes may still deliver data
_REAP_TIMEOUT_S = 5.0
_CPU_POLL_S = 0.05  # how often the parent reads a run cgroup's cpu.stat
_OOM_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")
_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
    # Numeric libraries would start a thread per host core, each reserving address space.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass
class ExecutionResult:
    """What happened to one sandboxed program."""

    exit_code: int | None
    """Exit status; None when the program died from a signal (see `signal`)."""
    signal: int | None
    """Signal that ended the program, if any (reported by the sandbox's init, so a program's own
    exit code above 128 stays an exit code)."""
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    """Killed at the wall-clock limit."""
    oom: bool = False
    """The program ran out of its address space (a MemoryError or allocation failure)."""
    limit: str = ""
    """Which limit ended it: '', 'timeout', 'output', 'cpu_time', 'memory', 'file_size'."""
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    """User + system CPU time of the whole run (every process of it)."""
    isolation: str = ""
    """userns, root or unsafe."""
    resource_control: str = ""
    """How the run's resources were bounded: 'cgroup' (a cgroup v2 of its own: memory, pids, CPU
    for the whole run, plus the rlimits) or 'rlimit' (rlimits per process, the run's CPU time
    counted by the sandbox's init)."""
    init: str = ""
    """Which init ran the namespace: 'c' (roll/sandbox/init.c, compiled) or 'python'
    (roll/sandbox/init.py); '' in unsafe mode, which has none."""

    @property
    def ok(self) -> bool:
        """Exited with status 0 within every limit."""
        return self.exit_code == 0 and not self.timed_out and not self.limit


class Sandbox:
    """Runs programs in isolation according to a :class:`SandboxConfig`. Thread-safe."""

    def __init__(self, config: SandboxConfig | dict | None = None):
        self.config = as_config(config)
        self._tools = find_tools(self.config)
        self._mode: str | None = None
        self._leases: UidLeases | None = None
        self._cgroup_parent: str | None = None

    # ----------------------------------------------------------------------------- public API
    @property
    def mode(self) -> str:
        """The isolation mode in use (probed once per process): userns, root or unsafe."""
        if self._mode is None:
            if os.geteuid() == 0:  # every mode runs as a uid of its own (isolation.py)
                self._leases = UidLeases(self.config.root_uid_base, self.config.root_uid_count)
            self._mode = resolve_mode(self.config, self._tools, self._probe)
            if self._mode != "unsafe":
                self._cgroup_parent = detect_parent(self.config.cgroup)[0]
        return self._mode

    @property
    def resource_control(self) -> str:
        """'cgroup' when runs get a cgroup v2 of their own, else 'rlimit' (docs/sandbox.md)."""
        return "cgroup" if self.mode != "unsafe" and self._cgroup_parent is not None else "rlimit"

    @property
    def init(self) -> str:
        """The init a run gets now: 'c', 'python', or '' in unsafe mode (docs/sandbox.md)."""
        return "" if self.mode == "unsafe" else self._resolve_init().kind

    def run_python(
        self,
        code: str,
        *,
        stdin: bytes | str = b"",
        files: Mapping[str, str | bytes] | None = None,
        args: Sequence[str] = (),
        timeout_s: float | None = None,
        script_name: str = "main.py",
    ) -> ExecutionResult:
        """Run Python source ``code`` (saved as ``script_name`` in the work dir) with the sandbox
        interpreter."""
        all_files = dict(files or {})
        if script_name in all_files:
            raise ValueError(f"files already holds {script_name!r}, the script's own name")
        all_files[script_name] = code
        return self.run([self.config.python, "-B", "-s", script_name, *args],
                        stdin=stdin, files=all_files, timeout_s=timeout_s)

    def run(
        self,
        command: Sequence[str],
        *,
        stdin: bytes | str = b"",
        files: Mapping[str, str | bytes] | None = None,
        timeout_s: float | None = None,
    ) -> ExecutionResult:
        """Run ``command`` (argv; relative paths resolve in the work dir) in the sandbox.

        ``files`` maps relative paths to contents placed in the work dir first. Raises
        SandboxError only when the sandbox itself fails; anything the program does is in the
        result.
        """
        if not command or not all(isinstance(a, str) for a in command):
            raise ValueError(f"command must be a non-empty list of strings, got {command!r}")
        # Text that is not valid UTF-8 (lone surrogates) is written with replacement characters.
        stdin_bytes = stdin.encode(errors="replace") if isinstance(stdin, str) else bytes(stdin)
        contents = {check_file_name(k): (v.encode(errors="replace") if isinstance(v, str) else bytes(v))
                    for k, v in (files or {}).items()}
        timeout = float(timeout_s if timeout_s is not None else self.config.timeout_s)
        if not os.access(self.config.python, os.X_OK):  # the sandbox sees the host's /usr
            raise SandboxUnavailable(f"sandbox interpreter {self.config.python!r} (also the Python init) "
                                     f"not found or not executable")
        mode = self.mode
        if mode == "unsafe":
            logger.warning("running code WITHOUT isolation (sandbox allow_unsafe_fallback is set and bwrap is unusable)")
        lease = self._leases.acquire() if self._leases is not None else None
        try:
            if mode == "unsafe":
                return self._run_unsafe(list(command), stdin_bytes, contents, timeout, lease)
            return self._run_bwrap(mode, list(command), stdin_bytes, contents, timeout, lease)
        finally:
            if lease is not None:
                UidLeases.release(lease[1])

    # ------------------------------------------------------------------------------ internals
    def _resolve_init(self) -> SandboxInit:
        """Resolved per run (once per process and choice, then a lookup), so that
        ROLL_SANDBOX_INIT applies to sandboxes that already exist."""
        try:
            return resolve_init(self.config.init)
        except InitBuildError as e:
            raise SandboxUnavailable(f"sandbox init 'c' is unavailable: {e}") from e

    def _probe(self, mode: str) -> str | None:
        """Start a trivial sandbox in ``mode``; an error text, or None when it works."""
        init = self._resolve_init()
        r, w = os.pipe()
        rr, rw = os.pipe()
        lease = self._leases.acquire() if self._leases is not None else None
        try:
            sec = _seccomp_fd()
            init_fd = init.open_for_run()
            extra = (init_fd,) if init_fd is not None else ()
            try:
                argv = self._argv(mode, ["/bin/true"], [], w, rw, sec, lease[0] if lease else None, 5.0,
                                  init.kind, init_fd)
                return run_probe(argv, pass_fds=(w, rw, sec, *extra))
            finally:
                os.close(sec)
                for fd in extra:
                    os.close(fd)
        finally:
            for fd in (r, w, rr, rw):
                os.close(fd)
            if lease is not None:
                UidLeases.release(lease[1])

    def _argv(self, mode: str, command: list[str], files: list[tuple[int, str]], status_fd: int,
              report_fd: int, seccomp_fd: int, uid: int | None, timeout: float, init_kind: str,
              init_fd: int | None) -> list[str]:
        """The launcher's command line."""
        cfg, tools = self.config, self._tools
        env = {**_SANDBOX_ENV, "HOME": cfg.work_dir, "TMPDIR": cfg.work_dir, **cfg.env}
        inner = init_args(cfg, report_fd, timeout, init_kind)
        if mode == "root":
            inner += drop_privileges_args(tools.setpriv, uid, uid)
        outer: list[str] = []
        if mode == "userns" and uid is not None:
            # bwrap started by root would map the sandbox user to root on the host, where
            # RLIMIT_NPROC is not enforced: become this run's own unprivileged uid before bwrap
            # starts. (setpriv rather than Popen(user=...): Popen cannot vfork when it changes
            # the uid, and forking a large trainer process costs more than one small exec.)
            outer = [tools.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
        return outer + bwrap_args(cfg, tools, mode, files, status_fd, env, seccomp_fd, init_fd) + inner + command

    def _run_bwrap(self, mode: str, command: list[str], stdin: bytes, contents: dict[str, bytes],
                   timeout: float, lease) -> ExecutionResult:
        cfg = self.config
        init = self._resolve_init()
        fds: list[tuple[int, str]] = []
        status_r, status_w = os.pipe()
        report_r, report_w = os.pipe()
        cgroup = None
        init_fd = None
        try:
            for name, data in contents.items():
                fd = os.memfd_create("roll-sandbox-file", 0)
                fds.append((fd, name))
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.lseek(fd, 0, os.SEEK_SET)
            init_fd = init.open_for_run()
            sec = _seccomp_fd()
            fds_in = [status_w, report_w, sec] + [fd for fd, _ in fds] + ([init_fd] if init_fd is not None else [])
            argv = self._argv(mode, command, fds, status_w, report_w, sec, lease[0] if lease else None, timeout,
                              init.kind, init_fd)
            if self._cgroup_parent is not None:
                cgroup = RunCgroup(self._cgroup_parent, (cfg.memory_mb + cfg.tmpfs_mb) * 1024 * 1024,
                                   cfg.max_processes + 2, cfg.cpu_cores)
                # The launcher joins the run's cgroup before it execs anything else, so every
                # process of the run is born there.
                argv = [self._tools.sh, "-c", 'echo 0 > "$0" && exec "$@"', cgroup.procs] + argv
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=fds_in, env=LAUNCH_ENV, cwd="/", start_new_session=True,
                )
            except OSError as e:
                raise SandboxError(f"could not start bwrap: {e}") from e
            finally:
                os.close(sec)
        except BaseException:
            os.close(status_r)
            os.close(report_r)
            if cgroup is not None:
                cgroup.remove()
            raise
        finally:
            os.close(status_w)
            os.close(report_w)
            for fd, _ in fds:
                os.close(fd)
            if init_fd is not None:
                os.close(init_fd)
        try:
            try:
                cpu_probe = (cgroup.cpu_s, float(cfg.cpu_time_s)) if cgroup is not None else None
                run = _Communication(proc, stdin, status_r, start + timeout, cfg.max_output_bytes, cpu_probe)
                run.loop()
            finally:
                os.close(status_r)
            status, rusage = _wait(proc)
            wall = time.monotonic() - start
            if run.child_pid is None and not run.killed_for:
                raise SandboxError(f"the sandbox failed to start: {run.err.decode(errors='replace').strip()[:500]}")
            run.ensure_namespace_gone()
            report = _read_report(report_r)
            cg_cpu = cgroup.cpu_s() if cgroup is not None else 0.0
            cg_oom = cgroup.oom_killed() if cgroup is not None else False
        finally:
            os.close(report_r)
            if cgroup is not None:
                cgroup.remove()
        if "status" in report and report["status"] is not None:
            st = int(report["status"])  # the program's own wait status, from the init
            exit_code, sig = (os.WEXITSTATUS(st), None) if os.WIFEXITED(st) else (None, os.WTERMSIG(st))
        elif os.WIFSIGNALED(status):
            exit_code, sig = None, os.WTERMSIG(status)
        else:
            code = run.exit_code if run.exit_code is not None else os.WEXITSTATUS(status)
            # bwrap reports death by signal N as exit status 128 + N.
            exit_code, sig = (None, code - 128) if 128 < code <= 128 + 64 else (code, None)
        if report.get("limit") in ("cpu_time", "timeout") and not run.killed_for:
            run.killed_for = report["limit"]
        if cg_oom and not run.killed_for:
            run.killed_for = "memory"
        cpu = max(float(report.get("cpu_s") or 0.0), cg_cpu,
                  (rusage.ru_utime + rusage.ru_stime) if rusage is not None else 0.0)
        return self._result(run, exit_code, sig, wall, cpu, mode, "cgroup" if cgroup is not None else "rlimit",
                            init.kind)

    def _run_unsafe(self, command: list[str], stdin: bytes, contents: dict[str, bytes],
                    timeout: float, lease) -> ExecutionResult:
        cfg = self.config
        work = tempfile.mkdtemp(prefix="roll-sandbox-unsafe-")
        try:
            os.chmod(work, 0o777)
            for name, data in contents.items():
                path = os.path.join(work, name)
                os.makedirs(os.path.dirname(path), mode=0o777, exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
                os.chmod(path, 0o666)
            argv = prlimit_args(cfg, self._tools.prlimit)
            if lease is not None:
                argv = drop_privileges_args(self._tools.setpriv, lease[0], lease[0]) + argv
            env = {**_SANDBOX_ENV, "HOME": work, "TMPDIR": work, **cfg.env}
            start = time.monotonic()
            proc = subprocess.Popen(argv + command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, cwd=work, start_new_session=True)
            run = _Communication(proc, stdin, None, start + timeout, cfg.max_output_bytes)
            run.loop()
            status, rusage = _wait(proc)
            wall = time.monotonic() - start
            if lease is not None:
                leftovers = kill_uid_processes(lease[0])
                if leftovers:
                    logger.warning("unsafe sandbox: killed %d leftover processes of uid %d", leftovers, lease[0])
        finally:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        if os.WIFSIGNALED(status):
            exit_code, sig = None, os.WTERMSIG(status)
        else:
            exit_code, sig = os.WEXITSTATUS(status), None
        cpu = (rusage.ru_utime + rusage.ru_stime) if rusage is not None else 0.0
        return self._result(run, exit_code, sig, wall, cpu, "unsafe", "rlimit", "")

    def _result(self, run: _Communication, exit_code, sig, wall, cpu, mode, control, init) -> ExecutionResult:
        oom = run.killed_for == "memory" or any(m in run.err[-4096:] for m in _OOM_MARKERS)
        limit = run.killed_for
        if not limit:
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_seconds(self.config) - 0.05):
                limit = "cpu_time"
            elif sig == signal.SIGXFSZ or (exit_code and b"File too large" in run.err[-4096:]):
                limit = "file_size"
            elif oom:
                limit = "memory"
        return ExecutionResult(
            exit_code=exit_code, signal=sig,
            stdout=run.out.decode("utf-8", errors="replace"), stderr=run.err.decode("utf-8", errors="replace"),
            stdout_truncated=run.truncated["out"], stderr_truncated=run.truncated["err"],
            timed_out=run.killed_for == "timeout", oom=oom, limit=limit,
            wall_time_s=wall, cpu_time_s=cpu, isolation=mode, resource_control=control, init=init,
        )


def _seccomp_fd() -> int:
    """A memfd holding the compiled filter, for bwrap's --seccomp (read once by bwrap)."""
    fd = os.memfd_create("roll-sandbox-seccomp", 0)
    try:
        data = memoryview(seccomp.filter_bytes())
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_report(fd: int) -> dict:
    """The init's JSON report ({} when the init was killed before it could write one). Every
    writer is gone by now (the launcher was reaped and the namespace is empty)."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while len(data) < 65536:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    try:
        report = json.loads(data.decode()) if data else {}
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def _wait(proc: subprocess.Popen):
    """Reap the launcher with its resource usage (which includes every process it reaped)."""
    while True:
        try:
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:  # reaped elsewhere (should not happen): no usage figures
            proc.wait()
            rc = proc.returncode
            status, rusage = ((-rc) if rc < 0 else (rc << 8)), None
            break
    proc.returncode = os.waitstatus_to_exitcode(status)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return status, rusage


class _Communication:
    """Feeds stdin and collects capped output until the program exits or the deadline passes."""

    def __init__(self, proc: subprocess.Popen, stdin: bytes, status_fd: int | None, deadline: float, cap: int,
                 cpu_probe=None):
        self.proc, self.deadline, self.cap = proc, deadline, cap
        self.cpu_probe = cpu_probe
        """(callable returning the run's CPU seconds, budget): checked every _CPU_POLL_S."""
        self.stdin = memoryview(stdin)
        self.status_fd = status_fd
        self.out = bytearray()
        self.err = bytearray()
        self.truncated = {"out": False, "err": False}
        self.killed_for = ""
        self.child_pid: int | None = None
        self.child_pidfd: int | None = None
        self.exit_code: int | None = None
        self._status_buf = b""

    def loop(self) -> None:
        proc = self.proc
        sel = selectors.DefaultSelector()
        pidfd = os.pidfd_open(proc.pid)
        streams = {proc.stdout.fileno(): ("out", self.out), proc.stderr.fileno(): ("err", self.err)}
        try:
            for fd in streams:
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            if self.status_fd is not None:
                os.set_blocking(self.status_fd, False)
                sel.register(self.status_fd, selectors.EVENT_READ)
            sel.register(pidfd, selectors.EVENT_READ)
            if self.stdin:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
            exited_at = None
            open_streams = set(streams)
            while open_streams or exited_at is None:
                now = time.monotonic()
                wait = self.deadline - now
                if exited_at is not None:
                    wait = min(wait, exited_at + _DRAIN_GRACE_S - now)
                if wait <= 0:
                    break
                if self.cpu_probe is not None and exited_at is None:
                    read_cpu, budget = self.cpu_probe
                    if read_cpu() > budget:
                        self.kill("cpu_time")
                    wait = min(wait, _CPU_POLL_S)
                for key, _ in sel.select(wait):
                    fd = key.fd
                    if fd == pidfd:
                        exited_at = time.monotonic()
                        sel.unregister(pidfd)
                    elif fd == self.status_fd:
                        self._read_status(sel)
                    elif not proc.stdin.closed and fd == proc.stdin.fileno():
                        self._feed_stdin(sel)
                    else:
                        name, buf = streams[fd]
                        try:
                            chunk = os.read(fd, 1 << 16)
                        except BlockingIOError:
                            continue
                        if not chunk:
                            sel.unregister(fd)
                            open_streams.discard(fd)
                            continue
                        room = self.cap - len(buf)
                        buf += chunk[: max(room, 0)]
                        if len(chunk) > room and not self.truncated[name]:
                            self.truncated[name] = True
                            self.kill("output")
            if self.status_fd is not None:
                self._read_status(None)
            if exited_at is None:
                self.kill("timeout")
        finally:
            if not proc.stdin.closed:
                proc.stdin.close()
            sel.close()
            os.close(pidfd)

    def _feed_stdin(self, sel) -> None:
        stdin = self.proc.stdin
        try:
            n = os.write(stdin.fileno(), self.stdin[: 1 << 16])
            self.stdin = self.stdin[n:]
        except BlockingIOError:
            return
        except (BrokenPipeError, OSError):  # the program closed stdin or exited: it read what it wanted
            self.stdin = self.stdin[:0]
        if not self.stdin:
            sel.unregister(stdin.fileno())
            stdin.close()

    def _read_status(self, sel) -> None:
        """bwrap's JSON status documents: the init process's pid first, the exit code last."""
        try:
            while True:
                chunk = os.read(self.status_fd, 4096)
                if not chunk:
                    if sel is not None:
                        sel.unregister(self.status_fd)
                    break
                self._status_buf += chunk
                if sel is not None:
                    break
        except BlockingIOError:
            pass
        decoder = json.JSONDecoder()
        text = self._status_buf.decode(errors="replace")
        pos, consumed = 0, 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            try:
                doc, pos = decoder.raw_decode(text, pos)
            except ValueError:
                break
            consumed = pos
            if "child-pid" in doc and self.child_pid is None:
                self.child_pid = int(doc["child-pid"])
                try:
                    self.child_pidfd = os.pidfd_open(self.child_pid)
                except ProcessLookupError:
                    self.child_pidfd = None  # already gone, namespace and all
            if "exit-code" in doc:
                self.exit_code = int(doc["exit-code"])
        self._status_buf = text[consumed:].encode()

    def kill(self, reason: str) -> None:
        if not self.killed_for:
            self.killed_for = reason
        if self.child_pidfd is not None:
            try:  # the namespace's init: its death takes every process of the sandbox with it
                signal.pidfd_send_signal(self.child_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def ensure_namespace_gone(self) -> None:
        """Block until the sandbox's init has exited (then its PID namespace is empty)."""
        if self.child_pidfd is None:
            return
        try:
            sel = selectors.DefaultSelector()
            sel.register(self.child_pidfd, selectors.EVENT_READ)
            if not sel.select(0):
                signal.pidfd_send_signal(self.child_pidfd, signal.SIGKILL)
                if not sel.select(_REAP_TIMEOUT_S):
                    raise SandboxError(f"sandbox init {self.child_pid} did not exit after SIGKILL")
        except ProcessLookupError:
            pass
        finally:
            sel.close()
            os.close(self.child_pidfd)
            self.child_pidfd = None
