"""Outcome reward for GSM8K: exact match of the final ``#### <number>`` answer.

The policy is asked to end its response with a line ``#### <number>`` (the format of the GSM8K
references). :func:`score_answer` takes the text after the *last* ``####``, canonicalises both it
and the reference answer with :func:`normalize_number`, and compares the canonical strings exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ANSWER_MARKER",
    "AnswerCheck",
    "CheckReason",
    "extract_final_answer",
    "normalize_number",
    "score_answer",
]

#: Marker that introduces the final answer, as in the GSM8K reference solutions.
ANSWER_MARKER = "####"

#: Why an answer got its reward.
CheckReason = Literal["correct", "no_final_answer", "unparsable_answer", "wrong_answer"]

# One optional sign (so "+-3" is rejected), an integer part that is either plain digits or correctly
# grouped thousands ("1,000", "12,345,678"), and an optional fraction. Grouping is checked rather
# than deleting every comma so that "3,5" (a decimal comma) or "1,00" is rejected instead of being
# silently read as 35 / 100.
_NUMBER_RE = re.compile(r"([-+])?(\d{1,3}(?:,\d{3})+|\d*)(?:\.(\d+))?")


def normalize_number(text: str) -> str | None:
    """Return the canonical string of a numeric answer, or ``None`` if ``text`` is not a number.

    Steps, in order:

    * strip surrounding whitespace and surrounding markdown bold ``**...**``;
    * delete every ``$`` (so ``"$18"``, ``"-$3"`` and ``"$-3"`` all work);
    * drop one trailing ``.`` (sentence full stop);
    * require ``[+-]?digits(.digits)?`` where the integer part may use correctly grouped thousands
      commas (``"1,000"``; ``"1,00"`` is rejected) and may be empty before a fraction (``".5"``);
    * remove the commas, leading zeros of the integer part, trailing zeros of the fraction (and the
      ``.`` if nothing is left), a ``+`` sign, and the sign of zero.

    Anything else (units such as ``"18 eggs"``, ``"%"``, words, fractions like ``"1/2"``) gives
    ``None``: the prompt asks for a bare number, and a lenient parser would reward format drift.

    Examples:
        ``"$1,000.00"`` -> ``"1000"``, ``"18."`` -> ``"18"``, ``"-3.50"`` -> ``"-3.5"``,
        ``".5"`` -> ``"0.5"``, ``"+7"`` -> ``"7"``, ``"eighteen"`` -> ``None``.
    """
    s = text.strip()
    if len(s) > 4 and s.startswith("**") and s.endswith("**"):
        s = s[2:-2].strip()
    s = s.replace("$", "").strip()
    if s.endswith("."):
        s = s[:-1]
    match = _NUMBER_RE.fullmatch(s)
    if match is None:
        return None
    sign, int_part, frac_part = match.groups()
    if not int_part and frac_part is None:
        return None  # "" or "-": the regex allows an empty integer part only before a fraction
    int_part = int_part.replace(",", "").lstrip("0") or "0"
    frac_part = (frac_part or "").rstrip("0")
    canonical = f"{int_part}.{frac_part}" if frac_part else int_part
    if sign == "-" and canonical != "0":  # "-0" and "-0.00" are plain zero
        canonical = "-" + canonical
    return canonical


def extract_final_answer(response: str) -> str | None:
    """Return the text after the last ``####`` in ``response`` (first line only, stripped).

    Returns ``None`` when the response has no ``####`` at all, and ``""`` when the marker is
    followed by nothing on its line. The *last* marker wins so that a model which corrects itself
    is graded on its final answer, and one that hedges with several answers is graded on the last.
    """
    if ANSWER_MARKER not in response:
        return None
    tail = response.rsplit(ANSWER_MARKER, 1)[1]
    lines = tail.splitlines()
    return lines[0].strip() if lines else ""


@dataclass(frozen=True)
class AnswerCheck:
    """The outcome of grading one response.

    Attributes:
        reward: 1.0 if correct, else 0.0.
        correct: Whether the canonical predicted answer equals the canonical expected answer.
        predicted: The raw text extracted after the last ``####`` (``None`` if there was none).
        predicted_normalized: ``normalize_number(predicted)``, or ``None``.
        expected: The reference answer as given (not normalised).
        reason: ``"correct"``, ``"no_final_answer"`` (no ``####``), ``"unparsable_answer"``
            (``####`` present but not followed by a number) or ``"wrong_answer"``.
    """

    reward: float
    correct: bool
    predicted: str | None
    predicted_normalized: str | None
    expected: str
    reason: CheckReason


def score_answer(response: str, expected: str) -> AnswerCheck:
    """Grade ``response`` against the reference answer ``expected``.

    The comparison is exact on canonical strings (``"18.5"`` does not match ``"18"``); there is no
    float tolerance because GSM8K answers are exact and tolerance would reward rounding errors.

    Raises:
        ValueError: ``expected`` is not a number (a data error, never the policy's fault).
    """
    expected_normalized = normalize_number(expected)
    if expected_normalized is None:
        raise ValueError(f"expected answer {expected!r} is not a number")
    predicted = extract_final_answer(response)
    predicted_normalized = normalize_number(predicted) if predicted is not None else None
    reason: CheckReason
    if predicted is None:
        reason = "no_final_answer"
    elif predicted_normalized is None:
        reason = "unparsable_answer"
    elif predicted_normalized == expected_normalized:
        reason = "correct"
    else:
        reason = "wrong_answer"
    correct = reason == "correct"
    return AnswerCheck(
        reward=1.0 if correct else 0.0,
        correct=correct,
        predicted=predicted,
        predicted_normalized=predicted_normalized,
        expected=expected,
        reason=reason,
    )
