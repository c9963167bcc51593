"""The seccomp filter of sandboxed programs: a classic-BPF program built here, in pure Python, and
handed to bwrap with ``--seccomp FD`` (bwrap loads it just before it starts the sandbox's init,
so the init and everything it starts run under it).

Denied system calls fail with EPERM (``clone3`` with ENOSYS, so that the C library falls back to
``clone``, whose flags the filter can read). The list, with the reason for each entry, is
:data:`DENIED` (documented in docs/sandbox.md). Everything else is allowed: the filter closes
kernel interfaces a test program never needs and that reach state shared with the host or with
other runs (keyrings, inotify and message-queue counts, SysV shared memory), escape the resource
limits (memfd pages are not address space), inspect or control other processes (ptrace), or
widen the kernel's attack surface (bpf, perf, io_uring, userfaultfd, mounts and namespaces).

Foreign system-call ABIs are denied as a whole: on x86_64 the x32 ABI (numbers with bit 30 set)
and i386 (``int 0x80``, another audit arch), whose numbers differ from the ones checked here.
"""
from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# linux/audit.h
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

# linux/seccomp.h return actions
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000

# linux/filter.h opcodes
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JSET_K = 0x45
BPF_RET_K = 0x06

# struct seccomp_data offsets
OFF_NR, OFF_ARCH, OFF_ARG0_LO = 0, 4, 16

# clone(2) flags that create namespaces (CLONE_NEWTIME shares its bit with the exit signal in
# clone(2), and unshare/setns/clone3 are denied outright).
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


@dataclass(frozen=True)
class Denied:
    name: str
    x86_64: int | None
    aarch64: int | None
    why: str


# (name, x86_64 number, aarch64 number (asm-generic), reason). Numbers: the kernel's
# arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
DENIED: tuple[Denied, ...] = tuple(Denied(*row) for row in (
    ("ptrace", 101, 117, "attach to and control another process of the run (the init)"),
    ("process_vm_readv", 310, 270, "read another process's memory"),
    ("process_vm_writev", 311, 271, "write another process's memory"),
    ("kcmp", 312, 272, "compare kernel objects of other processes"),
    ("pidfd_getfd", 438, 438, "steal a file descriptor from another process"),
    ("process_madvise", 440, 440, "act on another process's memory"),
    ("keyctl", 250, 219, "keyrings are per host uid: shared between runs"),
    ("add_key", 248, 217, "keyrings are per host uid: shared between runs"),
    ("request_key", 249, 218, "keyrings are per host uid: shared between runs"),
    ("inotify_init", 253, None, "inotify instances are counted per host uid: shared between runs"),
    ("inotify_init1", 294, 26, "inotify instances are counted per host uid: shared between runs"),
    ("fanotify_init", 300, 262, "filesystem-wide event monitoring"),
    ("mq_open", 240, 180, "POSIX message-queue bytes are counted per host uid: shared between runs"),
    ("memfd_create", 319, 279, "memfd pages are outside the address-space limit"),
    ("memfd_secret", 447, 447, "memory outside the address-space limit"),
    ("shmget", 29, 194, "SysV shared memory outlives its mappings: outside the address-space limit"),
    ("userfaultfd", 323, 282, "a common kernel-exploit primitive"),
    ("io_uring_setup", 425, 425, "asynchronous I/O interface with a large attack surface"),
    ("io_uring_enter", 426, 426, "asynchronous I/O interface with a large attack surface"),
    ("io_uring_register", 427, 427, "asynchronous I/O interface with a large attack surface"),
    ("bpf", 321, 280, "load programs into the kernel"),
    ("perf_event_open", 298, 241, "performance counters: side channels and kernel attack surface"),
    ("mount", 165, 40, "change the filesystem view"),
    ("umount2", 166, 39, "change the filesystem view"),
    ("pivot_root", 155, 41, "change the filesystem view"),
    ("chroot", 161, 51, "change the filesystem view"),
    ("fsopen", 430, 430, "new mount API"),
    ("fsconfig", 431, 431, "new mount API"),
    ("fsmount", 432, 432, "new mount API"),
    ("fspick", 433, 433, "new mount API"),
    ("move_mount", 429, 429, "new mount API"),
    ("open_tree", 428, 428, "new mount API"),
    ("mount_setattr", 442, 442, "new mount API"),
    ("open_by_handle_at", 304, 265, "open files by handle, bypassing the path view"),
    ("name_to_handle_at", 303, 264, "file handles (see open_by_handle_at)"),
    ("unshare", 272, 97, "new namespaces"),
    ("setns", 308, 268, "join other namespaces"),
    ("kexec_load", 246, 104, "load a new kernel"),
    ("kexec_file_load", 320, 294, "load a new kernel"),
    ("init_module", 175, 105, "load a kernel module"),
    ("finit_module", 313, 273, "load a kernel module"),
    ("delete_module", 176, 106, "unload a kernel module"),
    ("swapon", 167, 224, "host swap configuration"),
    ("swapoff", 168, 225, "host swap configuration"),
    ("reboot", 169, 142, "host power state"),
    ("syslog", 103, 116, "the kernel log"),
    ("acct", 163, 89, "process accounting"),
    ("quotactl", 179, 60, "disk quotas"),
))

