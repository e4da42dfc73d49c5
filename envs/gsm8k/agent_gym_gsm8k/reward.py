"""Outcome reward for GSM8K: exact match of the final ``#### <number>`` answer.

The policy is asked to end its response with a line ``#### <number>`` (the format of the GSM8K
references). :func:`score_answer` takes the first line after the *last* ``####``
(:func:`agent_gym.core.grading.after_marker`), canonicalises both it and the reference answer with the
strict :func:`agent_gym.core.grading.normalize_number`, and compares the canonical strings exactly.
"""

from __future__ import annotations

from typing import Literal

from agent_gym.core.grading import ANSWER_MARKER, AnswerCheck, after_marker, normalize_number

__all__ = ["ANSWER_MARKER", "CheckReason", "extract_final_answer", "score_answer"]

#: Why an answer got its reward.
CheckReason = Literal["correct", "no_final_answer", "unparsable_answer", "wrong_answer"]


def extract_final_answer(response: str) -> str | None:
    """The first line after the last ``####`` in ``response``, stripped: ``None`` when the response
    has no ``####`` at all, ``""`` when the marker is followed by nothing on its line."""
    return after_marker(response)


def score_answer(response: str, expected: str) -> AnswerCheck:
    """Grade ``response`` against the reference answer ``expected``.

    The comparison is exact on canonical strings (``"18.5"`` does not match ``"18"``); there is no
    float tolerance because GSM8K answers are exact and tolerance would reward rounding errors.
    The check's ``reason`` is ``"correct"``, ``"no_final_answer"`` (no ``####``),
    ``"unparsable_answer"`` (``####`` not followed by a number) or ``"wrong_answer"``; ``predicted``
    is the raw text after the marker and ``normalized`` its canonical number.

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
    return AnswerCheck(reason, predicted=predicted, normalized=predicted_normalized, expected=expected)
