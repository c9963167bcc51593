"""The sandbox's init: PID 1 of every run's PID namespace, started by bwrap with the sandbox's
interpreter (``python3 -I -S -c <this file> CONFIG COMMAND...``; it imports only the standard
library, and runs inside the sandbox, so it never imports roll).

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
import ctypes
import json
import os
import resource
import signal
import sys
import time

WALL = 0x40000000  # __WALL: children started with any exit signal
TICK_S = 0.05
PR_SET_DUMPABLE = 4


def live_cpu_s(tick: int) -> float:
    total = 0
    for entry in os.listdir("/proc"):
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
            p, st = os.waitpid(-1, WALL | (0 if block else os.WNOHANG))
        except ChildProcessError:
            return status, True
        if p == 0:
            return status, False
        if p == pid:
            status = st


def main() -> int:
    cfg = json.loads(sys.argv[1])
    command = sys.argv[2:]
    report = int(cfg["report_fd"])
    os.set_inheritable(report, False)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        os.write(2, b"sandbox init: prctl(PR_SET_DUMPABLE) failed\n")
        return 126
    for name, value in cfg["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    tick = os.sysconf("SC_CLK_TCK")
    budget = float(cfg["cpu_s"])
    deadline = time.monotonic() + float(cfg["backstop_s"])
    try:
        pid = os.posix_spawnp(
            command[0], command, dict(os.environ), setsigmask=(),
            # Python ignores SIGPIPE and SIGXFSZ, and ignored signals survive exec.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD),
        )
    except OSError as e:
        os.write(2, f"sandbox: cannot execute {command[0]}: {e.strerror}\n".encode())
        os.write(report, json.dumps({"spawn_error": e.strerror, "cpu_s": 0.0}).encode())
        return 127
    status, limit = None, ""
    next_check = time.monotonic() + TICK_S
    while status is None:
        signal.sigtimedwait({signal.SIGCHLD}, TICK_S)
        status, _ = reap(pid, block=False)
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
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    more, _ = reap(pid, block=True)
    status = status if status is not None else more
    os.write(report, json.dumps({"status": status, "cpu_s": reaped_cpu_s(), "limit": limit}).encode())
    if status is None:
        return 137
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main())
