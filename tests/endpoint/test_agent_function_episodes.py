"""Agent functions through the real rollout loop (EnvironmentWorker -> EnvManager -> endpoint ->
Router) with the real openai client over HTTP, the tiny tokenizer, and a scripted policy whose
replies are canonical token ids (so trajectories can be compared id for id)."""
import time

import pytest
from endpoint_agents import CALCULATOR, SLEPT, SYSTEM
from endpoint_policy import ScriptedPolicy, run_agent_episode

from roll.data.trajectory import trajectories_to_batch
from roll.rollout.metrics import episode_metrics


def rendered_ids(tok, messages, tools=None):
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


def test_three_turns_are_one_token_exact_trajectory(tok):
    policy = ScriptedPolicy(tok, ["<answer>3</answer>", "<answer>5</answer>", "<think>lower</think>4"])
    [traj] = run_agent_episode(tok, policy, "three_turns", tasks=[{"n": 7}])
    assert traj.failure is None, traj.failure_detail
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert traj.messages[0]["content"] == SYSTEM and traj.messages[-1]["content"] == "<think>lower</think>4"
    # the whole conversation through the chat template, id for id
    assert traj.input_ids == rendered_ids(tok, traj.messages)
    # each request's prompt is the trajectory so far; the model tokens are exactly the sampled ones
    assert len(policy.requests) == 3
    for k, req in enumerate(policy.requests):
        assert traj.input_ids[: len(req.prompt_ids)] == req.prompt_ids
        n = len(tok.encode(policy.script[k], add_special_tokens=False)) + 1
        span = slice(len(req.prompt_ids), len(req.prompt_ids) + n)
        assert all(traj.loss_mask[span]) and traj.logprobs[span] == [-(k + 1) / 10] * n
        assert set(traj.token_turns[span]) == {k} and set(traj.token_versions[span]) == {0}
    assert sum(traj.loss_mask) == sum(len(tok.encode(s, add_special_tokens=False)) + 1 for s in policy.script)
    assert traj.prompt_length == len(policy.requests[0].prompt_ids)
    # the function's reward is the episode's, on the last model token
    assert traj.num_turns == 3 and traj.turn_rewards == [0.0, 0.0, 0.0] and traj.final_reward == pytest.approx(0.7)
    assert traj.success and traj.terminated and traj.episode_return == pytest.approx(0.7)
    batch = trajectories_to_batch([traj], tok.pad_token_id)
    last_model = max(i for i, m in enumerate(traj.loss_mask) if m)
    assert batch["token_rewards"][0].nonzero().flatten().tolist() == [last_model]
    assert batch["token_rewards"][0, last_model].item() == pytest.approx(0.7)
    m = traj.metrics
    assert (m["agent/requests"], m["agent/segments"], m["agent/info/turns"], m["agent/request_errors"]) == (3, 1, 3, 0)
    agg = episode_metrics([traj], version=0)
    assert (agg["env/agent/agent/requests"], agg["env/agent/agent/info/turns"], agg["env/agent/success"]) == (3, 3, 1)


def test_sdk_message_objects_sent_back_still_extend(tok):
    # model_dump() adds refusal/annotations/tool_calls None, content may be a different object
    policy = ScriptedPolicy(tok, ["hello", "world"])
    [traj] = run_agent_episode(tok, policy, "sdk_messages")
    assert traj.failure is None and traj.metrics["agent/segments"] == 1 and traj.num_turns == 2
    assert traj.input_ids == rendered_ids(tok, traj.messages)


def test_a_rewritten_history_is_a_second_sample_with_the_same_reward(tok):
    policy = ScriptedPolicy(tok, ["one", "two"])
    trajs = run_agent_episode(tok, policy, "rewrites_history")
    assert len(trajs) == 2 and all(t.failure is None for t in trajs)
    first, second = trajs
    assert first.messages[1]["content"] == "First question." and "Second question." in second.messages[1]["content"]
    for t, req in zip(trajs, policy.requests):
        assert t.input_ids == rendered_ids(tok, t.messages)  # each segment is token-exact on its own
        assert t.input_ids[: len(req.prompt_ids)] == req.prompt_ids and t.num_turns == 1
        assert t.episode_id == "agent/0/0" and t.group_id == "agent/0" and t.final_reward == 0.5
    assert first.metrics["agent/segments"] == 2 and first.metrics["agent/new_segments"] == 1
    batch = trajectories_to_batch(trajs, tok.pad_token_id)
    assert batch["token_rewards"].sum(-1).tolist() == [0.5, 0.5] and batch["scores"].tolist() == [0.5, 0.5]


