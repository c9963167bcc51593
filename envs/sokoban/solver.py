"""Optimal Sokoban solver: breadth-first search over (player, boxes) states.

Every move costs 1, so BFS returns a plan with the fewest moves. States where a box sits on a
dead cell (one from which no target is reachable, see ``Layout.live``) are pruned; that never
removes a solution. ``max_states`` bounds the work so a huge custom level cannot hang a caller.
"""
from __future__ import annotations

from roll.envs.sokoban.room import ACTIONS, Layout


def solve(layout: Layout, player: int, boxes: int, max_states: int = 2_000_000) -> list[str] | None:
    """Shortest plan (action words) from the given state to all boxes on targets.

    Returns [] when already solved and None when unsolvable (or the search exceeds max_states).
    """
    goal = layout.target_mask
    if boxes == goal:
        return []
    floor, live, dirs = layout.floor, layout.live, layout.dirs
    shift = layout.width * layout.height
    start = (boxes << 16) | player if shift <= 1 << 16 else None
    if start is None:
        raise ValueError("rooms larger than 65536 cells are not supported")
    # parent[key] = (previous key, action index); keys pack boxes and player into one int.
    parent: dict[int, tuple[int, int]] = {start: (-1, -1)}
    frontier = [start]
    while frontier:
        nxt = []
        for key in frontier:
            p = key & 0xFFFF
            bx = key >> 16
            for a in range(4):
                d = dirs[a]
                n = p + d
                if not floor[n]:
                    continue
                bit = 1 << n
                if bx & bit:
                    n2 = n + d
                    bit2 = 1 << n2
                    if not floor[n2] or bx & bit2 or not live[n2]:
                        continue
                    nb = (bx ^ bit) | bit2
                else:
                    nb = bx
                k2 = (nb << 16) | n
                if k2 in parent:
                    continue
                parent[k2] = (key, a)
                if nb == goal:
                    return _unwind(parent, k2)
                nxt.append(k2)
        if len(parent) > max_states:
            return None
        frontier = nxt
    return None


def _unwind(parent: dict[int, tuple[int, int]], key: int) -> list[str]:
    plan = []
    while True:
        prev, a = parent[key]
        if prev < 0:
            break
        plan.append(ACTIONS[a])
        key = prev
    plan.reverse()
    return plan
