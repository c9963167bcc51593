"""Registered coding envs (documented in docs/envs/code.md)."""
import gymnasium

_ENTRY = "roll.envs.code.env:CodeSandboxEnv"

# Every shipped problem, three attempts, reward = improvement of the best pass rate + a full-pass bonus.
gymnasium.register(id="roll/CodeSandbox-v0", entry_point=_ENTRY, kwargs={"max_turns": 3})
