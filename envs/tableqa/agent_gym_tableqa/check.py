"""Checking a TableQA answer: the text after the last ``####``, normalised by the answer's type.

- ``int``: a number (commas, ``$``, spaces, a trailing ``.`` or ``.0`` allowed) equal to the answer;
- ``decimal`` (the question asks for 2 decimal places): a number within half a cent of the exact
  value (so any correct rounding of it, half-up or half-even, or a more precise value, is right);
- ``str``: equal ignoring case, surrounding whitespace, quotes, markdown bold and a final ``.``;
- ``date``: the same calendar day, written ``YYYY-MM-DD`` (a trailing ``00:00:00`` time is allowed).
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction
from typing import Any, Literal

from agent_gym.core.grading import AnswerCheck, after_marker, clean_answer
from agent_gym.core.grading import parse_number as _parse_number

__all__ = ["check_answer", "extract_final_answer", "parse_number"]

Reason = Literal["correct", "no_final_answer", "unparsable_answer", "wrong_answer"]


def extract_final_answer(response: str) -> str | None:
    """The first non-blank line after the last ``####`` (stripped); ``None`` without a marker."""
    return after_marker(response, skip_blank=True)


def parse_number(text: str) -> Fraction | None:
    """An exact number from an answer (``"$1,234.50"`` -> ``Fraction(2469, 2)``); ``None`` if it is
    not one (:func:`agent_gym.core.grading.parse_number`, lenient: any commas, spaces, quotes)."""
    return _parse_number(text, lenient=True)


def check_answer(response: str, answer_type: str, exact: Any) -> AnswerCheck:
    """Grade ``response`` against the exact reference (see the module docstring)."""
    predicted = extract_final_answer(response)
    if predicted is None:
        return AnswerCheck("no_final_answer", predicted=None)
    if answer_type in ("int", "decimal"):
        value = parse_number(predicted)
        if value is None:
            return AnswerCheck("unparsable_answer", predicted=predicted)
        ok = value == Fraction(exact) if answer_type == "int" else abs(value - Fraction(exact)) <= Fraction(1, 200)
    elif answer_type == "date":
        text = clean_answer(predicted)
        try:
            day = dt.date.fromisoformat(text.split()[0].split("T")[0]) if text else None
        except ValueError:
            day = None
        if day is None:
            return AnswerCheck("unparsable_answer", predicted=predicted)
        ok = day.isoformat() == str(exact)
    else:
        text = clean_answer(predicted)
        if not text:
            return AnswerCheck("unparsable_answer", predicted=predicted)
        ok = text.casefold() == clean_answer(str(exact)).casefold()
    return AnswerCheck("correct" if ok else "wrong_answer", predicted=predicted)
