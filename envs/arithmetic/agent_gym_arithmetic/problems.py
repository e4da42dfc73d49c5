"""Seeded generation of arithmetic problems, and the answer check."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.core.grading import AnswerCheck, evaluate_arithmetic, final_number
from agent_gym.tools.calculator import format_number

__all__ = ["LEVELS", "SPLITS", "ArithmeticTask", "generate_task", "final_number", "check_answer"]

SPLITS = ("train", "test")

#: Difficulty levels: how the expression is built (operand ranges and operators).
LEVELS: dict[int, str] = {
    1: "a + b with a, b in 1..9",
    2: "a + b or a - b with a, b in 10..99",
    3: "a * b with a in 2..9, b in 10..99",
    4: "(a + b) * c or a * b - c with two-digit numbers",
}


@dataclass(frozen=True)
class ArithmeticTask:
    """One problem: ``id`` is ``"<split>-L<level>-<n>"`` and fully determines the expression."""

    id: str
    level: int
    expression: str
    answer: str


def generate_task(n: int, level: int, split: str) -> ArithmeticTask:
    """The task with id ``f"{split}-L{level}-{n}"``, the same in every process."""
    GeneratedTaskId.check(split, level, splits=SPLITS, variants=LEVELS, env="arithmetic", variant_name="level")
    # crc32 (not hash()) so the seed does not depend on PYTHONHASHSEED; the split is in the seed so
    # train and test draw different streams.
    rng = np.random.default_rng([zlib.crc32(split.encode()), level, n])
    r = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731 - tiny local helper
    if level == 1:
        expression = f"{r(1, 9)} + {r(1, 9)}"
    elif level == 2:
        expression = f"{r(10, 99)} {'+-'[r(0, 1)]} {r(10, 99)}"
    elif level == 3:
        expression = f"{r(2, 9)} * {r(10, 99)}"
    else:
        a, b, c = r(10, 99), r(10, 99), r(2, 9)
        expression = f"({a} + {b}) * {c}" if r(0, 1) else f"{a} * {c} - {b}"
    return ArithmeticTask(str(GeneratedTaskId(split, f"L{level}", n)), level, expression, format_number(evaluate_arithmetic(expression)))


def check_answer(response: str, expected: str) -> AnswerCheck:
    """The check's reason is ``correct``, ``no_number`` or ``wrong_answer``; its ``value`` the number read."""
    given = final_number(response)
    if given is None:
        return AnswerCheck("no_number", expected=expected)
    value = Fraction(given)
    return AnswerCheck("correct" if value == Fraction(expected) else "wrong_answer", predicted=given, value=value, expected=expected)
