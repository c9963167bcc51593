"""Reward functions, registered by name in `roll.registry.REWARDS`.

Each submodule below registers its functions when imported (the registry imports this
package the first time it is used).
"""
from roll.rewards.base import RewardFn, RewardOutput

__all__ = ["RewardFn", "RewardOutput"]
