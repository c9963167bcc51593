"""Reward functions, registered by name in `roll.registry.REWARDS`.

Each submodule below registers its functions when imported (the registry imports this
package the first time it is used).
"""
from roll.rewards.base import RewardFn, RewardOutput
from roll.rewards import code as _code  # noqa: F401  (registers code_sandbox)
from roll.rewards import ifeval as _ifeval  # noqa: F401  (registers ifeval)
from roll.rewards import llm_judge as _llm_judge  # noqa: F401  (registers llm_judge)
from roll.rewards import math_rule as _math_rule  # noqa: F401  (registers math_rule)
from roll.rewards import multiple_choice as _multiple_choice  # noqa: F401  (registers multiple_choice, exact_match)

__all__ = ["RewardFn", "RewardOutput"]
