"""Shared by the sandbox tests: small limits and the process-table check of containment."""
from __future__ import annotations

import os
import secrets

from roll.sandbox import Sandbox, SandboxConfig

# Small limits keep the adversarial cases fast (each is cut off within about two seconds).
TIGHT = SandboxConfig(timeout_s=2.0, cpu_time_s=1.0, memory_mb=256, max_processes=16, tmpfs_mb=16,
                      file_size_mb=4, max_output_bytes=64 * 1024)
# The same limits with room on the clock, for runs that must succeed on a heavily loaded machine.
ROOMY = TIGHT.replace(timeout_s=30.0, cpu_time_s=10.0)


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, real uid, command line) for every process on the host."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/status") as f:
                uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, StopIteration, IndexError):
            continue
        table[int(entry)] = (ppid, uid, cmd)
    return table


def descendants(table: dict, root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, stack = set(), [root]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


class Contained:
    """Runs a hostile program and checks the aftermath: no process it started is left (by a
    token every process of it carries on its command line, and by descent from this test
    process), and the next execution works."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self.token = "roll-adv-" + secrets.token_hex(6)

    def run(self, code: str, **kwargs):
        before = process_table()
        kids_before = descendants(before, os.getpid())
        result = self.sandbox.run_python(code, args=[self.token, *kwargs.pop("args", [])], **kwargs)
        after = process_table()
        with_token = [(pid, cmd) for pid, (_, _, cmd) in after.items() if self.token in cmd]
        new_kids = [(pid, after[pid][2]) for pid in descendants(after, os.getpid()) - kids_before if pid in after]
        assert not with_token, f"processes of the sandboxed program survived: {with_token}"
        assert not new_kids, f"new child processes of the test survived: {new_kids}"
        nxt = Sandbox(ROOMY).run_python("print(6 * 7)")
        assert nxt.ok and nxt.stdout == "42\n", f"the next execution failed: {nxt}"
        return result
