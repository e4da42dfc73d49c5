"""Procedural Countdown tasks: seeded, solvable by construction, with disjoint train/test splits.

A task is built *from an expression*: pick some numbers, combine them at random with the level's
operators (keeping every intermediate result a positive integer), and the value becomes the target.
So every generated task has at least one solution (kept as :attr:`CountdownTask.solution`).

Ids and splits
--------------
A task id is ``"<split>-<difficulty>-<n>"`` (e.g. ``"train-easy-123"``): generation starts a numpy
generator seeded with ``n`` and draws candidates until one falls in the split, so the id alone
regenerates the task in any process. A candidate's split is a stable hash (sha256) of its content
(sorted numbers and target): about 10% of all possible tasks are ``test``, the rest ``train``, so no
``test`` task ever appears in ``train`` (not even with another seed).

Only numpy, the standard library and agent_gym's task ids are used here (no tokenizer), so generating
a data set is cheap.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import numpy as np

from agent_gym.core.tasks import GeneratedTaskId

__all__ = [
    "LEVELS",
    "SPLITS",
    "TEST_FRACTION",
    "CountdownLevel",
    "CountdownTask",
    "generate_task",
    "parse_task_id",
    "sample_task",
    "split_of",
    "task_from_id",
]

SPLITS = ("train", "test")
#: Share of the task space that belongs to the ``test`` split (by content hash).
TEST_FRACTION = 0.1


@dataclass(frozen=True)
class CountdownLevel:
    """How tasks of one difficulty are generated.

    Attributes:
        count: (min, max) how many numbers are given.
        small: (low, high) range of the "small" numbers (inclusive).
        large: pool of "large" numbers (TV-show style), drawn without replacement.
        large_count: (min, max) how many of the given numbers come from ``large``.
        used: (min, max) how many of the given numbers the construction uses (the others are
            distractors; the policy may use any subset).
        ops: operators of the construction (``/`` only where it divides exactly).
        target: (low, high) range of the target (inclusive).
    """

    count: tuple[int, int]
    small: tuple[int, int]
    used: tuple[int, int]
    ops: str
    target: tuple[int, int]
    large: tuple[int, ...] = ()
    large_count: tuple[int, int] = (0, 0)


#: The difficulty presets.
LEVELS: dict[str, CountdownLevel] = {
    # 2-3 numbers from 1..10; the target is one or two of + - * away (one operation in most
    # tasks: with 3 numbers, half the tasks use only two of them).
    "easy": CountdownLevel(count=(2, 3), small=(1, 10), used=(2, 3), ops="+-*", target=(2, 100)),
    # 4 numbers from 1..25, three or four of them used, all four operations.
    "medium": CountdownLevel(count=(4, 4), small=(1, 25), used=(3, 4), ops="+-*/", target=(10, 250)),
    # The TV game: 6 numbers, up to two of them large (25 50 75 100), a three-digit target built
    # from four to six of them.
    "hard": CountdownLevel(
        count=(6, 6), small=(1, 10), used=(4, 6), ops="+-*/", target=(100, 999),
        large=(25, 50, 75, 100), large_count=(0, 2),
    ),
}


@dataclass(frozen=True)
class CountdownTask:
    """One Countdown puzzle.

    Attributes:
        id: ``"<split>-<difficulty>-<n>"`` for generated tasks (or any string for custom ones).
        numbers: the numbers offered, in the order shown.
        target: the value to reach.
        difficulty: the level it was generated at (``"custom"`` for tasks given as a dict).
        solution: one expression reaching the target (empty when unknown).
    """

    id: str
    numbers: tuple[int, ...]
    target: int
    difficulty: str = "custom"
    solution: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "numbers": list(self.numbers), "target": self.target,
            "difficulty": self.difficulty, "solution": self.solution,
        }


def split_of(numbers: tuple[int, ...] | list[int], target: int) -> str:
    """The split a task belongs to: a stable hash of its content (independent of order and seed)."""
    key = ",".join(str(n) for n in sorted(numbers)) + f"->{target}"
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 1000
    return "test" if bucket < TEST_FRACTION * 1000 else "train"


def _candidate(rng: np.random.Generator, level: CountdownLevel) -> tuple[tuple[int, ...], int, str] | None:
    count = int(rng.integers(level.count[0], level.count[1] + 1))
    n_large = int(rng.integers(level.large_count[0], min(level.large_count[1], count) + 1)) if level.large else 0
    large = [int(x) for x in rng.choice(level.large, size=n_large, replace=False)] if n_large else []
    small = [int(x) for x in rng.integers(level.small[0], level.small[1] + 1, size=count - n_large)]
    numbers = large + small
    rng.shuffle(numbers)
    used = int(rng.integers(level.used[0], min(level.used[1], count) + 1))
    # Pool of (value, expression, is_compound); combine two random items until one remains.
    pool: list[tuple[Fraction, str, bool]] = [
        (Fraction(n), str(n), False) for n in (numbers[i] for i in sorted(rng.permutation(count)[:used]))
    ]
    while len(pool) > 1:
        i, j = (int(k) for k in rng.permutation(len(pool))[:2])
        (a, ea, ca), (b, eb, cb) = pool[i], pool[j]
        op = level.ops[int(rng.integers(0, len(level.ops)))]
        if op == "-" and a < b:
            (a, ea, ca), (b, eb, cb) = (b, eb, cb), (a, ea, ca)
        if op == "/" and (b in (0, 1) or a % b != 0):
            if a != 0 and b % a == 0 and a != 1:
                (a, ea, ca), (b, eb, cb) = (b, eb, cb), (a, ea, ca)
            else:
                op = "*"
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else Fraction(0)}[op]
        if value <= 0 or value.denominator != 1:
            return None  # keep the reference solution in positive integers
        left = f"({ea})" if ca else ea
        right = f"({eb})" if cb else eb
        pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [(value, f"{left} {op} {right}", True)]
    value, expression, _ = pool[0]
    target = int(value)
    if not level.target[0] <= target <= level.target[1] or target in numbers:
        return None
    return tuple(numbers), target, expression


def generate_task(n: int, difficulty: str = "medium", split: str = "train") -> CountdownTask:
    """The task with id ``f"{split}-{difficulty}-{n}"`` (deterministic in any process)."""
    GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=LEVELS, env="Countdown")
    if not 0 <= int(n) < 2**63:
        raise ValueError(f"task number must be in [0, 2**63), got {n}")
    level = LEVELS[difficulty]
    rng = np.random.default_rng(int(n))
    for _ in range(100_000):
        found = _candidate(rng, level)
        if found is not None and split_of(found[0], found[1]) == split:
            numbers, target, solution = found
            return CountdownTask(str(GeneratedTaskId(split, difficulty, int(n))), numbers, target, difficulty, solution)
    raise RuntimeError(f"could not generate a {difficulty} Countdown task from seed {n}")  # pragma: no cover


def sample_task(rng: np.random.Generator, difficulty: str = "medium", split: str = "train") -> CountdownTask:
    """A task drawn with ``rng`` (e.g. the env's seeded ``np_random``)."""
    return generate_task(int(rng.integers(0, 2**31)), difficulty, split)


def parse_task_id(task_id: str) -> GeneratedTaskId:
    """``"train-easy-123"`` -> ``("train", "easy", 123)``; ``KeyError`` explaining the form otherwise."""
    return GeneratedTaskId.parse(task_id, splits=SPLITS, variants=LEVELS, name="Countdown task")


def task_from_id(task_id: str) -> CountdownTask:
    split, difficulty, n = parse_task_id(task_id)
    return generate_task(n, difficulty, split)


def task_from_mapping(task: Mapping[str, Any]) -> CountdownTask:
    """A custom task from ``{"numbers": [...], "target": N}`` (optional ``id``, ``solution``).

    Custom tasks are not checked for solvability.
    """
    missing = {"numbers", "target"} - set(task)
    if missing:
        raise ValueError(f"a Countdown task needs the keys numbers and target; missing {sorted(missing)}")
    try:
        numbers = tuple(int(x) for x in task["numbers"])
        target = int(task["target"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"Countdown numbers and target must be integers ({exc})") from None
    if not numbers:
        raise ValueError("a Countdown task needs at least one number")
    return CountdownTask(
        id=str(task.get("id", "custom")), numbers=numbers, target=target,
        difficulty=str(task.get("difficulty", "custom")), solution=str(task.get("solution", "")),
    )
