"""Reading and checking a final answer: the pieces every env's ``grade`` is built from.

An env decides what counts as right (a number, an expression over given numbers, a golden string,
a date); how the answer is *read* out of a response is the same everywhere, so it lives here once:

=============================  ===================================================================
:func:`after_marker`           the text after the last ``####`` (GSM8K's format)
:func:`tagged`                 the text of the last ``<answer>...</answer>`` (or one left open)
:func:`parse_number`           an exact :class:`~fractions.Fraction` from a numeric answer
:func:`normalize_number`       its canonical string (``"$1,000.00"`` -> ``"1000"``)
:func:`numbers_in`             the numbers written anywhere in a text
:func:`final_number`           the number after ``####``, else the last one (a lenient reading)
:func:`evaluate_arithmetic`    the safe calculator (floats, Python's semantics)
:func:`evaluate_exact`         the same parser, exact rational arithmetic
:class:`AnswerCheck`           the verdict: ``reason`` (``"correct"`` or why not) and what was read
=============================  ===================================================================

Env packages import these from here (never from another env package); the two evaluators are the
calculator tool's own (:mod:`agent_gym.tools.calculator`), so the policy's calculator and the grader
agree on what an expression means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

from agent_gym.tools.calculator import CalculatorError, evaluate_arithmetic, evaluate_exact

__all__ = [
    "ANSWER_MARKER",
    "AnswerCheck",
    "CalculatorError",
    "after_marker",
    "clean_answer",
    "evaluate_arithmetic",
    "evaluate_exact",
    "final_number",
    "format_fraction",
    "normalize_number",
    "numbers_in",
    "parse_number",
    "tagged",
]

#: Marker that introduces the final answer, as in the GSM8K reference solutions.
ANSWER_MARKER = "####"


@dataclass(frozen=True)
class AnswerCheck:
    """The verdict on one response.

    Attributes:
        reason: ``"correct"``, or why not (each env names its reasons: ``"no_final_answer"``,
            ``"wrong_answer"``, ``"number_reused"``...).
        predicted: the answer as read from the response (``None`` when there was none).
        normalized: its canonical form, when the env has one (a canonical number, the expression
            that was checked).
        value: its exact value, when it is a number.
        expected: the reference it was checked against, as given.
        score: a partial-credit score reported beside the verdict (SearchQA's token F1), else ``None``.
        detail: a one-line explanation for people and logs.
        extra: anything else an env reports (Countdown's ``numbers_used``).
    """

    reason: str
    predicted: str | None = None
    normalized: str | None = None
    value: Fraction | None = None
    expected: Any = None
    score: float | None = None
    detail: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.reason == "correct"

    @property
    def reward(self) -> float:
        return 1.0 if self.correct else 0.0


# -- reading the answer --------------------------------------------------------------------------


def after_marker(text: str, marker: str = ANSWER_MARKER, *, first_line: bool = True, skip_blank: bool = False) -> str | None:
    """The text after the last ``marker`` in ``text``, stripped; ``None`` when there is no marker.

    The *last* marker wins, so a response that corrects itself is graded on its final answer.

    Args:
        first_line: keep only the first line after the marker (``""`` when the marker ends its
            line); off: everything after it.
        skip_blank: with ``first_line``, skip blank lines right after the marker (``"####\\n18"``
            reads ``"18"`` rather than ``""``).
    """
    if marker not in text:
        return None
    tail = text.rsplit(marker, 1)[1]
    if not first_line:
        return tail.strip()
    lines = (tail.strip() if skip_blank else tail).splitlines()
    return lines[0].strip() if lines else ""


def tagged(text: str, tag: str = "answer", *, open_at_end: bool = True) -> str | None:
    """The text of the last ``<tag>...</tag>`` block (case-insensitive), stripped.

    With ``open_at_end``, a ``<tag>`` opened after the last closed block and never closed counts too
    (the text after it): a generation cut at its token limit leaves one. ``None`` when there is
    neither.
    """
    opening, closing = re.escape(f"<{tag}>"), re.escape(f"</{tag}>")
    closed = list(re.finditer(f"{opening}(.*?){closing}", text, re.DOTALL | re.IGNORECASE))
    if open_at_end:
        last_open = None
        for m in re.finditer(opening, text, re.IGNORECASE):
            last_open = m
        if last_open is not None and (not closed or last_open.start() > closed[-1].start()):
            if not re.compile(closing, re.IGNORECASE).search(text, last_open.end()):
                return text[last_open.end():].strip()
    return closed[-1].group(1).strip() if closed else None


# -- numbers -------------------------------------------------------------------------------------

# One optional sign (so "+-3" is rejected), an integer part that is either plain digits or correctly
# grouped thousands ("1,000", "12,345,678"), and an optional fraction. Grouping is checked rather
# than deleting every comma so that "3,5" (a decimal comma) or "1,00" is rejected instead of being
# silently read as 35 / 100.
_STRICT_NUMBER = re.compile(r"([-+])?(\d{1,3}(?:,\d{3})+|\d*)(?:\.(\d+))?")
# After the lenient clean-up (commas and whitespace removed): "12", "12.", "12.5", ".5".
_LENIENT_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")
# A number written in running text: "-3", "1,234", "2.5".
_NUMBER_IN_TEXT = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _unbold(s: str) -> str:
    return s[2:-2].strip() if len(s) > 4 and s.startswith("**") and s.endswith("**") else s


def clean_answer(text: str) -> str:
    """An answer without its wrapping, in this order: surrounding whitespace, markdown bold
    ``**...**``, quotes and backticks, one final ``.``; inner runs of whitespace become one space
    (``" **`Alpha  Desk.`** "`` -> ``"Alpha Desk"``)."""
    s = _unbold(text.strip()).strip("`'\"").strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    return " ".join(s.split())


def parse_number(text: str, *, lenient: bool = False) -> Fraction | None:
    """The exact value of a numeric answer, or ``None`` if ``text`` is not a bare number.

    Both modes strip surrounding whitespace and markdown bold ``**...**``, delete every ``$`` and
    drop one trailing ``.`` (a full stop). Then:

    * strict (the default): ``[+-]?digits(.digits)?`` where the integer part may use correctly
      grouped thousands commas (``"1,000"``; ``"1,00"`` is rejected) and may be empty before a
      fraction (``".5"``);
    * ``lenient``: surrounding quotes and backticks are dropped too, every comma and whitespace is
      removed (``"1 234,5"`` is 12345), and a bare trailing ``.`` is allowed (:func:`clean_answer`
      first).

    Units (``"18 eggs"``), ``%``, words and fractions like ``"1/2"`` give ``None`` in both modes: a
    parser that guessed would reward format drift.
    """
    if lenient:
        s = "".join(clean_answer(text).replace("$", "").replace(",", "").split())
        return Fraction(s) if _LENIENT_NUMBER.fullmatch(s) else None
    s = _unbold(text.strip()).replace("$", "").strip()
    if s.endswith("."):
        s = s[:-1]
    match = _STRICT_NUMBER.fullmatch(s)
    if match is None:
        return None
    sign, int_part, frac_part = match.groups()
    if not int_part and frac_part is None:
        return None  # "" or "-": the pattern allows an empty integer part only before a fraction
    value = Fraction(f"{int_part.replace(',', '') or '0'}.{frac_part or '0'}")
    return -value if sign == "-" else value


def format_fraction(value: Fraction) -> str:
    """The canonical decimal string of a terminating fraction: no leading zeros, no trailing zeros,
    no ``+`` and no ``-0`` (``Fraction(7, 2)`` -> ``"3.5"``).

    Raises:
        ValueError: the fraction has no finite decimal expansion (``1/3``).
    """
    numerator, denominator = value.numerator, value.denominator
    places = 0
    while 10 ** places % denominator:
        if places > denominator.bit_length():  # 2**a * 5**b needs max(a, b) places
            raise ValueError(f"{value} has no finite decimal expansion")
        places += 1
    digits = str(abs(numerator) * 10 ** places // denominator).rjust(places + 1, "0")
    whole, fraction = (digits[:-places], digits[-places:].rstrip("0")) if places else (digits, "")
    text = f"{whole}.{fraction}" if fraction else whole
    return "-" + text if numerator < 0 else text


def normalize_number(text: str) -> str | None:
    """The canonical string of a strict :func:`parse_number`, or ``None``.

    Examples:
        ``"$1,000.00"`` -> ``"1000"``, ``"18."`` -> ``"18"``, ``"-3.50"`` -> ``"-3.5"``,
        ``".5"`` -> ``"0.5"``, ``"+7"`` -> ``"7"``, ``"eighteen"`` -> ``None``.
    """
    value = parse_number(text)
    return None if value is None else format_fraction(value)


def numbers_in(text: str) -> list[str]:
    """The numbers written in running text, in order, without their commas (``"1,234"`` is one number,
    ``"1234"``; ``"x-3"`` has ``"-3"``)."""
    return [token.replace(",", "") for token in _NUMBER_IN_TEXT.findall(text)]


def final_number(text: str) -> str | None:
    """The answer a loosely formatted response gives: the first number after the last ``####`` if
    there is one, else the last number of the text (small models rarely follow an answer format);
    ``None`` if there is none."""
    tail = after_marker(text, first_line=False)
    numbers = numbers_in(text if tail is None else tail)
    if not numbers:
        return None
    return numbers[-1] if tail is None else numbers[0]