# clone3 takes its flags in a struct the filter cannot read: ENOSYS makes the C library use
# clone(2) instead, whose namespace flags are checked.
CLONE3 = Denied("clone3", 435, 435, "flags unreadable by the filter; the C library falls back to clone")
CLONE = Denied("clone", 56, 220, "allowed unless it creates a namespace")

ARCHES = {"x86_64": AUDIT_ARCH_X86_64, "amd64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64, "arm64": AUDIT_ARCH_AARCH64}


class SeccompUnsupported(RuntimeError):
    """No filter for this machine's architecture."""


def arch_name(machine: str | None = None) -> str:
    machine = (machine or platform.machine()).lower()
    if machine not in ARCHES:
        raise SeccompUnsupported(f"the sandbox's seccomp filter supports x86_64 and aarch64, not {machine!r}")
    return "x86_64" if ARCHES[machine] == AUDIT_ARCH_X86_64 else "aarch64"


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(machine: str | None = None) -> bytes:
    """The filter as bwrap reads it from ``--seccomp FD``: an array of ``struct sock_filter``."""
    arch = arch_name(machine)
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    prog = [
        _ins(BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        _ins(BPF_JEQ_K, 1, 0, ARCHES[arch]),
        _ins(BPF_RET_K, 0, 0, deny),  # another ABI (i386 on x86_64): numbers we do not check
        _ins(BPF_LD_W_ABS, 0, 0, OFF_NR),
    ]
    if arch == "x86_64":
        prog += [_ins(BPF_JSET_K, 0, 1, X32_SYSCALL_BIT), _ins(BPF_RET_K, 0, 0, deny)]
    for entry in DENIED:
        nr = getattr(entry, arch)
        if nr is not None:
            prog += [_ins(BPF_JEQ_K, 0, 1, nr), _ins(BPF_RET_K, 0, 0, deny)]
    prog += [_ins(BPF_JEQ_K, 0, 1, getattr(CLONE3, arch)), _ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    # clone: the low 32 bits of the flags argument (every namespace flag lives there).
    prog += [
        _ins(BPF_JEQ_K, 0, 3, getattr(CLONE, arch)),
        _ins(BPF_LD_W_ABS, 0, 0, OFF_ARG0_LO),
        _ins(BPF_JSET_K, 0, 1, CLONE_NAMESPACE_FLAGS),
        _ins(BPF_RET_K, 0, 0, deny),
        _ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    if len(prog) > 4096:  # BPF_MAXINSNS
        raise AssertionError("seccomp filter too long")
    return b"".join(prog)


_CACHE: dict[str, bytes] = {}


def filter_bytes() -> bytes:
    """The filter for this machine (built once per process)."""
    arch = arch_name()
    if arch not in _CACHE:
        _CACHE[arch] = build_filter(arch)
    return _CACHE[arch]


def denied_names(machine: str | None = None) -> list[str]:
    """The system calls denied on this architecture (clone3 included)."""
    arch = arch_name(machine)
    return [d.name for d in DENIED if getattr(d, arch) is not None] + [CLONE3.name]
