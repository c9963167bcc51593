"""Registered agent-function env (docs/tools.md, "OpenAI-compatible endpoint"). Give your
function and tasks in env_kwargs; the default runs the shipped example on a few sums."""
import gymnasium

gymnasium.register(
    id="roll/AgentFunction-v0",
    entry_point="roll.envs.agent_function.env:AgentFunctionEnv",
    kwargs={"function": "roll.envs.agent_function.examples:add_numbers",
            "tasks": [{"a": 17, "b": 25}, {"a": 38, "b": 4}, {"a": 9, "b": 63}, {"a": 51, "b": 46}]},
)
