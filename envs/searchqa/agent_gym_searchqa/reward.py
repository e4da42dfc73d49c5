"""The outcome reward of SearchQA: exact match after SQuAD normalisation, with token F1 beside it.

The answer is the text of the last ``<answer>...</answer>`` block of the final response (the format of
Search-R1, whose data plugs in here; an ``<answer>`` left open at the end of the response counts, as a
generation cut at its token limit would leave it). Both the answer and every golden answer are
normalised the way the SQuAD evaluation script does (lower case; punctuation, the articles a/an/the
and extra whitespace removed): the reward is 1.0 when the answer equals any golden answer so, else
0.0. Token F1 (the best over the golden answers) is reported in ``info["f1"]`` but is not the reward.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Literal, Sequence

from agent_gym.core.grading import AnswerCheck, tagged

__all__ = ["check_answer", "exact_match", "extract_answer", "f1_score", "normalize_answer"]

#: Why an answer got its reward.
CheckReason = Literal["correct", "no_answer", "wrong_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golden_answers: Sequence[str]) -> bool:
    """Whether ``prediction`` equals any golden answer after :func:`normalize_answer`."""
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(g) for g in golden_answers)


def f1_score(prediction: str, golden_answers: Sequence[str]) -> float:
    """The best token F1 of ``prediction`` against the golden answers (SQuAD's definition)."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for golden in golden_answers:
        expected = normalize_answer(golden).split()
        if not predicted or not expected:
            best = max(best, float(predicted == expected))
            continue
        common = sum((Counter(predicted) & Counter(expected)).values())
        if common:
            precision, recall = common / len(predicted), common / len(expected)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def extract_answer(response: str) -> str | None:
    """The text of the last ``<answer>...</answer>`` block, or of an ``<answer>`` left open at the
    end; ``None`` when the response has neither."""
    return tagged(response, "answer")


def check_answer(response: str, golden_answers: Sequence[str]) -> AnswerCheck:
    """Grade ``response`` against ``golden_answers``: ``no_answer`` (no ``<answer>`` tag),
    ``wrong_answer`` or ``correct``; the check's ``score`` is the token F1."""
    predicted = extract_answer(response)
    if predicted is None:
        return AnswerCheck("no_answer", score=0.0)
    reason: CheckReason = "correct" if exact_match(predicted, golden_answers) else "wrong_answer"
    return AnswerCheck(reason, predicted=predicted, score=f1_score(predicted, golden_answers))
