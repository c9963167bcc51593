"""Sokoban as a text environment: push every box onto a target.

Observation: the room as rows of symbols (defaults ``#`` wall, ``_`` floor, ``O`` target,
``X`` box, ``√`` box on target, ``P`` player, ``S`` player on target). Actions: ``Up``,
``Down``, ``Left``, ``Right`` inside ``<answer>...</answer>``. Rewards: ``step_penalty`` per
move, +1 when a box reaches a target, -1 when one leaves, +10 when solved; unparseable text
gets the format penalty and is a no-op step. ``box_distance_reward`` (default 0: off) adds
potential-based shaping for small models that rarely solve a room by chance: each push earns
the coefficient times the decrease of the boxes' summed push distance to the targets
(:meth:`Layout.box_distance`; a box pushed onto a dead cell loses the most). Being a
difference of potentials, it sums to the same total over any two paths between the same
states, so the solving plans stay the best ones. ``blocked_move_penalty`` (default 0) is
added to a move that changes nothing (into a wall, or a box that cannot move): a policy that
bumps repeats the same state, which under greedy decoding wastes the rest of the episode.
``canvas`` (default None: the room's own size) draws the room at the top left of a larger grid
of walls, ``[columns, rows]`` or one int for a square: every observation then has the same row
length, whatever the room's size. A model reads a cell's upper neighbour a fixed number of tokens
back (one row: the row length plus the newline); on a canvas that number is the same in a 6x6 and
an 8x8 room, where without one it is 7 in the one and 9 in the other.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from roll.envs.base import TextEnv, grid_text_space
from roll.envs.parsing import ParserConfig
from roll.envs.sokoban.generator import generate_room
from roll.envs.sokoban.room import ACTIONS, Layout, check_symbols, parse_level
from roll.envs.sokoban.solver import solve

_ACTION_INDEX = {a: i for i, a in enumerate(ACTIONS)}


class SokobanEnv(TextEnv):
    """Procedurally generated Sokoban; every room is solvable within ``max_steps``."""

    action_words = ACTIONS

    def __init__(
        self,
        width: int = 6,
        height: int = 6,
        num_boxes: int = 1,
        max_steps: int = 100,
        search_depth: int = 100,
        min_solution_length: int = 1,
        walk_steps: int | None = None,
        symbols: Mapping[str, str] | None = None,
        step_penalty: float = -0.1,
        box_on_target_reward: float = 1.0,
        box_off_target_penalty: float = -1.0,
        solved_reward: float = 10.0,
        box_distance_reward: float = 0.0,
        blocked_move_penalty: float = 0.0,
        canvas: int | Sequence[int] | None = None,
        max_actions_per_turn: int | None = None,
        format_penalty: float | None = None,
        parser: ParserConfig | Mapping[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(
            max_steps=max_steps,
            parser=parser,
            max_actions_per_turn=max_actions_per_turn,
            format_penalty=format_penalty,
            render_mode=render_mode,
        )
        self.symbols = check_symbols(symbols)
        self.gen_kwargs = dict(
            width=int(width),
            height=int(height),
            num_boxes=int(num_boxes),
            max_steps=self.max_steps,
            search_depth=int(search_depth),
            min_solution_length=int(min_solution_length),
            walk_steps=walk_steps,
        )
        # Fail at construction, not at the first reset, on impossible parameters.
        if min_solution_length > min(search_depth, max_steps) or min_solution_length < 1:
            raise ValueError(
                f"min_solution_length={min_solution_length} must be in [1, min(search_depth, max_steps)]"
            )
        self.canvas = _canvas_size(canvas, int(width), int(height))
        self.rewards = dict(
            step=float(step_penalty),
            on=float(box_on_target_reward),
            off=float(box_off_target_penalty),
            solved=float(solved_reward),
            distance=float(box_distance_reward),
            blocked=float(blocked_move_penalty),
        )
        self.observation_space = grid_text_space("".join(self.symbols.values()))
        self.layout: Layout | None = None
        self.player = 0
        self.boxes = 0
        self.optimal_length: int | None = None
        self._plan_cache: dict[int, list[str]] = {}

    # ----- episode -------------------------------------------------------------------------
    def _new_episode(self, options: dict | None) -> None:
        level = (options or {}).get("level")
        if level is not None:
            # A fixed level (in this env's symbols), e.g. for tests or curated evaluation sets.
            layout, player, boxes = parse_level(level, self.symbols)
            if self.canvas is not None and (layout.width > self.canvas[0] or layout.height > self.canvas[1]):
                raise ValueError(
                    f"a {layout.width}x{layout.height} level does not fit the canvas {self.canvas[0]}x{self.canvas[1]}"
                )
            self.layout, self.player, self.boxes = layout, player, boxes
            self.optimal_length = None
        else:
            room = generate_room(self.np_random, **self.gen_kwargs)
            self.layout, self.player, self.boxes = room.layout, room.player, room.boxes
            self.optimal_length = room.optimal_length
        self._plan_cache = {}

    def _apply(self, action: str) -> tuple[float, bool]:
        layout = self.layout
        r = self.rewards
        moved = layout.move(self.player, self.boxes, layout.dirs[_ACTION_INDEX[action]])
        if moved is None:
            return r["step"] + r["blocked"], False
        player, boxes, pushed = moved
        reward = r["step"]
        if pushed:
            tm = layout.target_mask
            before, after = self.boxes & tm, boxes & tm
            if after & ~before:
                reward += r["on"]
            if before & ~after:
                reward += r["off"]
            if boxes == tm:
                reward += r["solved"]
            if r["distance"]:
                # potential-based shaping: summed push distance of the boxes to the targets
                reward += r["distance"] * (layout.box_distance(self.boxes) - layout.box_distance(boxes))
        self.player, self.boxes = player, boxes
        return reward, True

    def _is_success(self) -> bool:
        return self.boxes == self.layout.target_mask

    def _render_text(self) -> str:
        text = self.layout.render(self.player, self.boxes, self.symbols)
        if self.canvas is None:
            return text
        cols, rows = self.canvas  # the room fits: checked at construction, a fixed level at reset
        wall = self.symbols["wall"]
        lines = [line + wall * (cols - len(line)) for line in text.split("\n")]
        lines += [wall * cols] * (rows - len(lines))
        return "\n".join(lines)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        info["optimal_length"] = self.optimal_length
        return obs, info

    # ----- text ----------------------------------------------------------------------------
    def instruction(self) -> str:
        s = self.symbols
        n = self.parser_config.max_actions_per_turn
        many = (
            f"You may give up to {n} actions in one answer, separated by commas, e.g. <answer>Up, Left</answer>."
            if n > 1
            else "Give exactly one action per answer, e.g. <answer>Left</answer>."
        )
        return (
            "You are playing Sokoban. Push every box onto a target. You move one cell per action; "
            "walking into a box pushes it one cell if the cell behind it is free. You cannot pull boxes, "
            "push two boxes at once, or walk through walls.\n"
            f"Symbols: {s['wall']} wall, {s['floor']} floor, {s['target']} target, {s['box']} box, "
            f"{s['box_on_target']} box on target, {s['player']} you, {s['player_on_target']} you on a target.\n"
            f"Actions: {', '.join(ACTIONS)}.\n"
            f"Rewards: {self.rewards['step']:+g} per move, {self.rewards['on']:+g} when a box reaches a target, "
            f"{self.rewards['off']:+g} when a box leaves one, {self.rewards['solved']:+g} when every box is on a target. "
            + (f"{self.rewards['distance']:+g} per push that brings a box closer to a target, the opposite per push away. "
               if self.rewards["distance"] else "")
            + (f"{self.rewards['blocked']:+g} more for a move into a wall or an immovable box. "
               if self.rewards["blocked"] else "")
            + f"You have {self.max_steps} moves.\n"
            f"Think briefly inside <think>...</think> if you like, then answer inside <answer>...</answer>. {many}"
        )

    # ----- solver ----------------------------------------------------------------------------
    def expert_plan(self) -> list[str]:
        """Remaining optimal action words from the current state ([] when solved or unsolvable)."""
        if self.layout is None:
            raise RuntimeError("call reset() before expert_plan()")
        key = (self.boxes << 16) | self.player
        plan = self._plan_cache.get(key)
        if plan is None:
            plan = solve(self.layout, self.player, self.boxes) or []
            # Cache every suffix along the plan, so an agent following it solves once per episode.
            p, b = self.player, self.boxes
            self._plan_cache[key] = plan
            for i, a in enumerate(plan):
                p, b, _ = self.layout.move(p, b, self.layout.dirs[_ACTION_INDEX[a]])
                self._plan_cache[(b << 16) | p] = plan[i + 1 :]
        return list(plan)


def _canvas_size(canvas: int | Sequence[int] | None, width: int, height: int) -> tuple[int, int] | None:
    """``canvas`` as (columns, rows), checked against the generated room's size."""
    if canvas is None:
        return None
    size = (canvas, canvas) if isinstance(canvas, int) else canvas
    if (isinstance(size, str) or not isinstance(size, Sequence) or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in size)):
        raise ValueError(f"canvas must be an int or [columns, rows] of ints, got {canvas!r}")
    size = tuple(size)
    if size[0] < width or size[1] < height:
        raise ValueError(f"canvas {size[0]}x{size[1]} is smaller than the {width}x{height} room")
    return size
