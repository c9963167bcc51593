"""Per-run cgroup v2 resource control: how a usable parent is found (always), and the whole
run's limits where this machine delegates a cgroup (skipped, with the reason, where not)."""
from __future__ import annotations

import os

import pytest
from sandbox_helpers import ROOMY

from roll.sandbox import Sandbox
from roll.sandbox.cgroup import cgroup2_mount, detect_parent, own_cgroup, usable_parent

PARENT, WHY_NOT = detect_parent("auto")
needs_cgroup = pytest.mark.skipif(PARENT is None, reason=f"no delegated cgroup v2 here: {WHY_NOT}")


def test_the_cgroup2_mount_and_own_cgroup_are_read_from_proc(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "30 22 0:26 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
    )
    assert cgroup2_mount(str(mountinfo)) == "/sys/fs/cgroup/unified"
    mountinfo.write_text("22 1 0:21 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    assert cgroup2_mount(str(mountinfo)) is None
    cg = tmp_path / "cgroup"
    cg.write_text("4:memory:/x\n0::/user.slice/roll.service\n")
    assert own_cgroup(str(cg)) == "/user.slice/roll.service"


def test_a_directory_that_is_not_a_cgroup_is_refused(tmp_path):
    assert "not a cgroup v2 directory" in usable_parent(str(tmp_path))
    assert detect_parent("off") == (None, "cgroup resource control is off (sandbox cgroup: off)")
    assert detect_parent(str(tmp_path))[0] is None


def test_without_a_cgroup_the_sandbox_says_so():
    sb = Sandbox(ROOMY.replace(cgroup="off"))
    r = sb.run_python("print(1)")
    assert r.ok and r.resource_control == "rlimit" == sb.resource_control


@needs_cgroup
def test_a_run_gets_its_own_cgroup_and_leaves_none_behind():
    sb = Sandbox(ROOMY)
    before = set(os.listdir(PARENT))
    r = sb.run_python("print(open('/proc/self/cgroup').read())")
    assert r.ok and r.resource_control == "cgroup"
    assert set(os.listdir(PARENT)) == before


@needs_cgroup
def test_cgroup_counts_the_memory_of_the_whole_run():
    """Four processes of 20 MiB each under memory_mb=48 (+ tmpfs 16): over memory.max together."""
    sb = Sandbox(ROOMY.replace(memory_mb=48, tmpfs_mb=16))
    r = sb.run_python(
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "b = bytearray(20 * 2**20)\n"
        "for i in range(0, len(b), 4096):\n"
        "    b[i] = 1\n"
        "time.sleep(2)\n"
        "print('held')\n"
    )
    assert r.limit == "memory" and r.oom, r


@needs_cgroup
def test_cgroup_counts_the_cpu_of_the_whole_run():
    sb = Sandbox(ROOMY.replace(cpu_time_s=1.0, timeout_s=20.0, cpu_cores=4.0))
    r = sb.run_python("import os\nfor _ in range(3):\n    os.fork()\nwhile True:\n    pass\n")
    assert r.limit == "cpu_time" and 0.9 <= r.cpu_time_s <= 1.5, r
