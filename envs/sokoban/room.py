"""Sokoban rooms: the static layout, the move rule, and text rendering/parsing.

Cells are flat indices ``row * width + col``. Every room is enclosed by walls, so a step from
any floor cell stays inside the grid and no bounds checks are needed. Boxes are a bitmask
(bit ``i`` set = box on cell ``i``), which makes states cheap to hash for the BFS searches.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Canonical action words, in the order of the direction table of a layout.
ACTIONS = ("Up", "Down", "Left", "Right")

#: Default text symbols (the common setup of the reference systems).
DEFAULT_SYMBOLS: dict[str, str] = {
    "wall": "#",
    "floor": "_",
    "target": "O",
    "box_on_target": "√",
    "box": "X",
    "player": "P",
    "player_on_target": "S",
}
#: The classic XSB level-file vocabulary (with '-' for floor so lines have no trailing blanks).
XSB_SYMBOLS: dict[str, str] = {
    "wall": "#",
    "floor": "-",
    "target": ".",
    "box_on_target": "*",
    "box": "$",
    "player": "@",
    "player_on_target": "+",
}
SYMBOL_NAMES = tuple(DEFAULT_SYMBOLS)


def check_symbols(symbols: Mapping[str, str] | None) -> dict[str, str]:
    """Complete a partial symbol mapping with the defaults and validate it."""
    merged = dict(DEFAULT_SYMBOLS)
    if symbols:
        unknown = sorted(set(symbols) - set(SYMBOL_NAMES))
        if unknown:
            raise ValueError(f"unknown Sokoban symbol name(s) {unknown}; valid: {list(SYMBOL_NAMES)}")
        merged.update(symbols)
    values = list(merged.values())
    if any(not isinstance(v, str) or len(v) != 1 or v.isspace() for v in values):
        raise ValueError(f"every Sokoban symbol must be one visible character, got {merged}")
    if len(set(values)) != len(values):
        raise ValueError(f"Sokoban symbols must be distinct, got {merged}")
    return merged


@dataclass
class Layout:
    """The static part of a room: walls, floor and targets, plus tables derived from them."""

    width: int
    height: int
    floor: list[bool]
    """floor[i] is True for every non-wall cell (targets included)."""
    targets: tuple[int, ...]
    target_mask: int = 0
    dirs: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Cell offsets of Up, Down, Left, Right."""
    live: list[bool] = field(default_factory=list)
    """live[i]: a box on cell i can still reach some target (boxes elsewhere are dead)."""
    push_distance: list[int] = field(default_factory=list)
    """push_distance[i]: fewest pushes that bring a box on cell i to some target, other boxes
    and the player's walk ignored; -1 on dead cells and walls."""
    dead_distance: int = 0
    """What :meth:`box_distance` counts for a box on a dead cell: the farthest live cell + 1."""

    def __post_init__(self) -> None:
        self.target_mask = 0
        for t in self.targets:
            self.target_mask |= 1 << t
        self.dirs = (-self.width, self.width, -1, 1)
        self.push_distance = self._push_distances()
        self.live = [d >= 0 for d in self.push_distance]
        self.dead_distance = max(self.push_distance) + 1

    def _push_distances(self) -> list[int]:
        # A box can reach a target from cell c iff it can be pulled from that target to c while
        # ignoring other boxes: pulling from b to b-d needs the player at b-d and room at b-2d.
        # Breadth-first from every target, so each cell gets its fewest pulls.
        n = self.width * self.height
        dist = [-1] * n
        queue = deque(self.targets)
        for t in queue:
            dist[t] = 0
        floor = self.floor
        while queue:
            b = queue.popleft()
            for d in self.dirs:
                c, p = b - d, b - 2 * d
                if 0 <= p < n and floor[c] and floor[p] and dist[c] < 0:
                    dist[c] = dist[b] + 1
                    queue.append(c)
        return dist

    def box_distance(self, boxes: int) -> int:
        """Sum over boxes of :attr:`push_distance`; a box on a dead cell counts
        :attr:`dead_distance` (the room can no longer be solved)."""
        dead = self.dead_distance
        total, i = 0, 0
        while boxes:
            if boxes & 1:
                d = self.push_distance[i]
                total += d if d >= 0 else dead
            boxes >>= 1
            i += 1
        return total

    def move(self, player: int, boxes: int, d: int) -> tuple[int, int, bool] | None:
        """One forward move: (new player, new boxes, pushed) or None when blocked."""
        n = player + d
        if not self.floor[n]:
            return None
        bit = 1 << n
        if boxes & bit:
            n2 = n + d
            bit2 = 1 << n2
            if not self.floor[n2] or boxes & bit2:
                return None
            return n, (boxes ^ bit) | bit2, True
        return n, boxes, False

    def render(self, player: int, boxes: int, symbols: Mapping[str, str]) -> str:
        s_wall, s_floor, s_target = symbols["wall"], symbols["floor"], symbols["target"]
        out = []
        w = self.width
        tm = self.target_mask
        for r in range(self.height):
            row = []
            for i in range(r * w, r * w + w):
                bit = 1 << i
                if not self.floor[i]:
                    row.append(s_wall)
                elif i == player:
                    row.append(symbols["player_on_target"] if tm & bit else symbols["player"])
                elif boxes & bit:
                    row.append(symbols["box_on_target"] if tm & bit else symbols["box"])
                else:
                    row.append(s_target if tm & bit else s_floor)
            out.append("".join(row))
        return "\n".join(out)


def mask_of(cells) -> int:
    m = 0
    for c in cells:
        m |= 1 << c
    return m


def cells_of(mask: int) -> list[int]:
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


def parse_level(text: str, symbols: Mapping[str, str] | None = None) -> tuple[Layout, int, int]:
    """Parse a rendered room back into (layout, player, boxes); raises ValueError on bad levels."""
    sym = check_symbols(symbols)
    by_char = {v: k for k, v in sym.items()}
    rows = [r for r in text.strip("\n").split("\n")]
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("a Sokoban level must be a non-empty rectangle of symbols")
    h, w = len(rows), len(rows[0])
    floor, targets, boxes, players = [], [], [], []
    for r, line in enumerate(rows):
        for c, ch in enumerate(line):
            kind = by_char.get(ch)
            if kind is None:
                raise ValueError(f"unknown symbol {ch!r} at row {r}, column {c}")
            i = r * w + c
            border = r in (0, h - 1) or c in (0, w - 1)
            if kind != "wall" and border:
                raise ValueError(f"the level must be enclosed by walls (open cell at row {r}, column {c})")
            floor.append(kind != "wall")
            if kind in ("target", "box_on_target", "player_on_target"):
                targets.append(i)
            if kind in ("box", "box_on_target"):
                boxes.append(i)
            if kind in ("player", "player_on_target"):
                players.append(i)
    if len(players) != 1:
        raise ValueError(f"a level needs exactly one player, found {len(players)}")
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"a level needs as many boxes as targets (>= 1), found {len(boxes)} and {len(targets)}")
    return Layout(w, h, floor, tuple(targets)), players[0], mask_of(boxes)
