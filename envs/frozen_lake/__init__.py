"""FrozenLake: random reachable maps on gymnasium's FrozenLake dynamics, as a text env."""
