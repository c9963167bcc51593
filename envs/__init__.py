"""Concrete environments, registered with gymnasium under the `roll/` namespace.

Importing this package registers every shipped env; each env folder has a light
`registration.py` holding only `gymnasium.register` calls with entry-point strings.
"""
import importlib

SHIPPED = ("sokoban", "frozen_lake", "webshop", "code")

for _name in SHIPPED:
    try:
        importlib.import_module(f"roll.envs.{_name}.registration")
    except ModuleNotFoundError as _e:
        # An env folder that does not exist yet in this checkout; anything else is a real error.
        if _e.name != f"roll.envs.{_name}" and _e.name != f"roll.envs.{_name}.registration":
            raise
