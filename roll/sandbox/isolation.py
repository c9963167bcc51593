"""How a sandboxed command line is built: bubblewrap namespaces, the seccomp filter, our own
init with the run's limits, the unprivileged user.

Three modes (see docs/sandbox.md):

- ``userns``: bwrap unshares every namespace including a user namespace and runs as an
  unprivileged host uid: when we are root, a uid leased for this run alone (started through
  ``setpriv``), so no per-user kernel count (processes, inotify, keyrings, message queues) is
  shared between concurrent runs. RLIMIT_NPROC is then counted per user namespace too.
- ``root``: for hosts where unprivileged user namespaces are disabled but we are root. bwrap
  runs as root without a user namespace and ``setpriv`` drops to a leased uid inside the
  sandbox, after the init set the limits. Each concurrent execution leases its own uid
  because RLIMIT_NPROC is then counted per host uid.
- ``unsafe``: no bwrap at all (explicit opt-in only): a plain process group with rlimits,
  still as a leased unprivileged uid when we are root.

In both bwrap modes the namespace's PID 1 is our own init, under the seccomp filter of
roll/sandbox/seccomp.py: roll/sandbox/init.c compiled (init_build.py), or roll/sandbox/init.py
run by the sandbox's interpreter.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass

from roll.sandbox.config import SandboxConfig
from roll.sandbox.init_build import PATH_INSIDE as INIT_PATH_INSIDE
from roll.utils.logging import get_logger

logger = get_logger(__name__)

# Only this reaches the bwrap process itself; its environment is readable from inside the
# sandbox as /proc/1/environ, so no secret of the host process may be in it.
LAUNCH_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
SANDBOX_UID_INSIDE = 65534


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, could not be cleaned up): an infrastructure
    failure, never a verdict on the program."""


class SandboxUnavailable(SandboxError):
    """bubblewrap (or a tool it needs) is missing or unusable on this host."""


@dataclass(frozen=True)
class Tools:
    bwrap: str | None
    prlimit: str
    setpriv: str
    sh: str


def find_tools(config: SandboxConfig) -> Tools:
    prlimit = shutil.which("prlimit", path=LAUNCH_ENV["PATH"])
    setpriv = shutil.which("setpriv", path=LAUNCH_ENV["PATH"])
    sh = shutil.which("sh", path=LAUNCH_ENV["PATH"])
    if prlimit is None or setpriv is None or sh is None:
        raise SandboxUnavailable(
            "the sandbox needs prlimit and setpriv (util-linux) and sh in /usr/bin or /bin "
            "(apt-get install util-linux dash)"
        )
    bwrap = shutil.which(config.bwrap) if os.sep not in config.bwrap else (
        config.bwrap if os.access(config.bwrap, os.X_OK) else None
    )
    return Tools(bwrap=bwrap, prlimit=prlimit, setpriv=setpriv, sh=sh)


