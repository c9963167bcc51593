"""Which init a sandboxed run gets, and the build of the compiled one.

Two implementations of one contract (docs/sandbox.md, "The init"): ``init.c``, compiled at first
use with the system C compiler, and ``init.py``, run by the sandbox's Python. The compiled one
is the default because a Python start for the init costs more CPU than the rest of the
sandbox's start together; the Python one is the fallback where no compiler is available.

The binary is built once per user and source: ``<cache>/init-<arch>-<hash of source and flags>``
under ``$XDG_CACHE_HOME/roll/sandbox-init`` (``~/.cache/...``; ``$TMPDIR/roll-sandbox-init-<uid>``
where the home directory is not writable), written to a temporary name and
renamed into place, so processes that build at once never see a partial file. The cache
directory and the binary must belong to this user and be writable by nobody else: in root
mode the init runs as root before it drops privileges, so a binary someone else could replace
would be a way to root. Each process reads the binary once into a sealed memfd; every run
hands bwrap a fresh descriptor of it, which bwrap copies to a read-only file inside the
sandbox (the cache directory itself may be unreadable by the sandbox's user).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass

from roll.utils.logging import get_logger

logger = get_logger(__name__)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "init.c")
PATH_INSIDE = "/.sandbox-init"
"""Where the compiled init lies inside the sandbox (a read-only copy)."""
ENV_CHOICE = "ROLL_SANDBOX_INIT"
"""Overrides the choice of configs that leave ``init: auto`` (c or python)."""
# -static first: no dynamic loader work at every start, and no dependency on the libraries
# bound into the sandbox; hosts without a static libc get the dynamic build.
FLAG_SETS = (["-O2", "-Wall", "-Wextra", "-static"], ["-O2", "-Wall", "-Wextra"])
COMPILERS = ("cc", "gcc", "clang")
_BUILD_TIMEOUT_S = 120.0


class InitBuildError(RuntimeError):
    """The compiled init could not be built or trusted (the message says why)."""


@dataclass(frozen=True)
class SandboxInit:
    """The init of this process's runs: ``kind`` is "c" or "python"; a C init has its binary in
    ``memfd`` (sealed, read-only)."""

    kind: str
    memfd: int | None = None
    path: str | None = None
    """The cached binary the memfd was read from (for logs and tests)."""

    def open_for_run(self) -> int | None:
        """A new descriptor of the binary at offset 0 (bwrap reads it to the end), or None for
        the Python init. The caller closes it."""
        if self.memfd is None:
            return None
        return os.open(f"/proc/self/fd/{self.memfd}", os.O_RDONLY | os.O_CLOEXEC)


def effective_choice(choice: str) -> str:
    """``choice`` with ``auto`` replaced by ROLL_SANDBOX_INIT when that is set."""
    if choice != "auto":
        return choice
    env = os.environ.get(ENV_CHOICE, "").strip()
    if env and env not in ("auto", "c", "python"):
        raise ValueError(f"{ENV_CHOICE} must be auto, c or python, not {env!r}")
    return env or "auto"


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "roll", "sandbox-init")


def find_compiler(search_path: str | None = None) -> str | None:
    for name in COMPILERS:
        found = shutil.which(name, path=search_path)
        if found:
            return found
    return None


def _check_owned(path: str, st: os.stat_result) -> None:
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InitBuildError(f"{path} must belong to uid {os.geteuid()} and be writable by nobody else "
                             f"(owner {st.st_uid}, mode {stat.filemode(st.st_mode)})")


def _trusted_dir(cache_dir: str) -> str:
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        st = os.stat(cache_dir)
    except OSError as e:
        raise InitBuildError(f"cannot create the init cache {cache_dir}: {e}") from e
    if not stat.S_ISDIR(st.st_mode):
        raise InitBuildError(f"{cache_dir} is not a directory")
    _check_owned(cache_dir, st)
    return cache_dir


def _default_trusted_dir() -> str:
    """The per-user cache, or a directory of this user's own under the temp dir where the home
    directory is not writable (read-only homes in containers)."""
    try:
        return _trusted_dir(default_cache_dir())
    except InitBuildError as home_error:
        try:
            return _trusted_dir(os.path.join(tempfile.gettempdir(), f"roll-sandbox-init-{os.geteuid()}"))
        except InitBuildError as tmp_error:
            raise InitBuildError(f"{home_error}; {tmp_error}") from tmp_error


def build_c_init(cache_dir: str | None = None, compiler: str | None = None, source: str = SOURCE) -> str:
    """Path of the compiled init for ``source``, built into ``cache_dir`` if not there yet."""
    with open(source, "rb") as f:
        code = f.read()
    machine = platform.machine().lower() or "unknown"
    key = hashlib.sha256(code + repr(FLAG_SETS).encode() + machine.encode()).hexdigest()[:20]
    cache_dir = _trusted_dir(cache_dir) if cache_dir else _default_trusted_dir()
    target = os.path.join(cache_dir, f"init-{machine}-{key}")
    if os.path.exists(target):
        _check_owned(target, os.stat(target))
        return target
    compiler = compiler or find_compiler()
    if compiler is None:
        raise InitBuildError(f"no C compiler ({', '.join(COMPILERS)}) on PATH")
    errors = []
    for flags in FLAG_SETS:
        fd, tmp = tempfile.mkstemp(prefix=".build-", dir=cache_dir)
        os.close(fd)
        try:
            proc = subprocess.run([compiler, *flags, "-o", tmp, source], capture_output=True,
                                  timeout=_BUILD_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
            if proc.returncode == 0:
                os.chmod(tmp, 0o755)
                os.replace(tmp, target)  # atomic: a concurrent builder's identical file is replaced whole
                return target
            errors.append(f"{' '.join(flags)}: {proc.stderr.decode(errors='replace').strip()[-400:]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{' '.join(flags)}: {e}")
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise InitBuildError(f"{compiler} could not build {source}: " + " | ".join(errors))


def load_c_init(path: str) -> SandboxInit:
    """Read the binary into a sealed memfd after checking that it runs here: outside a PID
    namespace the init must refuse, with exit status 126."""
    try:
        probe = subprocess.run([path, "probe"], capture_output=True, timeout=30, check=False,
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InitBuildError(f"the compiled init {path} does not run: {e}") from e
    if probe.returncode != 126 or b"refusing" not in probe.stderr:
        raise InitBuildError(f"the compiled init {path} misbehaved (exit {probe.returncode}: "
                             f"{probe.stderr.decode(errors='replace').strip()[:200]})")
    with open(path, "rb") as f:
        _check_owned(path, os.fstat(f.fileno()))
        data = f.read()
    fd = os.memfd_create("roll-sandbox-init", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return SandboxInit("c", memfd=fd, path=path)


_LOCK = threading.Lock()
_RESOLVED: dict[tuple, SandboxInit] = {}
_FAILED: dict[tuple, InitBuildError] = {}


def resolve_init(choice: str, cache_dir: str | None = None, compiler: str | None = None) -> SandboxInit:
    """The init for ``choice`` (auto, c or python; ``auto`` honours ROLL_SANDBOX_INIT), built
    and loaded once per process. ``auto`` falls back to the Python init with one logged
    warning; ``c`` raises InitBuildError instead."""
    choice = effective_choice(choice)
    if choice == "python":
        return SandboxInit("python")
    cache_dir = cache_dir or default_cache_dir()
    key = (choice, cache_dir, compiler)
    with _LOCK:
        if key in _RESOLVED:
            return _RESOLVED[key]
        if key in _FAILED:  # not rebuilt at every run
            raise _FAILED[key]
        try:
            init = load_c_init(build_c_init(cache_dir, compiler))
        except InitBuildError as e:
            if choice == "c":
                _FAILED[key] = e
                raise
            logger.warning("sandbox: using the Python init (about 12 ms more CPU per run): %s", e)
            init = SandboxInit("python")
        _RESOLVED[key] = init
        return init
