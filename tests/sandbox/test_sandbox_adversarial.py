"""Hostile programs: each is contained, the host is unaffected, nothing it started survives, and
the next execution works (the `contained` fixture checks the last two for every case)."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sandbox_helpers import ROOMY, TIGHT

from roll.rewards.code import code_sandbox_reward
from roll.sandbox import Sandbox, SandboxPool

REPO = Path(__file__).resolve().parents[2]


def test_infinite_loop(contained):
    r = contained.run("while True:\n    pass\n")
    assert not r.ok and r.limit in ("cpu_time", "timeout")
    assert r.wall_time_s < TIGHT.timeout_s + 1.5


def test_sleep_forever(contained):
    r = contained.run("import time\ntime.sleep(10**6)\n")
    assert r.timed_out and r.limit == "timeout" and r.signal == 9
    assert TIGHT.timeout_s - 0.1 <= r.wall_time_s < TIGHT.timeout_s + 1.5


def test_fork_bomb(contained):
    r = contained.run(
        "import os, time\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        time.sleep(0.01)\n"
    )
    assert not r.ok and r.timed_out


def test_process_count_is_limited(contained):
    r = contained.run(
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('blocked', n, e.errno)\n"
    )
    words = r.stdout.split()
    assert words[0] == "blocked", r
    assert int(words[1]) < TIGHT.max_processes and int(words[2]) == 11  # EAGAIN


def test_fork_bomb_does_not_starve_a_concurrent_execution():
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
    with SandboxPool(TIGHT, max_concurrency=1) as pool:
        bomb_future = pool.submit_python(bomb)
        time.sleep(0.5)  # the bomb has filled its process budget by now
        normal = Sandbox(ROOMY).run_python("import subprocess\nprint(subprocess.run(['/bin/echo', 'fine'], capture_output=True, text=True).stdout, end='')")
        assert normal.ok and normal.stdout == "fine\n", normal
        assert bomb_future.result().timed_out


def test_thread_bomb(contained):
    r = contained.run(
        "import threading, time\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
        "        n += 1\n"
        "except (RuntimeError, MemoryError) as e:\n"
        "    print('blocked', n)\n"
    )
    assert r.stdout.startswith("blocked"), r
    assert int(r.stdout.split()[1]) < TIGHT.max_processes


def test_memory_bomb(contained):
    r = contained.run("x = []\nwhile True:\n    x.append(bytearray(10**7))\n")
    assert r.oom and r.limit == "memory" and r.exit_code == 1
    assert "MemoryError" in r.stderr


def test_output_flood_of_a_gigabyte(contained):
    r = contained.run("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n")
    assert r.stdout_truncated and r.limit == "output" and not r.ok
    assert len(r.stdout) == TIGHT.max_output_bytes
    assert r.wall_time_s < TIGHT.timeout_s  # cut off at the cap, not at the deadline


def test_stderr_flood(contained):
    r = contained.run("import os\nwhile True:\n    os.write(2, b'e' * 65536)\n")
    assert r.stderr_truncated and r.limit == "output" and len(r.stderr) == TIGHT.max_output_bytes


def test_huge_file(contained):
    r = contained.run(
        "import errno\n"
        "try:\n"
        "    with open('big.bin', 'wb') as f:\n"
        "        for _ in range(1024):\n"
        "            f.write(b'0' * (1 << 20))\n"
        "except OSError as e:\n"
        "    print('big', e.errno)\n"
        "try:\n"  # many files under the per-file limit fill the tmpfs instead
        "    for i in range(64):\n"
        "        with open(f'part{i}', 'wb') as f:\n"
        "            f.write(b'0' * (3 << 20))\n"
        "except OSError as e:\n"
        "    print('fill', e.errno)\n"
    )
    assert "big 27" in r.stdout  # EFBIG: RLIMIT_FSIZE
    assert "fill 28" in r.stdout  # ENOSPC: the size-limited tmpfs


def test_writing_outside_the_work_dir(contained, tmp_path):
    marker = f"roll_pwned_{contained.token}"
    targets = [f"/{marker}", f"/etc/{marker}", f"/usr/{marker}", f"/dev/{marker}", f"/proc/{marker}",
               f"/dev/shm/{marker}", f"{REPO}/{marker}", f"{tmp_path}/{marker}"]
    code = (
        "import sys\n"
        "for p in sys.argv[2:]:\n"
        "    try:\n"
        "        open(p, 'w').write('x')\n"
        "        print('WROTE', p)\n"
        "    except OSError as e:\n"
        "        print('DENIED', p, e.errno)\n"
        "open('/tmp/inside', 'w').write('fine')\n"
        "print(open('/tmp/inside').read())\n"
    )
    r = contained.run(code, args=targets)
    assert "WROTE" not in r.stdout, r.stdout
    assert r.stdout.count("DENIED") == len(targets) and r.stdout.endswith("fine\n")
    for target in targets:
        assert not os.path.exists(target)
    assert not os.path.exists("/tmp/inside") or open("/tmp/inside").read() != "fine"


def test_reading_host_secrets(contained, monkeypatch):
    secret = "secret-" + contained.token
    monkeypatch.setenv("ROLL_SANDBOX_TEST_SECRET", secret)
    targets = ["/etc/shadow", "/etc/passwd", str(REPO / "setup.py"), str(REPO / ".git" / "config"),
               "/proc/1/environ", "/proc/self/environ", "/root/.bashrc"]
    code = (
        "import os, sys\n"
        "for p in sys.argv[2:]:\n"
        "    try:\n"
        "        print('READ', p, open(p, 'rb').read()[:4000])\n"
        "    except OSError as e:\n"
        "        print('DENIED', p, e.errno)\n"
        "print('PIDS', sorted(int(x) for x in os.listdir('/proc') if x.isdigit()))\n"
        "print('ENV', dict(os.environ))\n"
    )
    r = contained.run(code, args=targets)
    assert secret not in r.stdout
    for denied in ("/etc/shadow", "/etc/passwd", str(REPO / "setup.py"), str(REPO / ".git" / "config"), "/root/.bashrc"):
        assert f"DENIED {denied}" in r.stdout, r.stdout
    assert "setup(" not in r.stdout and "root:" not in r.stdout
    pids = eval(r.stdout.split("PIDS ", 1)[1].split("\n", 1)[0])
    assert len(pids) <= 3  # its own PID namespace: init and the program (no host processes)


def test_network_to_a_host_loopback_listener(contained):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + contained.token)  # abstract sockets live in the network namespace
    unix.listen(8)
    unix.settimeout(0.2)
    tcp_port, udp_port = listener.getsockname()[1], udp.getsockname()[1]
    accepted: list = []
    stop = threading.Event()

    def accept_loop():
        while not stop.is_set():  # until the program has finished
            for sock in (listener, unix):
                try:
                    accepted.append(sock.accept())
                except (TimeoutError, OSError):
                    pass

    t = threading.Thread(target=accept_loop)
    t.start()
    code = (
        "import socket, sys\n"
        "tcp, udp, name = int(sys.argv[2]), int(sys.argv[3]), sys.argv[1]\n"
        "for host in ('127.0.0.1', 'localhost', '10.0.2.2', '8.8.8.8'):\n"
        "    try:\n"
        "        socket.create_connection((host, tcp), timeout=0.5)\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as e:\n"
        "        print('FAILED', host, type(e).__name__)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n"
        "    s.sendto(b'hello', ('127.0.0.1', udp))\n"
        "except OSError as e:\n"
        "    print('UDP FAILED', e)\n"
        "u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "try:\n"
        "    u.connect('\\0' + name)\n"
        "    print('CONNECTED unix')\n"
        "except OSError as e:\n"
        "    print('FAILED unix', type(e).__name__)\n"
        "print(socket.if_nameindex())\n"
    )
    try:
        r = contained.run(code, args=[str(tcp_port), str(udp_port)])
        stop.set()
        t.join()
        try:
            datagram = udp.recv(100)
        except TimeoutError:
            datagram = None
    finally:
        for s in (listener, udp, unix):
            s.close()
    assert accepted == [], "the loopback listener received a connection from the sandbox"
    assert datagram is None, "the UDP socket received a datagram from the sandbox"
    assert "CONNECTED" not in r.stdout, r.stdout
    assert "[(1, 'lo')]" in r.stdout  # no interface but its own loopback


def test_killing_a_sentinel_process(contained):
    sentinel = subprocess.Popen(["sleep", "60"])
    try:
        code = (
            "import os, signal, sys\n"
            "pid = int(sys.argv[2])\n"
            "for target, how in ((pid, 'pid'), (-1, 'everyone'), (os.getppid(), 'parent')):\n"
            "    try:\n"
            "        os.kill(target, signal.SIGKILL)\n"
            "        print('SENT', how)\n"
            "    except OSError as e:\n"
            "        print('FAILED', how, e.errno)\n"
        )
        r = contained.run(code, args=[str(sentinel.pid)])
        time.sleep(0.1)
        assert sentinel.poll() is None, f"the sentinel was killed: {r}"
        assert "FAILED pid 3" in r.stdout  # ESRCH: the host pid does not exist in its namespace
    finally:
        sentinel.kill()
        sentinel.wait()


@pytest.mark.parametrize("style", ["setsid", "double_fork"])
def test_orphan_holding_the_output_pipe(contained, style):
    spawn = {
        "setsid": "import subprocess, sys\n"
                  "subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(1000)', sys.argv[1]],"
                  " start_new_session=True)\n",
        "double_fork": "import os, sys, time\n"
                       "if os.fork() == 0:\n"
                       "    os.setsid()\n"
                       "    if os.fork() == 0:\n"
                       "        time.sleep(1000)\n"
                       "    os._exit(0)\n",
    }[style]
    r = contained.run(spawn + "print('parent done')\n")
    assert r.ok and r.stdout == "parent done\n", r
    assert r.wall_time_s < TIGHT.timeout_s  # returned when the program exited, not at the deadline


def test_ignoring_sigterm(contained):
    r = contained.run(
        "import signal, time\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    assert r.timed_out and r.signal == 9
    assert r.wall_time_s < TIGHT.timeout_s + 1.5


def test_nested_namespaces_are_refused(contained):
    r = contained.run(
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for name, flag in (('user', 0x10000000), ('net', 0x40000000), ('mount', 0x00020000)):\n"
        "    print(name, libc.unshare(flag), ctypes.get_errno())\n"
    )
    for line in r.stdout.splitlines():
        assert line.split()[1] == "-1", r.stdout


def test_printing_all_tests_passed_is_a_failure():
    liar = "```python\nimport sys\nprint('ALL TESTS PASSED')\nsys.exit(0)\n```"
    stdio = [{"input": "2 3\n", "output": "5\n"}, {"input": "1 1\n", "output": "2\n"}]
    calls = ["assert add(2, 3) == 5", "assert add(1, 1) == 2"]
    for tests in (stdio, calls):
        out = code_sandbox_reward({"response": liar}, tests=tests, sandbox={"timeout_s": 5})
        assert out.score == 0.0 and not out.success, out


def test_the_program_cannot_read_expected_values():
    # The snooping program looks everywhere it can for the expected value's (known) prefix:
    # its files, argv, environment and the whole /proc it can see.
    expected = "expected-value-nobody-can-guess-31337"
    snoop = (
        "```python\n"
        "import os, sys\n"
        "seen = [' '.join(sys.argv), str(dict(os.environ))]\n"
        "for root in ('.', '/proc/self', '/proc/1'):\n"
        "    for p in os.listdir(root):\n"
        "        try:\n"
        "            seen.append(open(os.path.join(root, p), 'rb').read(1 << 20).decode(errors='replace'))\n"
        "        except OSError:\n"
        "            pass\n"
        "blob = '\\n'.join(seen)\n"
        "def answer():\n"
        "    i = blob.find('expected' + '-value-')  # split so its own source does not match\n"
        "    return 'NOTFOUND' if i < 0 else blob[i:i + 40]\n"
        "```"
    )
    out = code_sandbox_reward({"response": snoop}, tests=[f"assert answer() == {expected!r}"], sandbox={"timeout_s": 5})
    assert out.score == 0.0
    assert out.info["first_failure"].endswith("returned 'NOTFOUND'"), out.info
