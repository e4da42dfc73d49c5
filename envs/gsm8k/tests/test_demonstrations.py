"""Tests for agent_gym_gsm8k.demonstrations: GSM8K calculator annotations to tool-use demonstrations."""

from __future__ import annotations

import pytest

from agent_gym_gsm8k.demonstrations import calculator_turns, strip_annotations

NATALIA = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)


def _call(expression: str) -> dict:
    return {"name": "calculate", "arguments": {"expression": expression}}


def test_one_call_per_annotation_then_the_answer_without_annotations() -> None:
    turns, answer = calculator_turns(NATALIA)
    assert turns == [[_call("48/2")], [_call("48+24")]]
    assert answer == "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72"


def test_more_annotations_than_turns_are_spread_in_order() -> None:
    solution = " ".join(f"<<{i}+1={i + 1}>>{i + 1}" for i in range(6)) + "\n#### 6"
    turns, _ = calculator_turns(solution, max_turns=3)  # two call turns, then the answer
    assert turns == [[_call("0+1"), _call("1+1"), _call("2+1")], [_call("3+1"), _call("4+1"), _call("5+1")]]
    turns, _ = calculator_turns(solution, max_turns=5)
    assert [len(t) for t in turns] == [2, 2, 1, 1]
    assert [c["arguments"]["expression"] for t in turns for c in t] == [f"{i}+1" for i in range(6)]


def test_nothing_to_show_and_bad_turn_limits() -> None:
    assert calculator_turns("She has 5 apples.\n#### 5") is None  # no annotation
    assert calculator_turns("5 + 1 = <<5+1=6>>6") is None  # no final answer line
    with pytest.raises(ValueError, match=r"max_turns must be >= 2 \(one call turn and the answer\), got 1"):
        calculator_turns(NATALIA, max_turns=1)


def test_strip_annotations_keeps_the_reader_text() -> None:
    assert strip_annotations("Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.") == "Weng earns 12/60 = $0.2 per minute."
