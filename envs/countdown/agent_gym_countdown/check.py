"""Reading and checking a Countdown answer, exactly.

Answer format
-------------
The answer is an arithmetic expression, taken from the **last** ``<answer>...</answer>`` block of the
response (an ``<answer>`` left open at the very end of the response counts too); without any
``<answer>`` tag, from the rest of the line after the last ``####``. Before checking:

- ``×``/``·`` become ``*``, ``÷`` becomes ``/``, ``−``/``–`` become ``-``, surrounding ``$``, backticks
  and a trailing ``.`` are dropped;
- a stated result is ignored: in ``(3 + 5) * 3 = 24`` only ``(3 + 5) * 3`` is checked (of the parts
  around ``=``, the first one that is not a bare number; the value is always computed, never read).

Checking
--------
The text is first validated by the project's safe calculator parser
(:func:`agent_gym.core.grading.evaluate_arithmetic`: no names, calls or other code, bounded
size), then evaluated with exact rational arithmetic (:func:`agent_gym.core.grading.evaluate_exact`), so ``6 / 4 * 2``
is exactly 3 and fractions may appear mid-way. Allowed: integer literals, binary ``+ - * /`` and
parentheses. Every literal must be one of the given numbers, each used at most as often as it is
given (not every number has to be used).

``AnswerCheck.reason`` is one of (in the order they are checked):

=====================  =============================================================================
``correct``            the expression equals the target
``no_answer``          no ``<answer>`` block and no ``####`` (or an empty one)
``unparsable``         not an arithmetic expression (syntax error, names, calls, too long, ...)
``operator_not_allowed`` an operator other than binary ``+ - * /`` (``**``, ``%``, ``//``, unary minus)
``number_not_given``   a literal that is not one of the given numbers (or not an integer)
``number_reused``      a given number used more often than it is given
``division_by_zero``   a division by zero somewhere in the expression
``wrong_value``        a valid expression whose value is not the target
=====================  =============================================================================
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from typing import Sequence

from agent_gym.core.grading import AnswerCheck, CalculatorError, after_marker, evaluate_arithmetic, evaluate_exact, tagged

__all__ = ["REASONS", "check_answer", "check_expression", "extract_answer"]

REASONS = (
    "correct", "no_answer", "unparsable", "operator_not_allowed", "number_not_given", "number_reused",
    "division_by_zero", "wrong_value",
)

_BARE_NUMBER_RE = re.compile(r"[+-]?\d+(?:\.\d+)?")
_TRANSLATE = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-"})
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def extract_answer(text: str) -> str | None:
    """The raw answer text of a response (see the module docstring), or ``None``."""
    answer = tagged(text, "answer")
    return answer if answer is not None else after_marker(text, skip_blank=True)


def _normalise(raw: str) -> str:
    text = raw.translate(_TRANSLATE).strip().strip("$`").strip()
    if text.endswith("."):
        text = text[:-1].rstrip()
    if "=" in text:
        parts = [p.strip() for p in text.split("=")]
        candidates = [p for p in parts if p and not _BARE_NUMBER_RE.fullmatch(p)]
        text = candidates[0] if candidates else next((p for p in parts if p), "")
    return text


def check_answer(response: str, numbers: Sequence[int], target: int) -> AnswerCheck:
    """Extract the answer from ``response`` and check it against the task."""
    raw = extract_answer(response)
    if raw is None or not raw.strip():
        return AnswerCheck("no_answer", detail="no <answer>...</answer> block and no '####' line")
    return check_expression(_normalise(raw), numbers, target)


def check_expression(expression: str, numbers: Sequence[int], target: int) -> AnswerCheck:
    """Check one (normalised) expression against the given numbers and the target."""
    expression = expression.strip()
    if not expression:
        return AnswerCheck("no_answer", normalized="", detail="the answer is empty")
    try:
        evaluate_arithmetic(expression)  # the safe parser: validates syntax and size, never evals
    except CalculatorError as exc:
        if str(exc) != "division by zero":  # that one we report after the number checks
            return AnswerCheck("unparsable", normalized=expression, detail=str(exc))
    tree = ast.parse(expression, mode="eval").body  # safe: the calculator accepted this text

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _OPS:
                return AnswerCheck("operator_not_allowed", normalized=expression, detail=f"operator {_op_name(node.op)} is not allowed; use + - * /")
        elif isinstance(node, ast.UnaryOp):
            return AnswerCheck("operator_not_allowed", normalized=expression, detail="unary signs are not allowed; write binary + - * / only")
        elif isinstance(node, ast.Constant) and _integer(node) is None:
            return AnswerCheck("number_not_given", normalized=expression, detail=f"{node.value!r} is not one of the given numbers {list(numbers)}")
    literals = [number for n in _in_order(tree) if (number := _integer(n)) is not None]  # reading order: all of them
    used = {"numbers_used": tuple(literals)}
    available = Counter(int(n) for n in numbers)
    counts = Counter(literals)
    for number in counts:
        if number not in available:
            return AnswerCheck("number_not_given", normalized=expression, extra=used, detail=f"{number} is not one of the given numbers {list(numbers)}")
    for number, times in counts.items():
        if times > available[number]:
            given = available[number]
            return AnswerCheck(
                "number_reused", normalized=expression, extra=used,
                detail=f"{number} is used {times} times but given {given} time{'s' if given != 1 else ''}",
            )
    try:
        value = evaluate_exact(expression)
    except CalculatorError as exc:
        if str(exc) != "division by zero":  # pragma: no cover - + - * / of given integers
            return AnswerCheck("unparsable", normalized=expression, extra=used, detail=str(exc))
        return AnswerCheck("division_by_zero", normalized=expression, extra=used, detail="division by zero")
    if value == target:
        return AnswerCheck("correct", normalized=expression, value=value, extra=used, detail=f"{expression} = {target}")
    return AnswerCheck("wrong_value", normalized=expression, value=value, extra=used, detail=f"{expression} = {value}, not {target}")


def _integer(node: ast.Constant) -> int | None:
    """The integer a literal writes (``4`` or ``4.0``), or ``None`` (``2.5``, a string, ``True``)."""
    value = node.value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _op_name(op: ast.operator) -> str:
    return {ast.Pow: "**", ast.Mod: "%", ast.FloorDiv: "//"}.get(type(op), type(op).__name__)


def _in_order(tree: ast.expr) -> list[ast.Constant]:
    """The constants of ``tree`` left to right (iterative: long chains make deep trees)."""
    out: list[ast.Constant] = []
    stack: list[ast.expr] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp):
            stack.append(node.right)
            stack.append(node.left)
        elif isinstance(node, ast.Constant):
            out.append(node)
    return out
