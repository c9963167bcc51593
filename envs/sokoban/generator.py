"""Sokoban room generator: a random-walk topology, then reverse play from the solved state.

1. Topology: a digger walks the interior of a walled rectangle, changing direction at random
   and sometimes widening its corridor, carving floor as it goes.
2. Targets go on random floor cells; the solved state has every box on a target.
3. Reverse play: a breadth-first search of *reverse* moves (the player steps back and may pull
   the box in front of it) from every solved state (any player cell). Reverse moves are exactly
   the forward moves undone, so each reached state is solvable and its BFS depth is its optimal
   solution length. The start state is drawn among states whose optimal length lies in
   ``[min_solution_length, min(search_depth, max_steps)]`` with no box on a target.

All randomness comes from one ``numpy.random.Generator`` (``numpy.random.default_rng(seed)``
for an int seed), so a seed always gives the same room and generation is thread-safe.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from roll.envs.sokoban.room import Layout


class GenerationError(RuntimeError):
    """No room met the requested constraints within max_tries."""


@dataclass
class GeneratedRoom:
    layout: Layout
    player: int
    boxes: int
    optimal_length: int
    """Fewest moves that solve the room (the reverse-BFS depth of the start state)."""
    tries: int
    """Topologies drawn before one met the constraints."""


def _carve(rng: np.random.Generator, width: int, height: int, walk_steps: int, p_change_direction: float) -> list[bool]:
    floor = [False] * (width * height)
    steps = [(-1, 0), (1, 0), (0, -1), (0, 1)]
    r = int(rng.integers(1, height - 1))
    c = int(rng.integers(1, width - 1))
    # Draw every random number of the walk at once: one numpy call instead of 4 per step.
    u = rng.random((walk_steps, 2)).tolist()
    k = rng.integers(0, 4, size=(walk_steps + 1, 2)).tolist()
    dr, dc = steps[k[walk_steps][0]]
    floor[r * width + c] = True
    for s in range(walk_steps):
        if u[s][0] < p_change_direction:
            dr, dc = steps[k[s][0]]
        r = min(max(r + dr, 1), height - 2)
        c = min(max(c + dc, 1), width - 2)
        floor[r * width + c] = True
        if u[s][1] < 0.5:  # widen: open one neighbour so rooms are not all one-cell corridors
            wr, wc = steps[k[s][1]]
            floor[min(max(r + wr, 1), height - 2) * width + min(max(c + wc, 1), width - 2)] = True
    return floor


def _reverse_bfs(layout: Layout, depth_limit: int, min_length: int) -> tuple[list[int], list[int]]:
    """Candidate start states (packed keys) and their optimal lengths."""
    floor, dirs = layout.floor, layout.dirs
    solved = layout.target_mask
    seen: set[int] = set()
    frontier = []
    for p in range(len(floor)):
        if floor[p] and not solved >> p & 1:
            key = (solved << 16) | p
            seen.add(key)
            frontier.append(key)
    cand_keys: list[int] = []
    cand_depth: list[int] = []
    depth = 0
    while frontier and depth < depth_limit:
        depth += 1
        nxt = []
        for key in frontier:
            q = key & 0xFFFF
            bx = key >> 16
            for d in dirs:
                pp = q - d
                if not floor[pp] or bx >> pp & 1:
                    continue
                # step back alone, and where a box is in front of the player, also pulling it along
                pulled = (bx, (bx ^ (1 << (q + d))) | (1 << q)) if bx >> (q + d) & 1 else (bx,)
                for nb in pulled:
                    k = (nb << 16) | pp
                    if k not in seen:
                        seen.add(k)
                        nxt.append(k)
                        if depth >= min_length and not nb & solved:
                            cand_keys.append(k)
                            cand_depth.append(depth)
        frontier = nxt
    return cand_keys, cand_depth


def generate_room(
    rng: np.random.Generator | int | None = None,
    *,
    width: int = 6,
    height: int = 6,
    num_boxes: int = 1,
    max_steps: int = 100,
    search_depth: int = 100,
    min_solution_length: int = 1,
    walk_steps: int | None = None,
    p_change_direction: float = 0.35,
    max_tries: int = 1000,
) -> GeneratedRoom:
    """Generate one solvable room whose optimal solution takes at most min(search_depth, max_steps) moves."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    if width < 3 or height < 3:
        raise ValueError(f"a room needs at least 3x3 cells, got {width}x{height}")
    if width * height > 1 << 16:
        raise ValueError(f"rooms are limited to 65536 cells, got {width}x{height}")
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
    interior = (width - 2) * (height - 2)
    if interior < num_boxes + 2:
        raise ValueError(f"a {width}x{height} room has {interior} inner cells, too few for {num_boxes} boxes")
    cap = min(search_depth, max_steps)
    if not 1 <= min_solution_length <= cap:
        raise ValueError(
            f"min_solution_length={min_solution_length} must be in [1, min(search_depth, max_steps)={cap}]"
        )
    walk = walk_steps if walk_steps is not None else max(4, 2 * interior)
    for attempt in range(1, max_tries + 1):
        floor = _carve(rng, width, height, walk, p_change_direction)
        cells = [i for i, f in enumerate(floor) if f]
        if len(cells) < num_boxes + 2:
            continue
        picks = rng.choice(len(cells), size=num_boxes, replace=False).tolist()
        layout = Layout(width, height, floor, tuple(sorted(cells[i] for i in picks)))
        keys, depths = _reverse_bfs(layout, cap, min_solution_length)
        if not keys:
            continue
        # Draw the solution length first (uniformly over the lengths this room offers), then a
        # state of that length: drawing states uniformly would favour the middle lengths,
        # which are the most numerous, and make long puzzles rare.
        first = {}
        for j, dep in enumerate(depths):
            first.setdefault(dep, j)
        levels = sorted(first)
        length = levels[int(rng.integers(len(levels)))]
        lo = first[length]
        hi = first[levels[levels.index(length) + 1]] if length != levels[-1] else len(depths)
        key = keys[lo + int(rng.integers(hi - lo))]
        return GeneratedRoom(layout, key & 0xFFFF, key >> 16, length, attempt)
    raise GenerationError(
        f"no {width}x{height} room with {num_boxes} box(es) and an optimal solution of "
        f"{min_solution_length}..{cap} moves after {max_tries} tries; lower min_solution_length "
        f"or raise search_depth/max_steps"
    )
