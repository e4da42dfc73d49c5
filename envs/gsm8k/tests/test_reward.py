"""Tests for agent_gym_gsm8k.reward, including every answer of the real GSM8K test split (the copy
packaged with agent-r1-gym-gsm8k)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gym.core.grading import AnswerCheck, normalize_number
from agent_gym_gsm8k.data import DATA_DIR_ENV_VAR, load_gsm8k
from agent_gym_gsm8k.reward import extract_final_answer, score_answer


def _dollars_with_commas(answer: str) -> str:
    """Re-format a reference answer the way a policy might: "$" prefix, thousands commas."""
    canonical = normalize_number(answer)
    assert canonical is not None
    value = int(canonical)  # every GSM8K test answer is an integer
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,}"


# --- normalize_number --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("18", "18"),
        ("  18  ", "18"),
        ("18.", "18"),
        ("$18", "18"),
        ("$1,000.00", "1000"),
        ("1,000", "1000"),
        ("12,345,678", "12345678"),
        ("-3", "-3"),
        ("-3.50", "-3.5"),
        ("-$3", "-3"),
        ("$-3", "-3"),
        ("+7", "7"),
        ("0.5", "0.5"),
        (".5", "0.5"),
        ("-.5", "-0.5"),
        ("18.0", "18"),
        ("18.00", "18"),
        ("18.50.", "18.5"),
        ("007", "7"),
        ("0", "0"),
        ("-0", "0"),
        ("-0.00", "0"),
        ("**18**", "18"),
        ("** $1,200 **", "1200"),
        ("1000000", "1000000"),
        # Not numbers.
        ("", None),
        ("-", None),
        (".", None),
        ("$", None),
        ("eighteen", None),
        ("18 eggs", None),
        ("18%", None),
        ("1/2", None),
        ("1e3", None),
        ("1 000", None),
        ("1,00", None),
        ("3,5", None),
        ("1,0000", None),
        (",100", None),
        ("18..", None),
        ("--3", None),
        ("+-3", None),
        ("18 19", None),
    ],
)
def test_normalize_number(text: str, expected: str | None) -> None:
    assert normalize_number(text) == expected


# --- extract_final_answer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("#### 18", "18"),
        ("work\n#### 18\n", "18"),
        ("work\n####18", "18"),
        ("work\n#### 18\nSome trailing chatter", "18"),
        ("#### 17\nwait, fix\n#### 18", "18"),
        ("#### 18 is the answer", "18 is the answer"),
        ("work\n####", ""),
        ("work\n####   \n18", ""),
        ("The answer is 18.", None),
        ("", None),
        ("### 18", None),
        ("##### 18", "18"),
        ("work\r\n#### 18\r\n", "18"),
    ],
)
def test_extract_final_answer(response: str, expected: str | None) -> None:
    assert extract_final_answer(response) == expected


# --- score_answer ------------------------------------------------------------------------------


def test_score_answer_fields() -> None:
    check = score_answer("2 + 2 = 4\n#### $4.00", "4")
    assert check == AnswerCheck("correct", predicted="$4.00", normalized="4", expected="4")
    assert (check.reward, check.correct) == (1.0, True)


@pytest.mark.parametrize(
    ("response", "expected", "reason", "predicted"),
    [
        ("She makes 16 - 3 - 4 = 9 eggs, 9 * 2 = 17\n#### 17", "18", "wrong_answer", "17"),
        ("9 * 2 = 19\n#### 19", "18", "wrong_answer", "19"),
        ("She makes 9 * 2 = 18 dollars.", "18", "no_final_answer", None),
        ("The answer is 18.", "18", "no_final_answer", None),
        ("#### eighteen", "18", "unparsable_answer", "eighteen"),
        ("#### 18 dollars", "18", "unparsable_answer", "18 dollars"),
        ("####", "18", "unparsable_answer", ""),
        ("#### 18.5", "18", "wrong_answer", "18.5"),
        ("#### 18", "18.5", "wrong_answer", "18"),
        ("#### 18\nOn second thought\n#### 20", "18", "wrong_answer", "20"),
        ("#### -18", "18", "wrong_answer", "-18"),
        ("#### 1,800", "18", "wrong_answer", "1,800"),
    ],
)
def test_near_misses_score_zero(
    response: str, expected: str, reason: str, predicted: str | None
) -> None:
    check = score_answer(response, expected)
    assert check.reward == 0.0
    assert check.correct is False
    assert check.reason == reason
    assert check.predicted == predicted
    assert check.expected == expected


def test_expected_must_be_a_number() -> None:
    with pytest.raises(ValueError, match="not a number"):
        score_answer("#### 1", "one")


# --- every real test answer --------------------------------------------------------------------


def test_every_real_test_answer_scores_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)  # the packaged copy, whatever the shell sets
    tasks = load_gsm8k("test")
    assert len(tasks) == 1319
    reformatted_big = 0
    for task in tasks:
        # 1. The reference solution itself, exactly as a policy imitating GSM8K would write it.
        check = score_answer(task.solution, task.answer)
        assert (check.reward, check.reason) == (1.0, "correct"), (task.id, check)

        # 2. A chatty variant with the answer re-formatted ("$" prefix, thousands commas).
        formatted = _dollars_with_commas(task.answer)
        value = abs(int(normalize_number(task.answer) or "0"))
        if value >= 1000:
            assert "," in formatted
            reformatted_big += 1
        response = f"Let me think.\nThe answer is {formatted}.\n#### {formatted}"
        check = score_answer(response, task.answer)
        assert (check.reward, check.reason) == (1.0, "correct"), (task.id, response, check)

        # 3. Near misses on the same task.
        canonical = normalize_number(task.answer)
        assert canonical is not None
        off_by_one = str(int(canonical) + 1)
        assert score_answer(f"{task.solution}\n#### {off_by_one}", task.answer).reason == (
            "wrong_answer"
        )
        no_marker = task.solution.replace("####", "The answer is")
        assert score_answer(no_marker, task.answer).reason == "no_final_answer"
    # The reformatting really exercised thousands commas on the real data.
    assert reformatted_big > 50


# --- properties --------------------------------------------------------------------------------

# No per-example deadline: Hypothesis' default (200 ms of wall time) fails an example that a loaded
# machine merely slowed down; these properties are about values, not speed.
PROPERTIES = settings(deadline=None)


@PROPERTIES
@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_integer_formats_normalize_to_plain_int(value: int) -> None:
    plain = str(value)
    sign = "-" if value < 0 else ""
    for written in (plain, f"{value:,}", f"{sign}${abs(value):,}", f"{plain}.00", f"{plain}."):
        assert normalize_number(written) == plain, written


@PROPERTIES
@given(st.decimals(min_value=-(10**6), max_value=10**6, places=3, allow_nan=False))
def test_decimal_normalization_preserves_value(value: Decimal) -> None:
    canonical = normalize_number(f"{value:f}")
    assert canonical is not None
    assert Decimal(canonical) == value
    assert normalize_number(canonical) == canonical  # idempotent
