"""Pieces shared by the games: splits, reading actions out of a response, moves.

Only the standard library here (the game logic modules add numpy), so levels can be generated
without a tokenizer. Level ids are :class:`agent_gym.core.tasks.GeneratedTaskId`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

__all__ = [
    "DIRECTIONS",
    "MOVE_WORDS",
    "SPLITS",
    "TEST_FRACTION",
    "last_tag",
    "parse_moves",
    "split_of",
]

SPLITS = ("train", "test")
#: Share of all possible levels that belong to the ``test`` split (by a hash of the level's content).
TEST_FRACTION = 0.1

#: Unit steps (row, column) of the four moves; row 1 is the top row.
DIRECTIONS: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
#: Accepted spellings of each move (case-insensitive).
MOVE_WORDS: dict[str, str] = {
    **{d: d for d in DIRECTIONS},
    "u": "up", "d": "down", "l": "left", "r": "right",
    "north": "up", "south": "down", "west": "left", "east": "right",
}


def split_of(key: str) -> str:
    """``"test"`` for about :data:`TEST_FRACTION` of all contents, else ``"train"`` (stable sha256)."""
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 1000
    return "test" if bucket < TEST_FRACTION * 1000 else "train"


def last_tag(text: str, tags: Sequence[str]) -> str | None:
    """The content of the last ``<tag>...</tag>`` (any of ``tags``) in ``text``, or ``None``.

    A tag opened after the last closed one and never closed (the response was cut at the stop
    token) counts too: its content runs to the end of the text.
    """
    names = "|".join(re.escape(t) for t in tags)
    best: tuple[int, str] | None = None
    for m in re.finditer(rf"<({names})>(.*?)</\1>", text, re.DOTALL | re.IGNORECASE):
        best = (m.start(), m.group(2))
    opens = list(re.finditer(rf"<({names})>", text, re.IGNORECASE))
    if opens and (best is None or opens[-1].start() > best[0]):
        rest = text[opens[-1].end():]
        if not re.search(rf"</({names})>", rest, re.IGNORECASE):
            return rest.strip()
    return None if best is None else best[1].strip()


def parse_moves(content: str, max_moves: int) -> tuple[list[str], str | None, int]:
    """Moves in an action's content: ``"up"``, ``"up, up, left"``, ``"U R R"``...

    Returns ``(moves, error, ignored)``: the canonical move names (at most ``max_moves``), why the
    action is invalid (then ``moves`` is empty), and how many moves past ``max_moves`` were dropped.
    """
    words = re.findall(r"[A-Za-z]+", content)
    if not words:
        return [], "the <action> tag holds no move (write up, down, left or right)", 0
    moves: list[str] = []
    for word in words:
        move = MOVE_WORDS.get(word.lower())
        if move is None:
            shown = word if len(word) <= 20 else word[:20] + "..."
            return [], f"unknown move {shown!r} (write up, down, left or right)", 0
        moves.append(move)
    return moves[:max_moves], None, max(0, len(moves) - max_moves)
