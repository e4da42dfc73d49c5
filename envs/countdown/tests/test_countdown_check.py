"""Answer extraction and exact checking of Countdown expressions."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gym_countdown.check import REASONS, check_answer, check_expression, extract_answer
from agent_gym_countdown.generate import LEVELS, generate_task


@pytest.mark.parametrize(
    "text, expected",
    [
        ("I think <answer>3 + 4</answer>", "3 + 4"),
        ("<answer>1+1</answer> no wait <answer> (2*3) </answer> done", "(2*3)"),
        ("<ANSWER>5*5</ANSWER>", "5*5"),
        ("reasoning...\n#### 6 * 7\nbye", "6 * 7"),
        ("<answer>9 - 2</answer> then #### 1 + 1", "9 - 2"),  # a tag wins over ####
        ("cut off at the stop token <answer>8 + 2", "8 + 2"),
        ("no answer here", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "response, numbers, target, reason",
    [
        ("<answer>(3 + 5) * 3</answer>", [3, 5, 3], 24, "correct"),
        ("<answer>(3 + 5) * 3 = 24</answer>", [3, 5, 3], 24, "correct"),  # stated result ignored
        ("<answer>24 = (3 + 5) * 3</answer>", [3, 5, 3], 24, "correct"),
        ("<answer>(3 + 5) × 3</answer>", [3, 5, 3], 24, "correct"),
        ("#### 8 + 2.", [8, 2], 10, "correct"),
        ("<answer>7</answer>", [7, 2], 7, "correct"),  # a single number is an expression
        ("<answer>3 + 3</answer>", [3, 5], 6, "number_reused"),
        ("<answer>3 + 4</answer>", [3, 5], 7, "number_not_given"),
        ("<answer>2.5 * 2</answer>", [2, 5], 5, "number_not_given"),
        ("<answer>3 +</answer>", [3, 5], 8, "unparsable"),
        ("<answer>__import__('os').system('echo hi')</answer>", [3], 3, "unparsable"),
        ("<answer>three plus five</answer>", [3, 5], 8, "unparsable"),
        ("<answer>2 ** 3</answer>", [2, 3], 8, "operator_not_allowed"),
        ("<answer>7 % 4</answer>", [7, 4], 3, "operator_not_allowed"),
        ("<answer>7 // 2</answer>", [7, 2], 3, "operator_not_allowed"),
        ("<answer>-3 + 5</answer>", [3, 5], 2, "operator_not_allowed"),
        ("<answer>3 / (2 - 2)</answer>", [3, 2, 2], 1, "division_by_zero"),
        ("<answer>3 * 5</answer>", [3, 5], 8, "wrong_value"),
        ("The answer is 8.", [3, 5], 8, "no_answer"),
        ("<answer>  </answer>", [3, 5], 8, "no_answer"),
    ],
)
def test_check_answer_reasons(response, numbers, target, reason):
    check = check_answer(response, numbers, target)
    assert check.reason == reason, check
    assert check.reason in REASONS
    assert check.reward == (1.0 if reason == "correct" else 0.0)
    assert check.detail  # always explained


def test_exact_rational_arithmetic_where_floats_fail():
    # 8 / (3 - 8/3) = 24 exactly, but 23.999999999999986 in floating point.
    assert 8 / (3 - 8 / 3) != 24
    check = check_expression("8 / (3 - 8 / 3)", [3, 3, 8, 8], 24)
    assert check.correct and check.value == Fraction(24)
    assert check.extra["numbers_used"] == (8, 3, 8, 3)
    assert check_expression("(1 / 3) * 3", [1, 3, 3], 1).correct


def test_reasons_are_reported_in_documented_order():
    # reused *and* wrong value: the number rule is reported
    assert check_expression("5 + 5 + 5", [5, 1], 3).reason == "number_reused"
    # not given *and* unknown operator: the operator is reported
    assert check_expression("9 ** 2", [2], 81).reason == "operator_not_allowed"


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_check_answer_never_raises(text):
    check = check_answer(text, [1, 2, 3, 4], 10)
    assert check.reason in REASONS


@given(st.sampled_from(sorted(LEVELS)), st.integers(0, 2**31 - 1), st.sampled_from(["train", "test"]))
@settings(max_examples=60, deadline=None)
def test_every_generated_task_is_solved_by_its_reference_solution(difficulty, n, split):
    task = generate_task(n, difficulty, split)
    check = check_expression(task.solution, task.numbers, task.target)
    assert check.correct, (task, check)
    assert task.target not in task.numbers


def test_long_chains_and_big_values_are_handled():
    expr = "+".join(["1"] * 400)  # 799 characters: under the calculator's limit
    assert check_expression(expr, [1] * 400, 400).correct
    assert check_expression(expr, [1] * 3, 400).reason == "number_reused"
    assert check_answer("<answer>" + "(" * 60 + "1" + ")" * 60 + "</answer>", [1], 1).reason == "unparsable"
    rng = np.random.default_rng(0)
    big = [int(x) for x in rng.integers(90, 100, size=40)]
    assert check_expression(" * ".join(map(str, big)), big, 1).reason == "wrong_value"
