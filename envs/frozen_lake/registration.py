"""Registered FrozenLake variants (ids documented in docs/envs/frozen_lake.md)."""
import gymnasium

_ENTRY = "roll.envs.frozen_lake.env:FrozenLakeEnv"

# Deterministic moves on a random 4x4 map.
gymnasium.register(
    id="roll/FrozenLake-v0",
    entry_point=_ENTRY,
    kwargs={"size": 4, "p_frozen": 0.8, "is_slippery": False, "max_steps": 100},
)
# gymnasium's slippery dynamics: the intended move succeeds with probability 1/3.
gymnasium.register(
    id="roll/FrozenLakeSlippery-v0",
    entry_point=_ENTRY,
    kwargs={"size": 4, "p_frozen": 0.8, "is_slippery": True, "max_steps": 100},
)
