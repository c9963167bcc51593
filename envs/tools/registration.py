"""Registered tool wrapper (docs/tools.md). Give the wrapped env and the tools in env_kwargs."""
import gymnasium

# The default (FrozenLake with a calculator) exists so the id can be made and checked without
# arguments; a task names its own env and tools.
gymnasium.register(
    id="roll/Tools-v0",
    entry_point="roll.envs.tools.env:ToolEnv",
    kwargs={"env": "roll/FrozenLake-v0", "tools": ["calculator"]},
)
