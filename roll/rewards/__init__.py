"""Reward functions, registered by name in `roll.registry.REWARDS`.

Each submodule below registers its functions when imported (the registry imports this
package the first time it is used).
"""
from roll.rewards.base import RewardFn, RewardOutput
from roll.rewards import code as _code  # noqa: F401  (registers code_sandbox)

__all__ = ["RewardFn", "RewardOutput"]
