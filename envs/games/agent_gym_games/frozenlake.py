"""FrozenLake: lakes generated at random and kept only when a breadth-first search finds a safe path.

Cells (as in gymnasium's FrozenLake maps): ``S`` start, ``F`` frozen (safe), ``H`` hole, ``G`` goal.
The board shown to the policy marks the player with ``P``. Walking off the edge does nothing;
stepping on a hole ends the game (lost), reaching the goal ends it (won). With ``slip_prob > 0`` a
move goes to one of the two perpendicular directions instead, with that probability in total (a
generated lake always has a safe path, but slipping can still carry the player into a hole).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from agent_gym.core.tasks import GeneratedTaskId
from agent_gym_games.common import DIRECTIONS, SPLITS, split_of

__all__ = ["LEVELS", "LakeConfig", "LakeGame", "LakeLevel", "generate_level", "shortest_path"]

Pos = tuple[int, int]
_ORDER = ("up", "down", "left", "right")
_PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"), "left": ("up", "down"), "right": ("up", "down")}


@dataclass(frozen=True)
class LakeConfig:
    size: int
    hole_prob: float
    min_distance: int
    max_turns: int


LEVELS: dict[str, LakeConfig] = {
    "easy": LakeConfig(4, hole_prob=0.15, min_distance=3, max_turns=8),
    "medium": LakeConfig(6, hole_prob=0.2, min_distance=5, max_turns=12),
    "hard": LakeConfig(8, hole_prob=0.25, min_distance=8, max_turns=16),
}


@dataclass(frozen=True)
class LakeLevel:
    """A lake: rows of ``S F H G``, and a shortest safe path (``"UDLR"`` letters)."""

    id: str
    rows: tuple[str, ...]
    difficulty: str = "custom"
    solution: str = ""

    @property
    def start(self) -> Pos:
        return _find(self.rows, "S")

    @property
    def goal(self) -> Pos:
        return _find(self.rows, "G")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "grid": list(self.rows), "difficulty": self.difficulty, "solution": self.solution}


def _find(rows: tuple[str, ...], ch: str) -> Pos:
    for r, row in enumerate(rows):
        c = row.find(ch)
        if c >= 0:
            return (r, c)
    raise ValueError(f"no {ch!r} in the lake")


def _neighbour(pos: Pos, direction: str, height: int, width: int) -> Pos | None:
    dr, dc = DIRECTIONS[direction]
    r, c = pos[0] + dr, pos[1] + dc
    return (r, c) if 0 <= r < height and 0 <= c < width else None


def shortest_path(rows: tuple[str, ...] | list[str]) -> str | None:
    """A shortest path from ``S`` to ``G`` avoiding holes (``"UDLR"`` letters), or ``None``."""
    rows = tuple(rows)
    return _bfs(rows, _find(rows, "S"), _find(rows, "G"))


def _bfs(rows: tuple[str, ...], start: Pos, goal: Pos) -> str | None:
    height, width = len(rows), len(rows[0])
    parents: dict[Pos, tuple[Pos, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        pos = queue.popleft()
        if pos == goal:
            path = []
            node = pos
            while parents[node] is not None:
                node, letter = parents[node]  # type: ignore[misc]
                path.append(letter)
            return "".join(reversed(path))
        for direction in _ORDER:
            nxt = _neighbour(pos, direction, height, width)
            if nxt is None or nxt in parents or rows[nxt[0]][nxt[1]] == "H":
                continue
            parents[nxt] = (pos, direction[0].upper())
            queue.append(nxt)
    return None


class LakeGame:
    """A FrozenLake game in progress.

    Args:
        level: the lake.
        slip_prob: probability that a move slides to a perpendicular direction instead.
        rng: draws the slips (the env passes its seeded ``np_random``).
    """

    def __init__(self, level: LakeLevel, slip_prob: float = 0.0, rng: np.random.Generator | None = None):
        self.level = level
        self.rows = level.rows
        self.height, self.width = len(level.rows), len(level.rows[0])
        self.pos: Pos = level.start
        self.goal: Pos = level.goal
        self.slip_prob = float(slip_prob)
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.fell = False
        self._initial_distance = max(1, len(level.solution) or len(shortest_path(level.rows) or "x"))

    @property
    def won(self) -> bool:
        return self.pos == self.goal

    @property
    def over(self) -> bool:
        return self.won or self.fell

    def move(self, direction: str) -> tuple[str, str]:
        """Apply one move; returns ``(result, actual direction)``: ``"moved"``, ``"blocked"`` (the
        edge), ``"fell"`` (a hole) or ``"goal"``."""
        actual = direction
        if self.slip_prob > 0 and self.rng.random() < self.slip_prob:
            actual = _PERPENDICULAR[direction][int(self.rng.integers(2))]
        nxt = _neighbour(self.pos, actual, self.height, self.width)
        if nxt is None:
            return "blocked", actual
        self.pos = nxt
        cell = self.rows[nxt[0]][nxt[1]]
        if cell == "H":
            self.fell = True
            return "fell", actual
        if nxt == self.goal:
            return "goal", actual
        return "moved", actual

    def distance_to_goal(self) -> int | None:
        """Safe-path distance from the player to the goal (``None`` when cut off or fallen)."""
        if self.fell:
            return None
        path = _bfs(self.rows, self.pos, self.goal)
        return None if path is None else len(path)

    def progress(self) -> float:
        """1 - distance/initial distance, in [0, 1] (0 when fallen): the shaping potential."""
        d = self.distance_to_goal()
        return 0.0 if d is None else max(0.0, 1.0 - d / self._initial_distance)

    def board(self) -> str:
        lines = []
        for r, row in enumerate(self.rows):
            cells = []
            for c, ch in enumerate(row):
                cells.append("P" if (r, c) == self.pos and not self.fell else ("F" if ch == "S" else ch))
            lines.append(" ".join(cells))
        return "\n".join(lines)

    def positions(self) -> str:
        r, c = self.pos
        gr, gc = self.goal
        return f"You are at (row {r + 1}, column {c + 1}). The goal is at (row {gr + 1}, column {gc + 1})."


def _candidate(rng: np.random.Generator, cfg: LakeConfig) -> tuple[str, ...] | None:
    n = cfg.size
    cells = [(r, c) for r in range(n) for c in range(n)]
    start = cells[int(rng.integers(len(cells)))]
    far = [p for p in cells if abs(p[0] - start[0]) + abs(p[1] - start[1]) >= cfg.min_distance]
    if not far:
        return None
    goal = far[int(rng.integers(len(far)))]
    holes = rng.random((n, n)) < cfg.hole_prob
    rows = []
    for r in range(n):
        rows.append("".join(
            "S" if (r, c) == start else "G" if (r, c) == goal else ("H" if holes[r, c] else "F") for c in range(n)
        ))
    return tuple(rows)


def generate_level(n: int, difficulty: str = "easy", split: str = "train") -> LakeLevel:
    """The lake with id ``f"{split}-{difficulty}-{n}"`` (deterministic in any process)."""
    GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=LEVELS, env="FrozenLake")
    cfg = LEVELS[difficulty]
    rng = np.random.default_rng(int(n))
    for _ in range(100_000):
        rows = _candidate(rng, cfg)
        if rows is None:
            continue
        path = shortest_path(rows)
        if path is not None and split_of("frozenlake:" + "\n".join(rows)) == split:
            return LakeLevel(str(GeneratedTaskId(split, difficulty, int(n))), rows, difficulty, path)
    raise RuntimeError(f"could not generate a {difficulty} FrozenLake level from seed {n}")  # pragma: no cover


def level_from_mapping(task: Mapping[str, Any]) -> LakeLevel:
    """A custom lake from ``{"grid": ["SFFF", "FHFH", ...]}`` (optional ``id``); must have a safe path."""
    if "grid" not in task:
        raise ValueError("a FrozenLake task needs the key grid (rows of S, F, H, G)")
    grid = task["grid"]
    rows = tuple(grid.split() if isinstance(grid, str) else (str(r) for r in grid))
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError("a FrozenLake grid needs rows of equal length")
    if set("".join(rows)) - set("SFHG") or "".join(rows).count("S") != 1 or "".join(rows).count("G") != 1:
        raise ValueError("a FrozenLake grid holds only S F H G, with exactly one S and one G")
    path = shortest_path(rows)
    if path is None:
        raise ValueError("this FrozenLake grid has no safe path from S to G")
    return LakeLevel(str(task.get("id", "custom")), rows, str(task.get("difficulty", "custom")), path)
