"""Configuration of the sandbox: isolation mode, resource limits, what the program may see."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

IsolationMode = Literal["auto", "userns", "root"]
ResourceControl = Literal["cgroup", "rlimit"]
InitChoice = Literal["auto", "c", "python"]


@dataclass
class SandboxConfig:
    """Limits and isolation settings for one sandboxed execution (shared by a pool)."""

    timeout_s: float = 10.0
    """Wall-clock limit of one execution; the whole sandbox is killed when it passes."""
    cpu_time_s: float = 5.0
    """CPU time of the whole run (every process, counted by the sandbox's init, or by the run's
    cgroup), and of each process (RLIMIT_CPU, rounded up to whole seconds)."""
    memory_mb: int = 512
    """Address-space limit (RLIMIT_AS) of each process, in MiB; with a cgroup, also the memory of
    the whole run (memory.max = memory_mb + tmpfs_mb). Without one, the memory of a whole
    execution is bounded by max_processes x memory_mb (plus tmpfs_mb of files)."""
    file_size_mb: int = 16
    """Largest file a process may write (RLIMIT_FSIZE), in MiB."""
    max_processes: int = 16
    """Processes and threads the sandbox user may hold at once (RLIMIT_NPROC; with a cgroup also
    pids.max, plus the launcher's own two)."""
    max_open_files: int = 64
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    tmpfs_mb: int = 64
    """Size of the writable tmpfs mounted at work_dir, the only writable place."""
    max_output_bytes: int = 1 << 20
    """Captured bytes per stream (stdout, stderr); a program that writes more is killed and the
    stream is marked truncated."""
    work_dir: str = "/tmp"
    """Path of the writable tmpfs inside the sandbox; files are placed and programs start here."""
    python: str = "/usr/bin/python3"
    """Interpreter used by run_python (and by the Python init), inside the sandbox (the system
    Python: the build's own Python may live where the unprivileged user cannot read)."""
    init: InitChoice = "auto"
    """The namespace's init: `c` (roll/sandbox/init.c, compiled at first use with the system C
    compiler and cached per user; an error where it cannot be built), `python`
    (roll/sandbox/init.py, run by `python`: about 12 ms more CPU per run), or `auto` (c, else
    python with one logged warning; the ROLL_SANDBOX_INIT environment variable, c or python,
    overrides auto). Every result says which ran (`init`)."""
    isolation: IsolationMode = "auto"
    """How the unprivileged user is set up: `userns` (bwrap in a user namespace; seen as 65534
    inside), `root` (bwrap started as root without a user namespace, privileges dropped inside
    with setpriv to a leased uid), or `auto` (userns when the kernel allows it, else root when
    running as root)."""
    root_uid_base: int = 61000
    """First host uid leased when the sandbox is started as root (both modes); each concurrent
    execution holds its own uid, so that nothing the kernel counts per user (RLIMIT_NPROC,
    inotify instances, keyrings, message queues) is shared between executions."""
    root_uid_count: int = 256
    """Number of uids in the lease range."""
    cgroup: str = "auto"
    """Per-run resource control with a cgroup v2 of its own: `auto` (this process's cgroup when
    it can enable the memory, pids and cpu controllers for its children), a path (absolute, or
    relative to the cgroup v2 mount) of a delegated cgroup to create run cgroups in, or `off`.
    Where none is usable, rlimits and the init's CPU count are the fallback; every result says
    which (`resource_control`)."""
    cpu_cores: float = 1.0
    """CPU bandwidth of one run with a cgroup (cpu.max), in cores."""
    bwrap: str = "bwrap"
    """The bubblewrap executable (name looked up on PATH, or a path)."""
    allow_unsafe_fallback: bool = False
    """Where bwrap is missing or unusable, run programs as plain subprocesses with rlimits only
    (NOT isolated: no namespaces; a warning is logged on every use). Off by default."""
    ro_binds: list[str] = field(default_factory=lambda: ["/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin"])
    """Host paths made visible read-only (symlinks such as /bin -> usr/bin are recreated as
    symlinks); paths that do not exist are skipped."""
    etc_files: list[str] = field(default_factory=lambda: ["/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"])
    """Individual /etc entries bound read-only (the rest of /etc, including passwd and shadow,
    is absent)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the program (the environment is otherwise cleared)."""

    def __post_init__(self) -> None:
        if self.init not in ("auto", "c", "python"):
            raise ValueError(f"sandbox init must be auto, c or python, not {self.init!r}")
        if self.isolation not in ("auto", "userns", "root"):
            raise ValueError(f"sandbox isolation must be auto, userns or root, not {self.isolation!r}")
        for name in ("timeout_s", "cpu_time_s", "cpu_cores"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox {name} must be > 0, got {getattr(self, name)}")
        for name in ("memory_mb", "file_size_mb", "max_processes", "max_open_files", "tmpfs_mb",
                     "max_output_bytes", "root_uid_count"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"sandbox {name} must be >= 1, got {getattr(self, name)}")
        if not self.work_dir.startswith("/") or self.work_dir.rstrip("/") in ("", "/usr", "/proc", "/dev"):
            raise ValueError(f"sandbox work_dir must be an absolute path of its own, got {self.work_dir!r}")

    def replace(self, **changes) -> SandboxConfig:
        """A copy with some fields changed (validated again)."""
        import dataclasses

        return dataclasses.replace(self, **changes)


def as_config(config: SandboxConfig | dict | None) -> SandboxConfig:
    """Accept a SandboxConfig, a plain dict (e.g. from YAML, strictly checked) or None."""
    if config is None:
        return SandboxConfig()
    if isinstance(config, SandboxConfig):
        return config
    if isinstance(config, dict):
        from roll.config.validate import build_dataclass

        return build_dataclass(SandboxConfig, config, path="sandbox")
    raise TypeError(f"sandbox config must be a SandboxConfig or a dict, not {type(config).__name__}")
