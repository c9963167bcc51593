"""Attacks beyond the basic adversarial suite, through the public Sandbox API (issue 18): the
namespace's init, memory outside RLIMIT_AS, kernel state shared between concurrent runs, CPU
time spread over forked processes, and each system call of the seccomp filter."""
from __future__ import annotations

import errno
import json
import threading
import time

import pytest
from sandbox_helpers import ROOMY, TIGHT

from roll.sandbox import Sandbox
from roll.sandbox.seccomp import CLONE3, DENIED, arch_name, denied_names

ARCH = arch_name()
LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def test_init_carries_the_limits_and_cannot_be_taken_over(contained):
    """The old init (coreutils timeout) started before the limits, ran as the program's uid and
    could be ptraced: a program attached to it and ran a 4 GiB mmap there."""
    r = contained.run(
        LIBC
        + "out = {}\n"
        "out['attach'] = libc.ptrace(16, 1, 0, 0)\n"  # PTRACE_ATTACH
        "out['attach_errno'] = ctypes.get_errno()\n"
        "if out['attach'] == 0:\n"
        "    os.waitpid(1, 0x40000000)\n"
        "    libc.ptrace(17, 1, 0, 0)\n"  # PTRACE_DETACH
        "try:\n"
        "    open('/proc/1/mem', 'r+b').close()\n"
        "    out['mem'] = 'opened'\n"
        "except OSError as e:\n"
        "    out['mem'] = e.errno\n"
        "try:\n"
        "    os.listdir('/proc/1/fd')\n"
        "    out['fd'] = 'listed'\n"
        "except OSError as e:\n"
        "    out['fd'] = e.errno\n"
        "limits = open('/proc/1/limits').read().splitlines()\n"
        "out['as'] = [l.split()[3] for l in limits if l.startswith('Max address space')][0]\n"
        "out['nproc'] = [l.split()[2] for l in limits if l.startswith('Max processes')][0]\n"
        "print(__import__('json').dumps(out))\n"
    )
    out = json.loads(r.stdout)
    assert out["attach"] == -1 and out["attach_errno"] == errno.EPERM, out
    assert out["mem"] != "opened" and out["fd"] != "listed", out
    assert int(out["as"]) == TIGHT.memory_mb * 1024 * 1024, out
    assert int(out["nproc"]) == TIGHT.max_processes, out


def test_memfd_does_not_escape_the_memory_limit(contained):
    """60 MiB in memfds with memory_mb=48 (memfd pages are not address space)."""
    contained.sandbox = Sandbox(TIGHT.replace(memory_mb=48))
    r = contained.run(
        "import os\n"
        "held = []\n"
        "try:\n"
        "    for i in range(4):\n"
        "        fd = os.memfd_create('x')\n"
        "        os.write(fd, b'x' * (15 * 2**20))\n"
        "        held.append(fd)\n"
        "except OSError as e:\n"
        "    print('denied', e.errno)\n"
        "print('held', len(held) * 15, 'MiB')\n"
    )
    assert "held 0 MiB" in r.stdout and f"denied {errno.EPERM}" in r.stdout, r


def test_sysv_shared_memory_does_not_escape_the_memory_limit(contained):
    contained.sandbox = Sandbox(TIGHT.replace(memory_mb=48))
    r = contained.run(
        LIBC
        + "libc.shmat.restype = ctypes.c_void_p\n"
        "held = 0\n"
        "for i in range(4):\n"
        "    sid = libc.shmget(0, 15 * 2**20, 0o1600)\n"  # IPC_PRIVATE, IPC_CREAT | 0600
        "    if sid < 0:\n"
        "        print('denied', ctypes.get_errno())\n"
        "        break\n"
        "    addr = libc.shmat(sid, None, 0)\n"
        "    ctypes.memset(addr, 1, 15 * 2**20)\n"
        "    libc.shmdt(ctypes.c_void_p(addr))\n"
        "    held += 15\n"
        "print('held', held, 'MiB')\n"
    )
    assert "held 0 MiB" in r.stdout and f"denied {errno.EPERM}" in r.stdout, r


def _concurrently(first: str, second: str, delay_s: float = 1.0):
    """Start ``first``, then ``second`` ``delay_s`` later, in two sandboxes; both results."""
    results = {}
    a = threading.Thread(target=lambda: results.update(a=Sandbox(ROOMY).run_python(first)))
    a.start()
    time.sleep(delay_s)
    results["b"] = Sandbox(ROOMY).run_python(second)
    a.join()
    return results["a"], results["b"]