def cpu_seconds(config: SandboxConfig) -> int:
    """The CPU budget in whole seconds (RLIMIT_CPU's unit), rounded up."""
    return max(1, int(-(-config.cpu_time_s // 1)))


def rlimits(config: SandboxConfig) -> dict[str, int]:
    """The rlimits of every process of a run (soft == hard)."""
    mib = 1024 * 1024
    return {
        # soft == hard: SIGKILL right at the limit, per process; the init counts the run's total.
        "RLIMIT_CPU": cpu_seconds(config),
        "RLIMIT_AS": config.memory_mb * mib,
        "RLIMIT_FSIZE": config.file_size_mb * mib,
        "RLIMIT_NPROC": config.max_processes,
        "RLIMIT_NOFILE": config.max_open_files,
        "RLIMIT_CORE": 0,
    }


def prlimit_args(config: SandboxConfig, prlimit: str) -> list[str]:
    """The same limits through util-linux prlimit (unsafe mode, which has no init of ours)."""
    flags = {"RLIMIT_CPU": "cpu", "RLIMIT_AS": "as", "RLIMIT_FSIZE": "fsize", "RLIMIT_NPROC": "nproc",
             "RLIMIT_NOFILE": "nofile", "RLIMIT_CORE": "core"}
    return [prlimit] + [f"--{flags[k]}={v}:{v}" for k, v in rlimits(config).items()] + ["--"]


_INIT_SOURCE: str | None = None


def init_args(config: SandboxConfig, report_fd: int, timeout_s: float, kind: str) -> list[str]:
    """The sandbox's init with its settings; the command follows. ``kind`` "c": the compiled
    init (roll/sandbox/init.c) at init_build.PATH_INSIDE, where bwrap_args puts it; "python":
    roll/sandbox/init.py, passed as source (the sandbox cannot read the project's files)."""
    global _INIT_SOURCE
    limits = ",".join(f"{k}={v}" for k, v in rlimits(config).items())
    # the backstop only: the parent kills the run at its deadline
    settings = f"{report_fd};{float(config.cpu_time_s)!r};{float(timeout_s) + 5.0!r};{limits}"
    if kind == "c":
        return [INIT_PATH_INSIDE, settings]
    if _INIT_SOURCE is None:
        with open(os.path.join(os.path.dirname(__file__), "init.py")) as f:
            _INIT_SOURCE = f.read()
    return [config.python, "-I", "-S", "-c", _INIT_SOURCE, settings]


def drop_privileges_args(setpriv: str, uid: int, gid: int) -> list[str]:
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def bwrap_args(
    config: SandboxConfig,
    tools: Tools,
    mode: str,
    files: list[tuple[int, str]],
    status_fd: int,
    env: dict[str, str],
    seccomp_fd: int,
    init_fd: int | None = None,
) -> list[str]:
    """The bwrap part of the command line; ``files`` are (fd, path inside) pairs to copy in;
    ``init_fd`` holds the compiled init, copied to a read-only file at INIT_PATH_INSIDE."""
    wd = config.work_dir.rstrip("/")
    # --as-pid-1: no bwrap reaper; the namespace's init is our own (init_args), which the
    # launcher reaps. When init exits, the kernel kills whatever else is left in the namespace.
    args = [
        tools.bwrap, "--die-with-parent", "--new-session", "--clearenv", "--as-pid-1",
        "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "sandbox",
    ]
    if mode == "userns":
        args += ["--unshare-user", "--disable-userns",
                 "--uid", str(SANDBOX_UID_INSIDE), "--gid", str(SANDBOX_UID_INSIDE)]
    for path in config.ro_binds:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    for path in config.etc_files:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(config.tmpfs_mb * 1024 * 1024), "--tmpfs", wd]
    made_dirs: set[str] = set()
    for fd, rel in files:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = f"{wd}/{'/'.join(parts[:i])}"
            if d not in made_dirs:
                made_dirs.add(d)
                args += ["--perms", "1777", "--dir", d]
        args += ["--perms", "0666", "--file", str(fd), f"{wd}/{rel}"]
    if init_fd is not None:
        args += ["--perms", "0555", "--ro-bind-data", str(init_fd), INIT_PATH_INSIDE]
    # The root and /dev are bwrap's own tmpfs mounts: read-only, so the size-limited work dir is
    # the only writable place.
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", wd]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--seccomp", str(seccomp_fd), "--json-status-fd", str(status_fd), "--"]
    return args


def check_file_name(name: str) -> str:
    """A relative path inside the work dir; anything that could escape it is refused."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\x00" in name:
        raise ValueError(f"sandbox file name must be a non-empty relative path, got {name!r}")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"sandbox file name {name!r} must not contain empty, '.' or '..' parts")
    return name


class UidLeases:
    """Hands out host uids from a range, one per concurrent execution, across threads and
    processes (an flock per uid; a crashed holder releases its lock with its process)."""

    def __init__(self, base: int, count: int, lock_dir: str = "/tmp/roll-sandbox-uids"):
        self.uids = [u for u in range(base, base + count) if not _uid_has_account(u)]
        if not self.uids:
            raise SandboxError(f"every uid in [{base}, {base + count}) belongs to an account; pick another range")
        self.lock_dir = lock_dir
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)

    def acquire(self, timeout_s: float = 60.0) -> tuple[int, int]:
        """Return (uid, lock fd); release with :meth:`release`."""
        deadline = time.monotonic() + timeout_s
        while True:
            start = random.randrange(len(self.uids))
            for uid in self.uids[start:] + self.uids[:start]:
                fd = os.open(os.path.join(self.lock_dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return uid, fd
            if time.monotonic() > deadline:
                raise SandboxError(f"no free sandbox uid in {len(self.uids)} after {timeout_s:.0f}s")
            time.sleep(0.01)

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # closing the only descriptor drops the flock


def _uid_has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def kill_uid_processes(uid: int) -> int:
    """SIGKILL every process whose real uid is ``uid`` (unsafe mode cleanup); returns how many."""
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            os.kill(int(entry), 9)
                            killed += 1
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return killed


_MODE_LOCK = threading.Lock()
_MODE_CACHE: dict[tuple, str] = {}


def resolve_mode(config: SandboxConfig, tools: Tools, probe) -> str:
    """The isolation mode this host supports for ``config``: userns, root or unsafe.

    ``probe(mode) -> str | None`` runs a trivial sandbox and returns an error text or None.
    The answer is cached per process.
    """
    key = (tools.bwrap, config.isolation, config.python, config.init, os.geteuid(), config.allow_unsafe_fallback)
    with _MODE_LOCK:
        if key in _MODE_CACHE:
            return _MODE_CACHE[key]
        errors = []
        if tools.bwrap is None:
            errors.append(f"bubblewrap executable {config.bwrap!r} not found (Debian/Ubuntu: apt-get install bubblewrap)")
            candidates: list[str] = []
        elif config.isolation == "auto":
            candidates = ["userns"] + (["root"] if os.geteuid() == 0 else [])
        else:
            candidates = [config.isolation]
        mode = None
        for candidate in candidates:
            if candidate == "root" and os.geteuid() != 0:
                errors.append("isolation 'root' needs the sandbox to be started as root")
                continue
            err = probe(candidate)
            if err is None:
                mode = candidate
                break
            errors.append(f"{candidate}: {err}")
        if mode is None:
            detail = "; ".join(errors)
            if not config.allow_unsafe_fallback:
                raise SandboxUnavailable(
                    f"cannot start the code sandbox ({detail}). Install bubblewrap and allow unprivileged "
                    f"user namespaces (or run as root for isolation 'root'); see docs/sandbox.md. "
                    f"Setting allow_unsafe_fallback: true runs code WITHOUT isolation."
                )
            mode = "unsafe"
            logger.warning("code sandbox unavailable (%s); falling back to UNSAFE unisolated execution", detail)
        _MODE_CACHE[key] = mode
        return mode


def run_probe(argv: list[str], pass_fds: tuple[int, ...] = ()) -> str | None:
    try:
        proc = subprocess.run(argv, env=LAUNCH_ENV, cwd="/", capture_output=True, timeout=20,
                              stdin=subprocess.DEVNULL, pass_fds=pass_fds, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if proc.returncode != 0:
        return (proc.stderr.decode(errors="replace").strip() or f"exit code {proc.returncode}")[:500]
    return None
