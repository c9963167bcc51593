"""FrozenLake as a text environment, on top of gymnasium's FrozenLake.

Each reset draws a random map (start and goal on random cells, holes with probability
``1 - p_frozen``, the goal always reachable) and builds gymnasium's ``FrozenLakeEnv`` from it;
its transition table ``P`` (including the slippery dynamics) drives every step. Observation:
rows of ``P`` you, ``_`` frozen, ``O`` hole, ``G`` goal, ``X`` you in a hole, ``√`` you on the
goal. Actions: ``Left``, ``Down``, ``Right``, ``Up``.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
from roll.envs.base import TextEnv, grid_text_space
from roll.envs.parsing import ParserConfig

#: Action words in gymnasium's FrozenLake order (0 Left, 1 Down, 2 Right, 3 Up).
ACTIONS = ("Left", "Down", "Right", "Up")
_ACTION_INDEX = {a: i for i, a in enumerate(ACTIONS)}
DEFAULT_SYMBOLS = {"player": "P", "frozen": "_", "hole": "O", "goal": "G", "player_in_hole": "X", "player_on_goal": "√"}


class MapGenerationError(RuntimeError):
    """No map met the constraints within max_tries."""


def _shortest_path_lengths(desc: list[str], goal: int) -> list[int]:
    """BFS distance (in moves) from every cell to the goal, avoiding holes; -1 if unreachable."""
    nrow, ncol = len(desc), len(desc[0])
    dist = [-1] * (nrow * ncol)
    dist[goal] = 0
    queue = deque([goal])
    while queue:
        s = queue.popleft()
        r, c = divmod(s, ncol)
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < nrow and 0 <= nc < ncol:
                n = nr * ncol + nc
                if dist[n] < 0 and desc[nr][nc] != "H":
                    dist[n] = dist[s] + 1
                    queue.append(n)
    return dist


def check_map_args(size: int, p_frozen: float, min_path_length: int) -> None:
    if size < 2:
        raise ValueError(f"size must be >= 2, got {size}")
    if not 0.0 < p_frozen <= 1.0:
        raise ValueError(f"p_frozen must be in (0, 1], got {p_frozen}")
    if not 1 <= min_path_length <= 2 * (size - 1):
        raise ValueError(f"min_path_length must be in [1, {2 * (size - 1)}] for size {size}, got {min_path_length}")


def generate_map(
    rng: np.random.Generator | int | None,
    size: int = 4,
    p_frozen: float = 0.8,
    min_path_length: int = 1,
    max_tries: int = 1000,
) -> list[str]:
    """A random FrozenLake map (gymnasium's S/F/H/G letters) with the goal reachable from the start."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    check_map_args(size, p_frozen, min_path_length)
    n = size * size
    for _ in range(max_tries):
        start, goal = (int(x) for x in rng.choice(n, size=2, replace=False))
        holes = (rng.random(n) >= p_frozen).tolist()
        cells = ["H" if h else "F" for h in holes]
        cells[start], cells[goal] = "S", "G"
        desc = ["".join(cells[r * size : (r + 1) * size]) for r in range(size)]
        d = _shortest_path_lengths(desc, goal)[start]
        if d >= min_path_length:
            return desc
    raise MapGenerationError(
        f"no {size}x{size} map with p_frozen={p_frozen} and a path of >= {min_path_length} moves "
        f"after {max_tries} tries"
    )


class FrozenLakeEnv(TextEnv):
    """Random-map FrozenLake; reaching the goal succeeds, a hole ends the episode."""

    action_words = ACTIONS

    def __init__(
        self,
        size: int = 4,
        p_frozen: float = 0.8,
        is_slippery: bool = False,
        success_rate: float = 1.0 / 3.0,
        min_path_length: int = 1,
        max_steps: int = 100,
        symbols: Mapping[str, str] | None = None,
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
        self.symbols = dict(DEFAULT_SYMBOLS)
        if symbols:
            unknown = sorted(set(symbols) - set(DEFAULT_SYMBOLS))
            if unknown:
                raise ValueError(f"unknown FrozenLake symbol name(s) {unknown}; valid: {list(DEFAULT_SYMBOLS)}")
            self.symbols.update(symbols)
        if len(set(self.symbols.values())) != len(self.symbols):
            raise ValueError(f"FrozenLake symbols must be distinct, got {self.symbols}")
        self.map_kwargs = dict(size=int(size), p_frozen=float(p_frozen), min_path_length=int(min_path_length))
        check_map_args(**self.map_kwargs)
        self.is_slippery = bool(is_slippery)
        self.success_rate = float(success_rate)
        self.observation_space = grid_text_space("".join(self.symbols.values()))
        self.lake: GymFrozenLake | None = None
        self.state = 0
        self._policy: list[int] | None = None

    # ----- episode -------------------------------------------------------------------------
    def _new_episode(self, options: dict | None) -> None:
        desc = (options or {}).get("map")
        if desc is None:
            desc = generate_map(self.np_random, **self.map_kwargs)
        else:
            desc = [str(row) for row in desc]
            if not desc or any(len(r) != len(desc[0]) for r in desc) or "".join(desc).count("S") != 1:
                raise ValueError("a FrozenLake map is a rectangle of S/F/H/G rows with exactly one S")
        self.desc = desc
        self.lake = GymFrozenLake(desc=desc, is_slippery=self.is_slippery, success_rate=self.success_rate)
        self.ncol = len(desc[0])
        flat = "".join(desc)
        self.state = flat.index("S")
        self._cells = flat
        self._policy = None
        # Rendering: the static row characters, with the player patched in each step.
        s = self.symbols
        self._base = [s["hole"] if ch == "H" else s["goal"] if ch == "G" else s["frozen"] for ch in flat]
        self._on = {"H": s["player_in_hole"], "G": s["player_on_goal"]}

    def _apply(self, action: str) -> tuple[float, bool]:
        transitions = self.lake.P[self.state][_ACTION_INDEX[action]]
        if len(transitions) == 1:
            _, nxt, reward, _ = transitions[0]
        else:
            # The same draw as gymnasium's categorical sampling over the listed transitions.
            u = self.np_random.random()
            acc = 0.0
            for prob, nxt, reward, _ in transitions:
                acc += prob
                if u < acc:
                    break
        changed = nxt != self.state
        self.state = nxt
        return float(reward), changed

    def _is_success(self) -> bool:
        return self._cells[self.state] == "G"

    def _is_failure(self) -> bool:
        return self._cells[self.state] == "H"

    def _render_text(self) -> str:
        cells = list(self._base)
        cells[self.state] = self._on.get(self._cells[self.state], self.symbols["player"])
        w = self.ncol
        return "\n".join("".join(cells[i : i + w]) for i in range(0, len(cells), w))

    def instruction(self) -> str:
        s = self.symbols
        n = self.parser_config.max_actions_per_turn
        many = (
            f"You may give up to {n} actions in one answer, separated by commas, e.g. <answer>Left, Up</answer>."
            if n > 1
            else "Give exactly one action per answer, e.g. <answer>Left</answer>."
        )
        slip = (
            "The ice is slippery: you may slide to a side instead of where you meant to go.\n"
            if self.is_slippery
            else ""
        )
        return (
            "You are walking on a frozen lake. Reach the goal without falling into a hole.\n"
            f"{slip}"
            f"Symbols: {s['player']} you, {s['frozen']} frozen ice, {s['hole']} hole, {s['goal']} goal, "
            f"{s['player_in_hole']} you in a hole, {s['player_on_goal']} you on the goal.\n"
            f"Actions: {', '.join(ACTIONS)}.\n"
            f"Reward: +1 for reaching the goal. You have {self.max_steps} moves.\n"
            f"Think briefly inside <think>...</think> if you like, then answer inside <answer>...</answer>. {many}"
        )

    # ----- expert ----------------------------------------------------------------------------
    def expert_plan(self) -> list[str]:
        """Non-slippery: the remaining shortest path. Slippery: the next action of a policy that
        maximises the probability of reaching the goal ([] when done or no path exists)."""
        if self.lake is None:
            raise RuntimeError("call reset() before expert_plan()")
        if self._cells[self.state] in "GH":
            return []
        if not self.is_slippery:
            return self._shortest_plan()
        if self._policy is None:
            self._policy = self._solve_slippery()
        a = self._policy[self.state]
        return [] if a < 0 else [ACTIONS[a]]

    def _shortest_plan(self) -> list[str]:
        P = self.lake.P
        parent = {self.state: (-1, -1)}
        queue = deque([self.state])
        while queue:
            s = queue.popleft()
            if self._cells[s] == "G":
                plan = []
                while parent[s][0] >= 0:
                    s, a = parent[s]
                    plan.append(ACTIONS[a])
                return plan[::-1]
            if self._cells[s] == "H":
                continue
            for a in range(4):
                nxt = P[s][a][0][1]
                if nxt not in parent:
                    parent[nxt] = (s, a)
                    queue.append(nxt)
        return []

    def _solve_slippery(self, gamma: float = 0.99, tol: float = 1e-9, max_iter: int = 10_000) -> list[int]:
        # Value iteration on the known transition table; the discount makes the policy prefer
        # shorter routes among equally safe ones.
        P = self.lake.P
        n = len(self._cells)
        value = [0.0] * n
        for _ in range(max_iter):
            delta = 0.0
            for s in range(n):
                if self._cells[s] in "GH":
                    continue
                best = max(
                    sum(p * (r + (0.0 if done else gamma * value[nx])) for p, nx, r, done in P[s][a]) for a in range(4)
                )
                delta = max(delta, abs(best - value[s]))
                value[s] = best
            if delta < tol:
                break
        policy = []
        for s in range(n):
            if self._cells[s] in "GH":
                policy.append(-1)
                continue
            q = [sum(p * (r + (0.0 if done else gamma * value[nx])) for p, nx, r, done in P[s][a]) for a in range(4)]
            policy.append(int(np.argmax(q)) if max(q) > 0 else -1)
        return policy