def test_concurrent_runs_do_not_share_a_keyring():
    """Run B read run A's key from the user keyring (same host uid for every run)."""
    writer = (
        LIBC
        + "kid = libc.syscall(248, b'user', b'roll-secret', b's3cret-payload', 14, -4)\n"  # add_key, @u
        "print('add_key', kid, ctypes.get_errno())\n"
        "import time; time.sleep(3)\n"
    ) if ARCH == "x86_64" else (
        LIBC + "kid = libc.syscall(217, b'user', b'roll-secret', b's3cret-payload', 14, -4)\n"
        "print('add_key', kid, ctypes.get_errno())\nimport time; time.sleep(3)\n"
    )
    nr_keyctl = 250 if ARCH == "x86_64" else 219
    reader = (
        LIBC
        + "import time\n"
        "k = lambda *a: libc.syscall(%d, *a)\n"
        "own = k(0, -4, 1)\n"  # KEYCTL_GET_KEYRING_ID of our own user keyring
        "buf = ctypes.create_string_buffer(256)\n"
        "end = time.monotonic() + 2\n"
        "while time.monotonic() < end:\n"
        "    try:\n"  # keyrings the same host uid may view, from every user namespace
        "        rings = [int(l.split()[0], 16) for l in open('/proc/keys') if '_uid.' in l]\n"
        "    except OSError:\n"
        "        rings = []\n"
        "    rings = [r for r in rings if r != own]\n"
        "    for ring in rings:\n"
        "        k(8, ring, -2)\n"  # KEYCTL_LINK it into our process keyring: we possess it now
        "        kid = k(10, -2, b'user', b'roll-secret', 0)\n"  # KEYCTL_SEARCH
        "        if kid > 0:\n"
        "            n = k(11, kid, buf, 256)\n"  # KEYCTL_READ
        "            print('read', buf.raw[:max(n, 0)])\n"
        "            k(7, ring)\n"  # KEYCTL_CLEAR the other run's keyring
        "            end = 0\n"
        "    time.sleep(0.05)\n"
        "print('done')\n"
    ) % nr_keyctl
    a, b = _concurrently(writer, reader)
    assert a.ok and b.ok, (a, b)
    assert "s3cret" not in b.stdout, b.stdout


INOTIFY_HOG = (
    "import os, time\n"
    "def hog():\n"
    "    fds = []\n"
    "    try:\n"
    "        while True:\n"
    "            fds.append(os.inotify_init1(0) if hasattr(os, 'inotify_init1') else __import__('ctypes')"
    ".CDLL(None, use_errno=True).inotify_init1(0))\n"
    "            if fds[-1] < 0:\n"
    "                break\n"
    "    except OSError:\n"
    "        pass\n"
    "    time.sleep(3)\n"
    "for _ in range(3):\n"
    "    if os.fork() == 0:\n"
    "        hog()\n"
    "        os._exit(0)\n"
    "hog()\n"
)
INOTIFY_PROBE = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fd = libc.inotify_init1(0)\n"
    "print('inotify', 'ok' if fd >= 0 else ctypes.get_errno())\n"
)


def test_concurrent_runs_do_not_share_inotify_instances():
    """Run A took every inotify instance of the shared host uid; run B got EMFILE."""
    alone = Sandbox(ROOMY).run_python(INOTIFY_PROBE)
    _, next_to_hog = _concurrently(INOTIFY_HOG, INOTIFY_PROBE, delay_s=1.5)
    assert alone.ok and next_to_hog.ok
    assert next_to_hog.stdout == alone.stdout, (alone.stdout, next_to_hog.stdout)


def test_cpu_time_is_counted_for_the_whole_run():
    """Three forked burners used 1.55 CPU-s with cpu_time_s=1 (RLIMIT_CPU is per process)."""
    sb = Sandbox(ROOMY.replace(cpu_time_s=1.0, timeout_s=20.0))
    r = sb.run_python(
        "import os\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            pass\n"
        "while True:\n"
        "    pass\n"
    )
    assert r.limit == "cpu_time" and not r.ok, r
    # the budget plus at most a few polling intervals of 4 burners on this machine's cores
    assert 0.9 <= r.cpu_time_s <= 1.5, r.cpu_time_s
    # the CPU budget ended it, not the wall timeout (a loaded 2-core machine gives the burners
    # 1 CPU-s in about 10 s of wall time)
    assert r.wall_time_s < 20


