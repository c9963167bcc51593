"""Registered Sokoban variants (ids documented in docs/envs/sokoban.md)."""
import gymnasium

_ENTRY = "roll.envs.sokoban.env:SokobanEnv"

# The common setup: 6x6 room, one box.
gymnasium.register(
    id="roll/Sokoban-v0",
    entry_point=_ENTRY,
    kwargs={"width": 6, "height": 6, "num_boxes": 1, "max_steps": 100, "search_depth": 100},
)
# Larger and harder: 8x8 room, two boxes.
gymnasium.register(
    id="roll/Sokoban8x8-v0",
    entry_point=_ENTRY,
    kwargs={"width": 8, "height": 8, "num_boxes": 2, "max_steps": 100, "search_depth": 100},
)
# Same rooms as Sokoban-v0 drawn in the classic XSB level-file symbols, for generalisation tests.
gymnasium.register(
    id="roll/SokobanXSB-v0",
    entry_point=_ENTRY,
    kwargs={
        "width": 6,
        "height": 6,
        "num_boxes": 1,
        "max_steps": 100,
        "search_depth": 100,
        "symbols": {"wall": "#", "floor": "-", "target": ".", "box_on_target": "*", "box": "$", "player": "@", "player_on_target": "+"},
    },
)
