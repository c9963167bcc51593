"""Tool episodes through the real rollout loop (EnvironmentWorker -> EnvManager), the real tiny
tokenizer, roll/Tools-v0 around FrozenLake, and a scripted policy in place of the model."""
import asyncio
import json

import pytest
import roll.envs  # noqa: F401  (registers roll/Tools-v0)

from roll.config.roles import GeneratingArgs
from roll.config.rollout import EnvConfig, EnvManagerConfig
from roll.rollout.env_manager import EpisodeSpec
from roll.rollout.metrics import episode_metrics
from roll.workers.environment import EnvironmentWorker
from scripted_clients import ScriptedPolicy


def call(name, **arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def run(tok, policy, env_kwargs, max_turns, mode="trajectory", max_context_tokens=4096):
    envs = {"t": EnvConfig(env_id="roll/Tools-v0", env_kwargs=env_kwargs, max_turns=max_turns)}
    mcfg = EnvManagerConfig(group_size=1, mode=mode, max_context_tokens=max_context_tokens)
    worker = EnvironmentWorker(envs, mcfg, GeneratingArgs(max_new_tokens=256), tok, [policy])
    [traj] = asyncio.run(worker.run_episode(EpisodeSpec("ep0", "t", "t/0", 5)))
    return traj, envs["t"]


def whole_conversation_ids(tok, system, traj, schemas):
    text = tok.apply_chat_template([{"role": "system", "content": system}] + traj.messages, tools=schemas, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


def test_calculator_then_answer(tok):
    from roll.tools import ToolExecutor

    policy = ScriptedPolicy(tok, [
        "<think>multiply first</think>" + call("calculator", expression="3 * 7") + call("weather", city="Oslo")
        + "<tool_call>{not json}</tool_call>",
        "<think>21 moves is far</think><answer>Left</answer>",
    ])
    traj, cfg = run(tok, policy, {"env": "roll/FrozenLake-v0", "tools": ["calculator"]}, max_turns=2)
    assert traj.failure is None, traj.failure_detail
    # turn 1 was tools (no env step), turn 2 the answer the env judged
    assert traj.num_turns == 2 and traj.turn_rewards[0] == 0.0
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
    assert traj.messages[2]["content"] == "21"
    assert "unknown tool 'weather'" in traj.messages[3]["content"] and traj.messages[4]["content"].startswith("Error:")
    assert traj.turn_actions[0] == {"actions": ["tool:calculator", "tool:weather", "tool:?"], "valid": False,
                                    "error": "unknown_tool; malformed"}
    assert traj.turn_actions[1]["actions"] == ["Left"]
    # the model saw the schemas in its first prompt and the results in its second
    first, second = (tok.decode(r.prompt_ids) for r in policy.requests)
    assert '<tools>\n{"type": "function", "function": {"name": "calculator"' in first
    assert second.endswith("<|im_start|>user\n<tool_response>\n21\n</tool_response>\n<tool_response>\nError: unknown "
                           "tool 'weather'; available tools: calculator\n</tool_response>\n<tool_response>\nError: "
                           "the call is not valid JSON (Expecting property name enclosed in double quotes: line 1 "
                           "column 2 (char 1))\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    # token-exact: the trajectory is the template's rendering of the whole conversation
    schemas = ToolExecutor(["calculator"]).schemas
    assert traj.input_ids == whole_conversation_ids(tok, cfg.system_prompt, traj, schemas)
    for req in policy.requests:  # each prompt is the trajectory up to that turn
        assert traj.input_ids[: len(req.prompt_ids)] == req.prompt_ids
    assert sum(traj.loss_mask) == sum(len(tok.encode(t, add_special_tokens=False)) + 1 for t in policy.script)
    m = traj.metrics
    assert (m["tool/calls"], m["tool/errors"], m["tool/turns"], m["tool/calls/calculator"]) == (3, 2, 1, 1)
    assert (m["tool/errors/unknown_tool"], m["tool/errors/malformed"]) == (1, 1)
    agg = episode_metrics([traj], version=0)
    assert agg["env/t/tool/calls"] == 3 and agg["env/t/tool/errors/malformed"] == 1


def test_budget_spent_then_turns_go_to_the_env(tok):
    policy = ScriptedPolicy(tok, [call("calculator", expression="1+1")])  # calls a tool every turn
    traj, cfg = run(tok, policy, {"env": "roll/FrozenLake-v0", "tools": ["calculator"], "max_tool_calls": 2},
                    max_turns=4)
    assert traj.failure is None and traj.truncated and traj.num_turns == 4
    assert [m["role"] for m in traj.messages].count("tool") == 2
    # turns 3 and 4 were answers for the env, which found no <answer>: invalid, penalised
    assert [a["valid"] for a in traj.turn_actions] == [True, True, False, False]
    assert traj.turn_rewards[2] < 0 and traj.metrics["tool/over_budget_turns"] == 2
    assert traj.metrics["tool/calls"] == 2 and traj.metrics["tool/errors"] == 0
    from roll.tools import ToolExecutor

    assert traj.input_ids == whole_conversation_ids(tok, cfg.system_prompt, traj, ToolExecutor(["calculator"]).schemas)


def test_a_tool_turn_at_max_turns_truncates(tok):
    policy = ScriptedPolicy(tok, [call("calculator", expression="2+2")])
    traj, _ = run(tok, policy, {"env": "roll/FrozenLake-v0", "tools": ["calculator"]}, max_turns=1)
    assert traj.failure is None and traj.truncated and traj.num_turns == 1
    assert [m["role"] for m in traj.messages] == ["user", "assistant"]  # results the model never saw are not kept


def test_tool_results_past_the_context_limit_truncate(tok):
    script = [call("search", query="water planet moon ocean river", k=5), "<answer>Left</answer>"]
    kwargs = {"env": "roll/FrozenLake-v0", "tools": ["search"]}
    roomy = ScriptedPolicy(tok, script)
    full, _ = run(tok, roomy, kwargs, max_turns=2)
    second_prompt = len(roomy.requests[1].prompt_ids)
    assert full.failure is None and full.messages[2]["role"] == "tool"
    tight = ScriptedPolicy(tok, script)
    limit = second_prompt - 100  # room for the first turn, not for its long search results
    traj, _ = run(tok, tight, kwargs, max_turns=2, max_context_tokens=limit)
    assert len(roomy.requests[0].prompt_ids) + 60 < limit
    assert traj.failure is None and traj.truncated and len(tight.requests) == 1
    assert [m["role"] for m in traj.messages] == ["user", "assistant"] and len(traj.input_ids) < limit
    assert traj.metrics["tool/calls"] == 1  # the call ran; the model just never saw its result


def test_step_mode_is_refused_with_a_clear_error(tok):
    policy = ScriptedPolicy(tok, ["<answer>Left</answer>"])
    envs = {"t": EnvConfig(env_id="roll/Tools-v0", max_turns=2)}
    worker = EnvironmentWorker(envs, EnvManagerConfig(group_size=1, mode="step"), GeneratingArgs(max_new_tokens=16), tok, [policy])
    [traj] = asyncio.run(worker.run_episode(EpisodeSpec("ep0", "t", "t/0", 1)))
    assert traj.failure == "env_error" and traj.failure_permanent and "mode 'trajectory'" in traj.failure_detail
    assert policy.requests == []


def test_envs_without_tools_are_unchanged(tok):
    policy = ScriptedPolicy(tok, ["<answer>Left</answer>"])
    envs = {"t": EnvConfig(env_id="roll/FrozenLake-v0", max_turns=2)}
    worker = EnvironmentWorker(envs, EnvManagerConfig(group_size=1), GeneratingArgs(max_new_tokens=16), tok, [policy])
    [traj] = asyncio.run(worker.run_episode(EpisodeSpec("ep0", "t", "t/0", 1)))
    assert not any(k.startswith("tool/") for k in traj.metrics)
    assert "<tools>" not in tok.decode(traj.input_ids)


@pytest.mark.parametrize("spec", [["python"], [{"id": "search", "k": 1}]])
def test_other_shipped_tools_in_an_episode(tok, spec):
    name = spec[0] if isinstance(spec[0], str) else spec[0]["id"]
    arguments = {"code": "print(2 ** 20)"} if name == "python" else {"query": "deepest ocean trench"}
    policy = ScriptedPolicy(tok, [call(name, **arguments), "<answer>Down</answer>"])
    traj, _ = run(tok, policy, {"env": "roll/FrozenLake-v0", "tools": spec}, max_turns=2)
    assert traj.failure is None
    expected = "1048576" if name == "python" else "[Pacific Ocean]"
    assert traj.messages[2]["role"] == "tool" and traj.messages[2]["content"].startswith(expected)