def test_cpu_time_of_reaped_children_counts(sandbox):
    sb = Sandbox(ROOMY.replace(cpu_time_s=1.0, timeout_s=20.0))
    r = sb.run_python(
        "import os\n"
        "for _ in range(6):\n"  # sequential children, each under 1 CPU-s, 2.4 CPU-s in all
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        import time\n"
        "        end = time.process_time() + 0.4\n"
        "        while time.process_time() < end:\n"
        "            pass\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "print('finished')\n"
    )
    assert r.limit == "cpu_time" and "finished" not in r.stdout, r
    assert r.cpu_time_s <= 1.5


def test_every_result_reports_its_resource_control(sandbox):
    r = sandbox.run_python("print('x')")
    assert r.ok and r.resource_control == sandbox.resource_control
    assert r.resource_control in ("cgroup", "rlimit")


def test_every_result_reports_the_init_that_ran(sandbox, init_kind):
    r = sandbox.run_python("print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode())")
    assert r.ok and r.init == init_kind == sandbox.init, r
    assert r.stdout.strip() == ("/.sandbox-init" if init_kind == "c" else ROOMY.python), r.stdout


def test_the_init_runs_under_the_seccomp_filter(sandbox):
    """bwrap loads the filter before it execs the init, so the init's own system calls (spawn,
    wait, /proc reads, kill) must be allowed by it, and a program that took over the init would
    still be filtered."""
    r = sandbox.run_python("print(open('/proc/1/status').read().split('Seccomp:')[1].split()[0])")
    assert r.ok and r.stdout.strip() == "2", r


def test_exit_codes_above_128_are_exit_codes(sandbox):
    r = sandbox.run_python("import sys\nsys.exit(137)\n")
    assert (r.exit_code, r.signal) == (137, None)


# ------------------------------------------------------------------- each denied system call
@pytest.fixture(scope="module")
def syscall_errnos() -> dict[str, int]:
    """Each denied system call, called with zero arguments in one sandboxed program: its errno
    (0 when it succeeded)."""
    numbers = {d.name: getattr(d, ARCH) for d in DENIED if getattr(d, ARCH) is not None}
    numbers[CLONE3.name] = getattr(CLONE3, ARCH)
    code = (
        LIBC
        + "import json, sys\n"
        f"numbers = {numbers!r}\n"
        "out = {}\n"
        "for name, nr in numbers.items():\n"
        "    ctypes.set_errno(0)\n"
        "    rc = libc.syscall(nr, 0, 0, 0, 0, 0)\n"
        "    out[name] = ctypes.get_errno() if rc == -1 else 0\n"
        "status = open('/proc/self/status').read()\n"
        "out['Seccomp'] = int(status.split('Seccomp:')[1].split()[0])\n"
        "print(json.dumps(out))\n"
    )
    r = Sandbox(ROOMY).run_python(code)
    assert r.ok, r
    return json.loads(r.stdout)


def test_programs_run_under_a_seccomp_filter(syscall_errnos):
    assert syscall_errnos["Seccomp"] == 2  # SECCOMP_MODE_FILTER


@pytest.mark.parametrize("name", denied_names())
def test_denied_system_call(name, syscall_errnos):
    expected = errno.ENOSYS if name == "clone3" else errno.EPERM
    assert syscall_errnos[name] == expected, f"{name}: errno {syscall_errnos[name]}"


def test_clone_with_namespace_flags_is_denied_and_plain_processes_work(sandbox):
    nr_clone = 56 if ARCH == "x86_64" else 220
    r = sandbox.run_python(
        LIBC
        + "import subprocess, sys, threading\n"
        f"rc = libc.syscall({nr_clone}, 0x40000000 | 17, 0, 0, 0, 0)\n"  # CLONE_NEWNET | SIGCHLD
        "if rc == 0:\n"
        "    os._exit(0)\n"
        "print('newnet', rc, ctypes.get_errno())\n"
        "t = threading.Thread(target=lambda: print('thread'))\n"
        "t.start(); t.join()\n"
        "print(subprocess.run([sys.executable, '-c', 'print(\"child\")'], capture_output=True, text=True).stdout.strip())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(7)\n"
        "print('fork', os.waitpid(pid, 0)[1] >> 8)\n"
    )
    assert r.ok, r
    assert r.stdout.splitlines() == [f"newnet -1 {errno.EPERM}", "thread", "child", "fork 7"], r.stdout
