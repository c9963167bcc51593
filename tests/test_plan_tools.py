"""`roll plan` on a tool env: its tools (an MCP entry as the command that would start it, with
no server started), parser and budget; the pre-flight's checks of the tools list; and the LoRA
settings of a role that has them."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from roll.cli import main
from roll.config import load_config
from roll.config.preflight import preflight
from roll.distributed.resource_pool import print_plan

BASE = Path(__file__).resolve().parents[1] / "configs" / "agentic" / "frozenlake_cpu.yaml"
TRAJECTORY = ["train_env_manager.mode=trajectory", "val_env_manager.mode=trajectory",
              "custom_envs.FrozenLake.env_id=roll/Tools-v0"]


def tools_override(tools: str) -> str:
    return f"custom_envs.FrozenLake.env_kwargs={{env: roll/FrozenLake-v0, max_tool_calls: 3, tools: {tools}}}"


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_plan_lists_the_tools_of_a_tool_env_without_starting_a_server(capsys):
    mcp = f"{{id: mcp, command: {sys.executable}, args: [-m, my_tools.server], prefix: m_, env: {{API_KEY: secret}}}}"
    before = children()
    code = main(["plan", str(BASE), *TRAJECTORY, tools_override(f"[calculator, {{id: search, k: 2}}, {mcp}]")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tools of env FrozenLake (roll/Tools-v0)" in out
    for row in ("wraps", "roll/FrozenLake-v0", "tool 0", "calculator", "search (k=2)",
                f"mcp: `{sys.executable} -m my_tools.server` (prefix=m_; env: API_KEY)", "parser", "hermes",
                "3 tool calls per episode, results cut at 4000 chars"):
        assert row in out, row
    assert "secret" not in out  # env values are not printed: they may be credentials
    assert children() <= before  # the MCP command is only shown


def test_preflight_checks_the_tools_list_before_anything_starts():
    bad = ("[calculater, {id: search, k: 2, top: 3}, {id: mcp, comand: x}, "
           "{id: mcp, command: no-such-mcp-server, timeout_s: 0}]")
    cfg = load_config(BASE, [*TRAJECTORY, tools_override(bad)])
    problems = preflight(cfg)
    where = "custom_envs.FrozenLake.env_kwargs.tools"
    expected = [f"{where}[0]: unknown tool 'calculater'; did you mean 'calculator'?",
                f"{where}[1].top: tool 'search' takes no option 'top'",
                f"{where}[2]: unknown MCP option 'comand' (did you mean 'command'?)",
                f"{where}[2].command: an MCP server needs a command",
                f"{where}[3].command: 'no-such-mcp-server' is not an executable on PATH",
                f"{where}[3].timeout_s: a number of seconds > 0, got 0"]
    for line in expected:
        assert any(p.startswith(line) for p in problems), (line, problems)
    assert not print_plan(cfg, problems=problems)
    ok = load_config(BASE, [*TRAJECTORY, tools_override(f"[calculator, {{id: mcp, command: {sys.executable}}}]")])
    assert preflight(ok) == []


@dataclass
class _Lora:  # the shape of a role's LoRA settings (r, alpha, dropout, target_modules)
    r: int = 4
    alpha: float = 8.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])


def test_plan_prints_a_roles_lora_settings(capsys):
    cfg = load_config(BASE)
    cfg.actor_train.lora = _Lora()
    assert print_plan(cfg)
    out = capsys.readouterr().out
    assert "actor_train LoRA: r=4, alpha=8.0, dropout=0.0, target_modules=['q_proj', 'v_proj']" in out
    cfg.actor_train.lora = None
    assert print_plan(cfg) and "LoRA" not in capsys.readouterr().out


@pytest.mark.parametrize("env_id", ["roll/FrozenLake-v0", "roll/not-registered-v0"])
def test_plan_shows_no_tools_for_other_envs(env_id):
    from roll.distributed.plan import env_tool_rows

    assert env_tool_rows(env_id, {}) == []
