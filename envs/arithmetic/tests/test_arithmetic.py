"""AgentR1/Arithmetic-v0 and ArithmeticTool-v0: generation, answer check, episodes."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym  # noqa: F401
from agent_gym.models import load_tokenizer
from agent_gym_arithmetic.problems import check_answer, final_number, generate_task


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def act(env, text):
    t = env.unwrapped.template
    return t.encode(text) + t.end_of_turn_ids


def test_generation_is_deterministic_and_split_dependent():
    assert generate_task(3, 2, "train") == generate_task(3, 2, "train")
    assert generate_task(3, 2, "train").expression != generate_task(3, 2, "test").expression
    task = generate_task(0, 4, "test")
    assert task.id == "test-L4-0" and str(eval(task.expression)) == task.answer  # noqa: S307 - test oracle
    out = subprocess.run(
        [sys.executable, "-c", "from agent_gym_arithmetic.problems import generate_task as g; print(g(3, 3, 'train').expression)"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == generate_task(3, 3, "train").expression
    with pytest.raises(ValueError, match="unknown arithmetic level 7"):
        generate_task(0, 7, "train")


def test_task_ids_round_trip_and_bad_ids_name_the_form(tok):
    env = gym.make("AgentR1/Arithmetic-v0", tokenizer=tok).unwrapped
    assert env.get_task("train-L3-17") == generate_task(17, 3, "train")
    assert env.get_task("train-L3-17").id == "train-L3-17"
    # "train-3-17" once resolved to the task "train-L3-17": an id now names exactly one task.
    for bad in ("train-3-17", "train-L5-1", "dev-L2-1", "train-L2-x", "bogus"):
        with pytest.raises(KeyError) as err:
            env.get_task(bad)
        assert err.value.args[0] == (
            f"no arithmetic task with id {bad!r}: ids look like 'train-L1-123' "
            "(<split>-<level>-<number>, split in ('train', 'test'), level in ('L1', 'L2', 'L3', 'L4'))"
        )


@pytest.mark.parametrize(
    "response, expected, result",
    [
        ("37 + 58 = 95", "95", (True, "correct")),
        ("It is 95.\n#### 95", "95", (True, "correct")),
        ("#### 95 (not 96)", "95", (True, "correct")),
        ("95 ... no wait, 96", "95", (False, "wrong_answer")),
        ("#### 1,000", "1000", (True, "correct")),
        ("-12", "-12", (True, "correct")),
        ("no idea", "5", (False, "no_number")),
        ("2.50", "2.5", (True, "correct")),
    ],
)
def test_check_answer(response, expected, result):
    check = check_answer(response, expected)
    assert (check.correct, check.reason) == result


def test_final_number_prefers_hashes():
    assert final_number("1 then 2\n#### 3 and 4") == "3"
    assert final_number("1, 2, 3") == "3"
    assert final_number("no number") is None


@pytest.mark.parametrize("env_id", ["AgentR1/Arithmetic-v0", "AgentR1/ArithmeticTool-v0"])
def test_check_env(env_id, tok):
    check_env(gym.make(env_id, tokenizer=tok).unwrapped)


def test_episodes_with_known_outcomes(tok):
    env = gym.make("AgentR1/Arithmetic-v0", tokenizer=tok, level=1)
    obs, info = env.reset(options={"task_id": "test-L1-5"})
    task = generate_task(5, 1, "test")
    assert obs["messages"][1]["content"] == f"What is {task.expression}?"
    _, reward, terminated, _, info = env.step(act(env, f"{task.expression} = {task.answer}"))
    assert (reward, terminated, info["answer_check"], info["format_ok"]) == (1.0, True, "correct", False)
    env.reset(options={"task_id": "test-L1-5"})
    _, reward, _, _, info = env.step(act(env, "I don't know"))
    assert (reward, info["answer_check"]) == (0.0, "no_number")
    env.reset(options={"task_id": "test-L1-5"})
    _, reward, _, _, info = env.step(np.array([60_000]))
    assert reward == 0.0 and info["invalid_action"].startswith("token id 60000 is outside")


def test_tool_episode(tok):
    env = gym.make("AgentR1/ArithmeticTool-v0", tokenizer=tok, level=3)
    env.reset(options={"task": {"expression": "7 * 86"}})
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "7 * 86"}}\n</tool_call>'
    obs, reward, terminated, truncated, info = env.step(act(env, call))
    assert obs["messages"][-1]["content"] == "602" and not (terminated or truncated)
    _, reward, terminated, _, info = env.step(act(env, "#### 602"))
    assert (reward, terminated, info["tool_calls"], info["format_ok"]) == (1.0, True, 1, True)


def test_few_shot_tool_episode(tok):
    env = gym.make("AgentR1/ArithmeticTool-v0", tokenizer=tok, level=1, few_shot=True)
    obs, _ = env.reset(options={"task": {"expression": "7 + 9"}})
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "47 * 36"}}\n</tool_call>'
    assert [(m["role"], m["content"]) for m in obs["messages"][1:]] == [
        ("user", "What is 47 * 36?"),
        ("assistant", call),
        ("tool", "1692"),
        ("assistant", "47 * 36 = 1692\n#### 1692"),
        ("user", "What is 7 + 9?"),
    ]
    _, reward, terminated, _, info = env.step(act(env, "#### 16"))
    assert (reward, terminated, info["tool_calls"]) == (1.0, True, 0)
