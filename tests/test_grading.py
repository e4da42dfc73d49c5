"""agent_gym.core.grading: the one place answers are read and numbers parsed, and a scan that keeps it so."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from agent_gym.core.grading import (
    AnswerCheck,
    CalculatorError,
    after_marker,
    clean_answer,
    evaluate_arithmetic,
    evaluate_exact,
    final_number,
    format_fraction,
    normalize_number,
    numbers_in,
    parse_number,
    tagged,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "kwargs", "expected"),
    [
        ("work\n#### 18\nmore", {}, "18"),
        ("#### 17\nno, wait\n#### 18", {}, "18"),
        ("no marker", {}, None),
        ("####", {}, ""),
        ("####\n18", {}, ""),
        ("####\n\n 18 \nmore", {"skip_blank": True}, "18"),
        ("work\n#### 1,080\nbecause", {"first_line": False}, "1,080\nbecause"),
        ("a @@ b @@ c", {"marker": "@@"}, "c"),
    ],
)
def test_after_marker(text, kwargs, expected):
    assert after_marker(text, **kwargs) == expected


@pytest.mark.parametrize(
    ("text", "kwargs", "expected"),
    [
        ("<answer>1</answer> then <ANSWER> 2 </Answer>", {}, "2"),
        ("<answer>1</answer> then <answer>2 (cut", {}, "2 (cut"),
        ("<answer>1</answer> then <answer>2 (cut", {"open_at_end": False}, "1"),
        ("<answer>cut", {"open_at_end": False}, None),
        ("<answer>a<answer>b</answer>", {}, "a<answer>b"),
        ("nothing", {}, None),
        ("<move>up</move><move>left</move>", {"tag": "move"}, "left"),
    ],
)
def test_tagged(text, kwargs, expected):
    assert tagged(text, **kwargs) == expected


@pytest.mark.parametrize(
    ("text", "strict", "lenient"),
    [
        ("$1,000.00", Fraction(1000), Fraction(1000)),
        ("**-3.50**", Fraction(-7, 2), Fraction(-7, 2)),
        (".5", Fraction(1, 2), Fraction(1, 2)),
        ("18.", Fraction(18), Fraction(18)),
        ("1,00", None, Fraction(100)),
        ("1 234", None, Fraction(1234)),
        ("`42`", None, Fraction(42)),
        ("+-3", None, None),
        ("18 eggs", None, None),
        ("1/2", None, None),
        ("", None, None),
    ],
)
def test_parse_number_strict_and_lenient(text, strict, lenient):
    assert parse_number(text) == strict
    assert parse_number(text, lenient=True) == lenient


def test_normalize_number_and_format_fraction():
    assert [normalize_number(t) for t in ("$1,000.00", "18.", "-3.50", ".5", "+7", "-0.00", "007", "x")] == [
        "1000", "18", "-3.5", "0.5", "7", "0", "7", None,
    ]
    assert format_fraction(Fraction(-1, 8)) == "-0.125"
    with pytest.raises(ValueError, match="no finite decimal expansion"):
        format_fraction(Fraction(1, 3))


def test_clean_answer_and_numbers_in():
    assert clean_answer(" **`Alpha  Desk.`** ") == "Alpha Desk"
    assert numbers_in("1,234 apples and -2.5 pears, 3") == ["1234", "-2.5", "3"]
    assert (final_number("1 then 2\n#### 3 and 4"), final_number("1, 2, 3"), final_number("none")) == ("3", "3", None)


def test_exact_evaluation_shares_the_calculators_parser():
    assert evaluate_exact("8 / (3 - 8 / 3)") == 24 != evaluate_arithmetic("8 / (3 - 8 / 3)")
    assert evaluate_exact("0.1 + 0.2") == Fraction(3, 10)
    assert evaluate_exact("2 ** -2") == Fraction(1, 4)
    for bad, message in [("1 / 0", "division by zero"), ("x + 1", "names are not allowed"), ("4 ** 0.5", "fractional exponent")]:
        with pytest.raises(CalculatorError, match=message):
            evaluate_exact(bad)
    with pytest.raises(CalculatorError, match="too large"):
        evaluate_exact("99999 ** 999 * 99999 ** 999")


def test_an_answer_check_is_correct_only_for_the_reason_correct():
    assert (AnswerCheck("correct").correct, AnswerCheck("correct").reward) == (True, 1.0)
    assert (AnswerCheck("wrong_answer").correct, AnswerCheck("wrong_answer").reward) == (False, 0.0)


# Reading answers anywhere else is how the copies came about: the scan names the module to use.
_OWN_READERS = ('rsplit("####"', "rsplit(ANSWER_MARKER", "<answer>(", "class AnswerCheck")


def _sources():
    for path in sorted([*ROOT.glob("envs/*/agent_gym_*/**/*.py"), *ROOT.glob("agent_gym/**/*.py")]):
        if path.name != "grading.py" and "cli/scaffold.py" not in path.as_posix():
            yield path


def test_answers_are_read_only_in_agent_gym_grading():
    found = [f"{p.relative_to(ROOT)}: {pattern}" for p in _sources() for pattern in _OWN_READERS if pattern in p.read_text()]
    assert found == [], "read answers with agent_gym.core.grading (after_marker, tagged, parse_number, AnswerCheck)"