def test_tool_calls_come_back_parsed_and_the_trajectory_stays_exact(tok):
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3 * 7"}}\n</tool_call>'
    policy = ScriptedPolicy(tok, [call, "It is 21."])
    [traj] = run_agent_episode(tok, policy, "uses_a_tool")
    assert traj.failure is None, traj.failure_detail
    assert traj.final_reward == 1.0 and traj.metrics["agent/tool_calls"] == 1
    assistant = traj.messages[2]
    assert assistant["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "3 * 7"}'}
    assert traj.messages[3] == {"role": "tool", "content": "21", "tool_call_id": assistant["tool_calls"][0]["id"]}
    assert traj.turn_actions[0]["actions"] == ["tool:calculator"]
    # the first prompt rendered the schemas; the conversation is the template's, id for id
    assert '"name": "calculator"' in tok.decode(policy.requests[0].prompt_ids)
    assert traj.input_ids == rendered_ids(tok, traj.messages, tools=[CALCULATOR])


def test_an_async_function_runs(tok):
    [traj] = run_agent_episode(tok, ScriptedPolicy(tok, ["1 2", "3 4"]), "async_two_turns")
    assert traj.failure is None and traj.num_turns == 2 and traj.final_reward == 0.25
    assert traj.input_ids == rendered_ids(tok, traj.messages)


def test_a_raising_function_is_an_env_error_with_its_traceback(tok):
    [traj] = run_agent_episode(tok, ScriptedPolicy(tok, ["hi"]), "raises")
    assert traj.failure == "env_error" and not traj.failure_permanent
    assert traj.failure_detail == "the agent function raised ValueError: the agent gave up on task 7"
    assert "endpoint_agents.py" in traj.failure_traceback and "in raises" in traj.failure_traceback


def test_a_function_past_its_timeout_is_an_env_timeout_not_a_hang(tok):
    t0 = time.monotonic()
    [traj] = run_agent_episode(tok, ScriptedPolicy(tok, ["hi"]), "sleeps", tasks=[{"n": 11}], timeout_s=1.0)
    assert time.monotonic() - t0 < 2.9  # the function sleeps 3 s
    assert traj.failure == "env_timeout" and "timeout_s=1" in traj.failure_detail
    deadline = time.monotonic() + 10
    while 11 not in SLEPT and time.monotonic() < deadline:
        time.sleep(0.1)
    # the abandoned function's next request was refused (the episode's server is gone)
    assert SLEPT[11] in ("NotFoundError", "APIConnectionError")


@pytest.mark.parametrize("function,detail", [
    ("returns_text", "returned a str ('great'); expected a number"),
    ("asks_nothing", "made no chat-completion request that completed"),
])
def test_a_broken_contract_is_a_permanent_env_error(tok, function, detail):
    [traj] = run_agent_episode(tok, ScriptedPolicy(tok, ["hi"]), function)
    assert traj.failure == "env_error" and traj.failure_permanent and detail in traj.failure_detail


def test_step_mode_is_refused(tok):
    [traj] = run_agent_episode(tok, ScriptedPolicy(tok, ["hi"]), "three_turns", mode="step")
    assert traj.failure == "env_error" and traj.failure_permanent and "mode 'trajectory'" in traj.failure_detail


def test_an_empty_reply_is_a_turn_without_model_tokens(tok):
    class Silent(ScriptedPolicy):
        async def generate(self, request):
            self.requests.append(request)
            return type(await super().generate(request))(request.request_id, [], [], "stop", 0)

    [traj] = run_agent_episode(tok, Silent(tok, ["unused"]), "three_turns")
    assert traj.failure is None and traj.num_turns == 3 and traj.num_model_tokens == 0
    assert traj.prompt_length == len(traj.input_ids)
    assert trajectories_to_batch([traj], tok.pad_token_id)["scores"].tolist() == [pytest.approx(0.7)]
