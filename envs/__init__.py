"""Concrete environments, registered with gymnasium under the `roll/` namespace.

Importing this package registers every shipped env; each env folder has a light
`registration.py` holding only `gymnasium.register` calls with entry-point strings, so the
env code itself is imported only when an env is made.
"""
import importlib

SHIPPED = ("sokoban", "frozen_lake", "webshop", "code", "tools", "agent_function", "arith")

for _name in SHIPPED:
    importlib.import_module(f"roll.envs.{_name}.registration")
