"""MCP tool sources against a real MCP server (tests/tools/mcp_server.py, over stdio): listing
and schemas through the chat template, calls, the server's errors, timeouts, a hung and a
killed server restarted, bounded restarts, start failures, and no server left behind."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("mcp")

from roll.rollout.chat import ChatRenderer
from roll.tools import BaseTool, ToolConfigError, ToolExecutor
from roll.tools.mcp import MCPToolSource, option_problems

SERVER = str(Path(__file__).with_name("mcp_server.py"))


class Echo(BaseTool):
    name = "echo"
    description = "echo"

    def run(self) -> str:
        return "echo"


def mcp_entry(**options):
    return {"id": "mcp", "command": sys.executable, "args": [SERVER], **options}


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def server_pids(marker: str = SERVER) -> set[int]:
    """Test servers started by this process that are still running (zombies count: not reaped)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if any(marker in part for part in child.cmdline()):
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def gone(pid: int, within_s: float = 5.0) -> bool:
    """Exited and reaped within ``within_s`` (a zombie then is a leak; one before may just not
    have been waited for yet: the failed call is answered first, on a loaded machine)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            psutil.Process(pid).status()
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def executor():
    """One server for the tests that do not kill it: prefix, allowlist, short call timeout."""
    ex = ToolExecutor([mcp_entry(prefix="t_", tools=["whoami", "add", "echo", "fail", "nap", "freeze"], timeout_s=1.0,
                                 ping_timeout_s=0.5), "calculator"], max_calls_per_episode=100)
    yield ex
    [source] = ex.sources
    pid = int(source.call("whoami", {}))
    ex.close()
    assert gone(pid), f"server {pid} outlived close()"


def test_lists_tools_as_schemas_that_render(executor, tok):
    # the allowlist's order, then the next entry's tools
    assert list(executor.tools) == ["t_whoami", "t_add", "t_echo", "t_fail", "t_nap", "t_freeze", "calculator"]
    add = executor.tools["t_add"]
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object" and add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    # the server's schemas render through the chat template's tools= like the built-in ones
    text = tok.decode(ChatRenderer(tok, "s").initial_prompt("hi", tools=executor.schemas))
    for name in executor.tools:
        assert f'"name": "{name}"' in text
    assert '"description": "Add two integers."' in text


def test_calls_errors_and_bad_arguments(executor):
    executor.reset()
    turn = executor.handle(call("t_add", a=2, b=40) + call("t_echo", text="a\nb") + call("t_fail", message="no such item")
                           + call("t_add", a="2", b=1) + call("add", a=1, b=2) + call("calculator", expression="6*7"))
    assert [r.error for r in turn.results] == ["", "", "tool_error", "bad_arguments", "unknown_tool", ""]
    assert turn.contents[0] == "42" and turn.contents[1] == "a\nb" and turn.contents[5] == "42"
    assert turn.contents[2].startswith("Error:") and "no such item" in turn.contents[2]  # the server's isError text
    assert "'a' must be integer" in turn.contents[3]  # checked against the server's schema, never sent
    assert executor.stats["errors/tool_error"] == 1 and executor.stats["errors_by_tool/t_fail"] == 1
    assert executor.stats["calls/t_add"] == 2


def test_a_slow_call_times_out_and_the_server_stays(executor):
    [source] = executor.sources
    pid = source.call("whoami", {})
    executor.reset()
    t0 = time.monotonic()
    [result] = executor.handle(call("t_nap", seconds=5)).results
    assert result.error == "timeout" and result.content == "Error: t_nap took longer than 1s"
    assert time.monotonic() - t0 < 4.0  # the 5 s nap was not waited for
    # the server answered the ping that followed: same process, nothing restarted
    assert executor.handle(call("t_whoami")).contents == [pid] and source.restarts == 0


def test_hung_server_is_restarted_on_the_next_call(executor):
    [source] = executor.sources
    executor.reset()
    first, restarts = executor.handle(call("t_whoami")).contents[0], source.restarts
    [result] = executor.handle(call("t_freeze", seconds=30)).results  # blocks the server's event loop
    assert result.error == "timeout" and result.content == "Error: t_freeze took longer than 1s"
    turn = executor.handle(call("t_whoami") + call("t_add", a=1, b=1))
    assert [r.error for r in turn.results] == ["", ""] and turn.contents[1] == "2"
    assert turn.contents[0] != first and source.restarts == restarts + 1
    assert gone(int(first)), "the hung server was not stopped"


def test_killed_server_fails_that_call_then_restarts_within_a_bound(tmp_path):
    before = server_pids()  # the module's server runs meanwhile
    flag = tmp_path / "refuse"  # while it exists, the server refuses to start
    ex = ToolExecutor([mcp_entry(args=[SERVER, "--crash-if", str(flag)], max_restarts=1)], max_calls_per_episode=100)

    def kill_mid_call() -> None:
        pid = int(ex.handle(call("whoami")).contents[0])
        threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        [result] = ex.handle(call("nap", seconds=8)).results
        assert result.error == "unavailable" and "stopped during the call" in result.content
        # noticed at once: before the nap would end (8 s) or the call time out (10 s); slack for a loaded machine
        assert time.monotonic() - t0 < 6.0
        assert gone(pid)

    try:
        [source] = ex.sources
        kill_mid_call()
        assert ex.handle(call("add", a=2, b=2)).contents == ["4"] and source.restarts == 1  # restarted
        flag.touch()
        kill_mid_call()
        [result] = ex.handle(call("add", a=2, b=2)).results  # the restart fails: counted, with the reason
        assert result.error == "unavailable" and "could not start" in result.content and "refusing to start" in result.content
        [result] = ex.handle(call("add", a=2, b=2)).results  # no second restart in a row: the source is down
        assert result.error == "unavailable" and "down (1 restarts in a row" in result.content
        assert source.restarts == 2 and ex.stats["errors/unavailable"] == 4 and ex.stats["errors_by_tool/add"] == 2
    finally:
        ex.close()
    assert server_pids() <= before


def test_start_failures_are_clear_errors_and_leave_nothing():
    before = server_pids()
    with pytest.raises(ToolConfigError, match=r"could not start: MCPError: Connection closed; its stderr ends: mcp_server: refusing to start"):
        MCPToolSource(sys.executable, [SERVER, "--crash-on-start"])
    # a server that never answers `initialize`: stopped after startup_timeout_s
    silent = "import time; time.sleep(60)  # silent-mcp-server"
    t0 = time.monotonic()
    with pytest.raises(ToolConfigError, match=r"silent-mcp-server'` could not start: it did not finish starting \(initialize and tools/list\) within 1s"):
        MCPToolSource(sys.executable, ["-c", silent], startup_timeout_s=1.0)
    assert time.monotonic() - t0 < 15.0 and server_pids("silent-mcp-server") == set()
    with pytest.raises(ToolConfigError, match="'no-such-mcp-server' is not an executable on PATH"):
        ToolExecutor([{"id": "mcp", "command": "no-such-mcp-server"}])
    with pytest.raises(ToolConfigError, match=r"has no tool\(s\) 'subtract' \(it offers: add, echo, fail, nap, freeze"):
        ToolExecutor([mcp_entry(tools=["add", "subtract"])])
    # a server tool named like another tool: a config error naming where it came from, and the
    # server stopped
    with pytest.raises(ToolConfigError, match=r"two tools are named 'echo' \(mcp `.*mcp_server.py`; give an MCP"):
        ToolExecutor([Echo(), mcp_entry(tools=["echo"])])
    assert server_pids() <= before


def test_entry_options_are_checked_without_starting_anything():
    problems = option_problems({"command": "python3", "arg": ["-m", "x"], "cwd": "/no/such/dir", "timeout_s": 0,
                                "tools": "add"}, "tools[0]")
    assert any("unknown MCP option 'arg' (did you mean 'args'?)" in p for p in problems)
    assert any(p.startswith("tools[0].cwd: '/no/such/dir' is not a directory") for p in problems)
    assert any(p.startswith("tools[0].timeout_s: a number of seconds > 0") for p in problems)
    assert any(p.startswith("tools[0].tools: a list of the server's tool names") for p in problems)
    assert option_problems({"command": sys.executable, "args": [SERVER]}) == []


def test_an_episode_calls_an_mcp_tool(tok):
    """The real rollout loop (EnvironmentWorker -> EnvManager) with roll/Tools-v0 configured with
    an MCP entry and a scripted policy that calls the server's tool; token-exact; shutting the
    worker down stops the server."""
    import asyncio

    import roll.envs  # noqa: F401  (registers roll/Tools-v0)
    from test_tool_episode import ScriptedPolicy, whole_conversation_ids

    from roll.config.roles import GeneratingArgs
    from roll.config.rollout import EnvConfig, EnvManagerConfig
    from roll.rollout.env_manager import EpisodeSpec
    from roll.workers.environment import EnvironmentWorker

    before = server_pids()
    policy = ScriptedPolicy(tok, ["<think>too big to add</think>\n" + call("m_add", a=48213, b=91877),
                                  "<think>noted</think><answer>Left</answer>"])
    kwargs = {"env": "roll/FrozenLake-v0", "tools": [mcp_entry(tools=["add"], prefix="m_"), "calculator"]}
    envs = {"t": EnvConfig(env_id="roll/Tools-v0", env_kwargs=kwargs, max_turns=2)}
    worker = EnvironmentWorker(envs, EnvManagerConfig(group_size=1), GeneratingArgs(max_new_tokens=256), tok, [policy])

    async def episode():
        [traj] = await worker.run_episode(EpisodeSpec("ep0", "t", "t/0", 5))
        [(env, _)] = worker._idle_envs["t"]  # the env, back in the worker's pool
        schemas = env.get_wrapper_attr("tool_schemas")
        assert len(server_pids() - before) == 1  # one server, owned by that env
        await worker.shutdown()
        return traj, schemas

    traj, schemas = asyncio.run(episode())
    assert traj.failure is None, traj.failure_detail
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "assistant"]
    assert traj.messages[2]["content"] == "140090" and traj.turn_actions[0]["actions"] == ["tool:m_add"]
    assert [s["function"]["name"] for s in schemas] == ["m_add", "calculator"]
    first = tok.decode(policy.requests[0].prompt_ids)
    assert '"name": "m_add", "description": "Add two integers."' in first and '"m_echo"' not in first
    assert traj.input_ids == whole_conversation_ids(tok, envs["t"].system_prompt, traj, schemas)
    assert traj.metrics["tool/calls/m_add"] == 1 and traj.metrics["tool/errors"] == 0
    assert server_pids() <= before  # worker.shutdown() closed the env, which stopped its server
