"""Checking a TableQA answer: the text after the last ``####``, normalised by the answer's type.

- ``int``: a number (commas, ``$``, spaces, a trailing ``.`` or ``.0`` allowed) equal to the answer;
- ``decimal`` (the question asks for 2 decimal places): a number within half a cent of the exact
  value (so any correct rounding of it, half-up or half-even, or a more precise value, is right);
- ``str``: equal ignoring case, surrounding whitespace, quotes, markdown bold and a final ``.``;
- ``date``: the same calendar day, written ``YYYY-MM-DD`` (a trailing ``00:00:00`` time is allowed).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

__all__ = ["AnswerCheck", "check_answer", "extract_final_answer", "parse_number"]

MARKER = "####"
Reason = Literal["correct", "no_final_answer", "unparsable_answer", "wrong_answer"]
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")


@dataclass(frozen=True)
class AnswerCheck:
    reward: float
    correct: bool
    reason: Reason
    predicted: str | None


def extract_final_answer(response: str) -> str | None:
    """The first line after the last ``####`` (stripped); ``None`` without a marker."""
    if MARKER not in response:
        return None
    lines = response.rsplit(MARKER, 1)[1].strip().splitlines()
    return lines[0].strip() if lines else ""


def _clean_text(s: str) -> str:
    s = s.strip()
    if len(s) > 4 and s.startswith("**") and s.endswith("**"):
        s = s[2:-2].strip()
    s = s.strip("`'\"").strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    return " ".join(s.split())


def parse_number(text: str) -> Fraction | None:
    """An exact number from an answer (``"$1,234.50"`` -> ``Fraction(2469, 2)``); ``None`` if it is not one."""
    s = _clean_text(text).replace("$", "").replace(",", "").replace(" ", "")
    if not _NUMBER.fullmatch(s):
        return None
    return Fraction(s)


def check_answer(response: str, answer_type: str, exact: Any) -> AnswerCheck:
    """Grade ``response`` against the exact reference (see the module docstring)."""
    predicted = extract_final_answer(response)
    if predicted is None:
        return AnswerCheck(0.0, False, "no_final_answer", None)
    if answer_type in ("int", "decimal"):
        value = parse_number(predicted)
        if value is None:
            return AnswerCheck(0.0, False, "unparsable_answer", predicted)
        ok = value == Fraction(exact) if answer_type == "int" else abs(value - Fraction(exact)) <= Fraction(1, 200)
    elif answer_type == "date":
        text = _clean_text(predicted)
        try:
            day = dt.date.fromisoformat(text.split()[0].split("T")[0]) if text else None
        except ValueError:
            day = None
        if day is None:
            return AnswerCheck(0.0, False, "unparsable_answer", predicted)
        ok = day.isoformat() == str(exact)
    else:
        text = _clean_text(predicted)
        if not text:
            return AnswerCheck(0.0, False, "unparsable_answer", predicted)
        ok = text.casefold() == _clean_text(str(exact)).casefold()
    return AnswerCheck(1.0 if ok else 0.0, ok, "correct" if ok else "wrong_answer", predicted)
