"""Registered arithmetic envs (docs/tools.md, "A task that needs a tool")."""
import gymnasium

_ENTRY = "roll.envs.arith.env:ArithEnv"

# One problem per episode (a 3-digit product, a product plus a 4-digit number, or a sum of four
# 3-4 digit numbers), one attempt, reward 1 for the exact whole number. Give it the calculator
# with roll/Tools-v0 (configs/agentic/tool_arith_cpu.yaml).
gymnasium.register(id="roll/Arith-v0", entry_point=_ENTRY, kwargs={"max_attempts": 1})
