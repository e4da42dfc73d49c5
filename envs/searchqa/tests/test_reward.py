"""The reward: SQuAD normalisation, exact match against any golden answer, best F1, the <answer> tag."""

from __future__ import annotations

import pytest

from agent_gym_searchqa.reward import check_answer, exact_match, extract_answer, f1_score, normalize_answer


def test_normalisation_is_squads():
    assert normalize_answer("  The  Salt-Orchard!  ") == "saltorchard"
    assert normalize_answer("An Atlas of the North") == "atlas of north"
    assert normalize_answer("A.B.C.") == "abc"
    assert normalize_answer("Theodore") == "theodore"  # "the" only as a word


def test_exact_match_against_any_golden_answer():
    assert exact_match("the salt orchard", ["Salt Orchard"])
    assert exact_match("1887.", ["1886", "1887"])
    assert not exact_match("Salt Orchards", ["Salt Orchard"])


def test_f1_is_the_best_over_the_golden_answers():
    assert f1_score("Ivo Smith", ["Ivo Dadov"]) == pytest.approx(0.5)
    assert f1_score("Ivo Dadov", ["Nobody", "ivo dadov"]) == 1.0
    assert f1_score("", ["x"]) == 0.0
    assert f1_score("the", ["a"]) == 1.0  # both normalise to nothing: SQuAD counts that as a match


def test_extract_reads_the_last_answer_or_one_left_open():
    assert extract_answer("<answer>A</answer> then <answer> B </answer>") == "B"
    assert extract_answer("<answer>A</answer> and finally <answer>C") == "C"
    assert extract_answer("<ANSWER>x</ANSWER>") == "x"
    assert extract_answer("#### 18") is None
    assert extract_answer("") is None


def test_check_answer_reasons():
    assert check_answer("It is <answer>Ivo Dadov</answer>", ["Ivo Dadov"]).reason == "correct"
    wrong = check_answer("<answer>Ivo Smith</answer>", ["Ivo Dadov"])
    assert (wrong.correct, wrong.reason, wrong.predicted) == (False, "wrong_answer", "Ivo Smith")
    assert wrong.score == pytest.approx(0.5)
    assert check_answer("Ivo Dadov", ["Ivo Dadov"]).reason == "no_answer"
