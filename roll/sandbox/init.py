"""The sandbox's init: PID 1 of every run's PID namespace, started by bwrap with the sandbox's
interpreter (``python3 -I -S -c <this file> CONFIG COMMAND...``; it imports only the standard
library, and runs inside the sandbox, so it never imports roll). roll/sandbox/init.c implements
the same contract compiled, and is the default; this one runs where no C compiler is available
(roll/sandbox/init_build.py chooses). A change to one is a change to both.

Before the program exists, the init

- applies the run's rlimits to itself, so every process of the run inherits them and the init
  carries them too (a program that took over its init would gain nothing);
- makes itself non-dumpable: its /proc files (mem, fd, environ) belong to root, and ptrace is
  refused (the seccomp filter denies ptrace and process_vm_* anyway);
- ignores every signal sent from inside the namespace (the kernel drops signals to a PID
  namespace's init that it does not handle; SIGINT's Python handler is removed for that).

Then it starts the program (posix_spawn, default signal dispositions), reaps every process of
the namespace (orphans are re-parented to it), and counts the CPU time of the whole run: what it
reaped (RUSAGE_CHILDREN) plus the processes still alive (/proc, utime + stime + cutime +
cstime). When that passes the run's budget, or the backstop deadline passes, it kills every
process of the namespace. When the program exits, it kills what is left, reaps it and writes one
JSON report to the report descriptor (never inherited by the program): the program's wait
status, the run's CPU seconds and the limit that ended it, if any.
"""
# Only built-in modules: importing os, signal, ctypes or json would cost more than the whole
# rest of the sandbox's start on a loaded machine (they pull in re, enum, collections.abc).
import _ctypes
import _signal
import posix
import resource
import sys
import time

WALL = 0x40000000  # __WALL: children started with any exit signal
TICK_S = 0.05
PR_SET_DUMPABLE = 4


class _CInt(_ctypes._SimpleCData):
    _type_ = "i"


class _CFunction(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _CInt


def prctl(*args: int) -> int:
    return _CFunction(_ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl"))(*args)


def live_cpu_s(tick: int) -> float:
    total = 0
    for entry in posix.listdir("/proc"):
        if not entry.isdigit() or entry == "1":
            continue
        try:
            with open("/proc/" + entry + "/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile: it was reaped, so it is in RUSAGE_CHILDREN
    return total / tick


def reaped_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def reap(pid: int, block: bool):
    """Reap children; returns the wait status of ``pid`` if it was among them."""
    status = None
    while True:
        try:
            p, st = posix.waitpid(-1, WALL | (0 if block else posix.WNOHANG))
        except ChildProcessError:
            return status
        if p == 0:
            return status
        if p == pid:
            status = st


def report(fd: int, status, cpu_s: float, limit: str) -> None:
    """One JSON object (written by hand: the json module is too slow to import)."""
    posix.write(fd, ('{"status": %s, "cpu_s": %r, "limit": "%s"}' % (
        "null" if status is None else int(status), float(cpu_s), limit)).encode())


def main() -> int:
    # settings: "report_fd;cpu_s;backstop_s;RLIMIT_X=v,RLIMIT_Y=v" (isolation.init_args)
    if posix.getpid() != 1:
        # kill(-1) below would reach every process of the caller's uid outside a PID namespace
        posix.write(2, b"sandbox init: refusing to run outside a PID namespace of its own\n")
        return 126
    fd_text, cpu_text, backstop_text, limits_text = sys.argv[1].split(";")
    command = sys.argv[2:]
    out = int(fd_text)
    posix.set_inheritable(out, False)
    if prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        posix.write(2, b"sandbox init: prctl(PR_SET_DUMPABLE) failed\n")
        return 126
    for item in limits_text.split(","):
        name, value = item.split("=")
        resource.setrlimit(getattr(resource, name), (int(value), int(value)))
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
    tick = posix.sysconf("SC_CLK_TCK")
    budget = float(cpu_text)
    deadline = time.monotonic() + float(backstop_text)
    try:
        pid = posix.posix_spawnp(
            command[0], command, posix.environ, setsigmask=(),
            # Python ignores SIGPIPE and SIGXFSZ, and ignored signals survive exec.
            setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT, _signal.SIGCHLD),
        )
    except OSError as e:
        posix.write(2, ("sandbox: cannot execute %s: %s\n" % (command[0], e.strerror)).encode())
        report(out, None, 0.0, "")
        return 127
    status, limit = None, ""
    next_check = time.monotonic() + TICK_S
    while status is None:
        _signal.sigtimedwait({_signal.SIGCHLD}, TICK_S)
        status = reap(pid, block=False)
        if status is not None:
            break
        now = time.monotonic()
        if now >= deadline:
            limit = "timeout"
            break
        if now >= next_check:
            next_check = now + TICK_S
            if reaped_cpu_s() + live_cpu_s(tick) > budget:
                limit = "cpu_time"
                break
    # Whatever the program left behind goes with it (kill(-1) spares only this init).
    try:
        posix.kill(-1, _signal.SIGKILL)
    except ProcessLookupError:
        pass
    more = reap(pid, block=True)
    status = status if status is not None else more
    report(out, status, reaped_cpu_s(), limit)
    if status is None:
        return 137
    return posix.WEXITSTATUS(status) if posix.WIFEXITED(status) else 128 + posix.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main())
