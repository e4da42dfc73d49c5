"""Grade.from_check: the grade of a right-or-wrong answer check, as the envs build it."""

from __future__ import annotations

import json

import numpy as np

from agent_gym.core.env import Grade


def test_a_right_answer_gets_reward_one_and_the_reason_first_in_info():
    grade = Grade.from_check(True, "correct", expected="42", format_ok=True)
    assert grade == Grade(
        reward=1.0, correct=True, components={"outcome": 1.0},
        info={"answer_check": "correct", "expected": "42", "format_ok": True},
    )
    assert list(grade.info) == ["answer_check", "expected", "format_ok"]


def test_a_wrong_answer_gets_reward_zero():
    grade = Grade.from_check(False, "no_final_answer", predicted=None)
    assert (grade.reward, grade.correct, grade.components) == (0.0, False, {"outcome": 0.0})
    assert grade.info == {"answer_check": "no_final_answer", "predicted": None}


def test_without_a_reason_info_stays_empty():
    assert Grade.from_check(True) == Grade(reward=1.0, correct=True, components={"outcome": 1.0})
    assert Grade.from_check(False).info == {}


def test_correct_is_a_plain_bool_so_info_stays_json():
    grade = Grade.from_check(np.bool_(True), "correct")
    assert type(grade.correct) is bool and type(grade.reward) is float
    assert json.dumps({"correct": grade.correct, **grade.components}) == '{"correct": true, "outcome": 1.0}'
