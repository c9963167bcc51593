"""The compiled seccomp filter, run by a classic-BPF interpreter written for this test, for both
supported architectures (the in-sandbox calls are in test_sandbox_hardening.py)."""
from __future__ import annotations

import errno
import struct

import pytest

from roll.sandbox.seccomp import (
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_X86_64,
    CLONE,
    CLONE3,
    DENIED,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SeccompUnsupported,
    build_filter,
)

ARCH_IDS = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
EPERM = SECCOMP_RET_ERRNO | errno.EPERM
# read, write, openat, mmap, exit_group, wait4, execve, getpid: what every program needs
ALLOWED = {"x86_64": [0, 1, 257, 9, 231, 61, 59, 39], "aarch64": [63, 64, 56, 222, 94, 260, 221, 172]}


def run_bpf(prog: bytes, arch: int, nr: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """Classic BPF over struct seccomp_data (only the instructions a seccomp filter uses)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    insns = [struct.unpack_from("=HBBI", prog, i) for i in range(0, len(prog), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld word abs
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x15:  # jeq k
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x45:  # jset k
            pc += 1 + (jt if acc & k else jf)
        elif code == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_denied_call_returns_eperm_and_the_rest_is_allowed(arch):
    prog = build_filter(arch)
    a = ARCH_IDS[arch]
    for d in DENIED:
        nr = getattr(d, arch)
        if nr is not None:
            assert run_bpf(prog, a, nr) == EPERM, d.name
    assert run_bpf(prog, a, getattr(CLONE3, arch)) == SECCOMP_RET_ERRNO | errno.ENOSYS
    for nr in ALLOWED[arch]:
        assert run_bpf(prog, a, nr) == SECCOMP_RET_ALLOW, nr
    denied = {getattr(d, arch) for d in DENIED} | {getattr(CLONE3, arch), getattr(CLONE, arch)}
    assert not denied & set(ALLOWED[arch])


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_clone_is_denied_only_with_namespace_flags(arch):
    prog, a, nr = build_filter(arch), ARCH_IDS[arch], getattr(CLONE, arch)
    fork_flags = 0x01200000 | 17  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD (glibc fork)
    thread_flags = 0x003D0F00  # pthread_create's
    assert run_bpf(prog, a, nr, (fork_flags,)) == SECCOMP_RET_ALLOW
    assert run_bpf(prog, a, nr, (thread_flags,)) == SECCOMP_RET_ALLOW
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert run_bpf(prog, a, nr, (flag | 17,)) == EPERM, hex(flag)


def test_foreign_abis_are_denied():
    prog = build_filter("x86_64")
    assert run_bpf(prog, AUDIT_ARCH_X86_64, 0x40000000 | 0) == EPERM  # x32 read
    assert run_bpf(prog, 0x40000003, 3) == EPERM  # i386 read (int 0x80)
    assert run_bpf(build_filter("aarch64"), 0x40000028, 3) == EPERM  # arm (32-bit)


def test_unknown_architecture_is_an_error():
    with pytest.raises(SeccompUnsupported, match="x86_64 and aarch64"):
        build_filter("riscv64")
