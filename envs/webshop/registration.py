"""Gymnasium ids for WebShop (entry-point strings only: importing this loads no data)."""
import gymnasium

gymnasium.register(
    id="roll/WebShop-v0",
    entry_point="roll.envs.webshop.env:WebShopEnv",
    kwargs={"split": "train", "max_steps": 15},
)
