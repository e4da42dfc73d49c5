"""Wordle: the word list shipped with this package, feedback with the duplicate-letter rules, the game.

Feedback per letter of a guess: ``G`` right letter in the right spot, ``Y`` in the word but in
another spot, ``_`` not in the word (or no copy of it left). Duplicates follow the usual rules:
greens are given first; then, left to right, a letter is ``Y`` only while the answer still has an
unmatched copy of it. For example, the guess ``LEVEL`` against the answer ``HELLO`` scores
``Y G _ _ Y``: the ``E`` in place is green; the answer has no second ``E`` (so the other ``E`` is
``_``); it has two ``L``, neither in place, so both ``L`` are yellow.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

import numpy as np

from agent_gym.core.tasks import GeneratedTaskId
from agent_gym_games.common import SPLITS, split_of

__all__ = ["LEVELS", "WordleConfig", "WordleGame", "WordleTask", "answers", "generate_task", "score_guess", "words"]

WORD_LENGTH = 5


@dataclass(frozen=True)
class WordleConfig:
    """One difficulty: which answers, how many guesses, hard mode, whether letter hints are shown."""

    answers: str  # "easy" (the familiar words) or "all"
    max_guesses: int
    hard_mode: bool
    letter_hints: bool
    max_turns: int


LEVELS: dict[str, WordleConfig] = {
    "easy": WordleConfig("easy", max_guesses=6, hard_mode=False, letter_hints=True, max_turns=10),
    "medium": WordleConfig("all", max_guesses=6, hard_mode=False, letter_hints=True, max_turns=10),
    "hard": WordleConfig("all", max_guesses=6, hard_mode=True, letter_hints=False, max_turns=10),
}


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[str, ...], int]:
    text = resources.files("agent_gym_games").joinpath("data/words.txt").read_text(encoding="utf-8")
    out: list[str] = []
    easy_count = -1
    for line in text.splitlines():
        line = line.strip()
        if line == "# end of easy words":
            easy_count = len(out)
        if line and not line.startswith("#"):
            out.append(line.lower())
    return tuple(out), easy_count if easy_count > 0 else len(out)


def words() -> tuple[str, ...]:
    """Every word of the shipped list."""
    return _load()[0]


def answers(kind: str) -> tuple[str, ...]:
    """The possible answers: ``"easy"`` (the familiar words at the top of the list) or ``"all"``."""
    all_words, easy_count = _load()
    return all_words[:easy_count] if kind == "easy" else all_words


def score_guess(guess: str, answer: str) -> str:
    """Feedback for ``guess`` against ``answer``: a string of ``G``, ``Y`` and ``_``."""
    guess, answer = guess.lower(), answer.lower()
    if len(guess) != len(answer):
        raise ValueError("guess and answer must have the same length")
    result = ["_"] * len(guess)
    left = Counter(a for g, a in zip(guess, answer) if g != a)
    for i, (g, a) in enumerate(zip(guess, answer)):
        if g == a:
            result[i] = "G"
        elif left[g] > 0:
            result[i] = "Y"
            left[g] -= 1
    return "".join(result)


@dataclass(frozen=True)
class WordleTask:
    id: str
    answer: str
    difficulty: str = "custom"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "word": self.answer, "difficulty": self.difficulty}


def generate_task(n: int, difficulty: str = "easy", split: str = "train") -> WordleTask:
    """The task with id ``f"{split}-{difficulty}-{n}"``: a word of the level's answers in the split."""
    GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=LEVELS, env="Wordle")
    pool = [w for w in answers(LEVELS[difficulty].answers) if split_of("wordle:" + w) == split]
    rng = np.random.default_rng(int(n))
    return WordleTask(str(GeneratedTaskId(split, difficulty, int(n))), pool[int(rng.integers(len(pool)))], difficulty)


def task_from_mapping(task: Mapping[str, Any]) -> WordleTask:
    """A custom task from ``{"word": "crane"}`` (optional ``id``)."""
    word = str(task.get("word", "")).strip().lower()
    if len(word) != WORD_LENGTH or not word.isascii() or not word.isalpha():
        raise ValueError(f"a Wordle task needs the key word: {WORD_LENGTH} letters a-z, got {task.get('word')!r}")
    return WordleTask(str(task.get("id", "custom")), word, str(task.get("difficulty", "custom")))


class WordleGame:
    """A Wordle game in progress.

    Args:
        answer: the hidden word.
        max_guesses: the game is lost when they are used up.
        hard_mode: every revealed hint must be used: greens stay in place, yellows are included.
        word_list_only: guesses must be words of the shipped list (off by default: the list is small).
    """

    def __init__(self, answer: str, max_guesses: int = 6, *, hard_mode: bool = False, word_list_only: bool = False):
        self.answer = answer.lower()
        self.max_guesses = int(max_guesses)
        self.hard_mode = hard_mode
        self.word_list_only = word_list_only
        self.guesses: list[tuple[str, str]] = []

    @property
    def won(self) -> bool:
        return bool(self.guesses) and self.guesses[-1][0] == self.answer

    @property
    def over(self) -> bool:
        return self.won or len(self.guesses) >= self.max_guesses

    def check_guess(self, word: str) -> str | None:
        """Why ``word`` is not an acceptable guess, or ``None``."""
        if len(word) != WORD_LENGTH or not word.isascii() or not word.isalpha():
            shown = word if len(word) <= 20 else word[:20] + "..."
            return f"a guess must be one word of {WORD_LENGTH} letters a-z, got {shown!r}"
        if self.word_list_only and word not in set(words()):
            return f"{word.upper()!r} is not in the word list"
        if self.hard_mode:
            for guess, pattern in self.guesses:
                for i, (g, p) in enumerate(zip(guess, pattern)):
                    if p == "G" and word[i] != g:
                        return f"hard mode: letter {i + 1} must be {g.upper()}"
                need = Counter(g for g, p in zip(guess, pattern) if p in "GY")
                have = Counter(word)
                for letter, count in sorted(need.items()):
                    if have[letter] < count:
                        return f"hard mode: the guess must contain {letter.upper()}"
        return None

    def guess(self, word: str) -> tuple[str | None, str | None]:
        """Play ``word``: ``(pattern, None)``, or ``(None, why it was refused)`` (no guess used)."""
        word = word.lower()
        problem = self.check_guess(word)
        if problem is not None:
            return None, problem
        pattern = score_guess(word, self.answer)
        self.guesses.append((word, pattern))
        return pattern, None

    def known_greens(self) -> int:
        """Positions whose letter has been found (the shaping potential is this / 5)."""
        return sum(1 for i in range(WORD_LENGTH) if any(p[i] == "G" for _, p in self.guesses))

    def board(self) -> str:
        if not self.guesses:
            return "(no guesses yet)"
        return "\n".join(
            f"{i}. {' '.join(g.upper())}  ->  {' '.join(p)}" for i, (g, p) in enumerate(self.guesses, start=1)
        )

    def letter_hints(self) -> str:
        """What the guesses so far say about letters, in words."""
        greens = ["_"] * WORD_LENGTH
        present: set[str] = set()
        tried: set[str] = set()
        for guess, pattern in self.guesses:
            for i, (g, p) in enumerate(zip(guess, pattern)):
                tried.add(g)
                if p == "G":
                    greens[i] = g.upper()
                if p in "GY":
                    present.add(g)
        absent = sorted(tried - present)
        return (
            f"Known letters: {' '.join(greens)}. "
            f"In the word: {' '.join(sorted(c.upper() for c in present)) or '(none yet)'}. "
            f"Not in the word: {' '.join(c.upper() for c in absent) or '(none yet)'}."
        )
