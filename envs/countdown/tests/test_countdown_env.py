"""The Countdown envs through gymnasium: registration, check_env, seeding, rewards, bad actions, tools."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym
from agent_gym.tools import HermesParser, ToolCall

IDS = ["AgentR1/Countdown-v0", "AgentR1/CountdownTool-v0"]
TASK = {"id": "t", "numbers": [3, 3, 8, 8], "target": 24}


def act(env, text: str) -> list[int]:
    """The ids a policy would generate for ``text``: its tokens plus the end-of-turn token."""
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def calc_call(expression: str) -> str:
    return HermesParser().format_calls([ToolCall(id="call_0", name="calculate", arguments={"expression": expression}, raw="")])


@pytest.fixture(scope="module")
def env(tokenizer):
    return gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, difficulty="easy")


@pytest.fixture(scope="module")
def tool_env(tokenizer):
    return gym.make("AgentR1/CountdownTool-v0", tokenizer=tokenizer, difficulty="medium")


def test_registered_and_listed():
    cards = {card.id: card for card in agent_gym.list_envs()}
    assert set(IDS) <= set(cards)
    assert cards["AgentR1/CountdownTool-v0"].tools == ("calculate",)
    assert cards["AgentR1/Countdown-v0"].package == "agent-r1-gym-countdown"


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("difficulty", ["easy", "hard"])
def test_check_env_passes(env_id, difficulty, tokenizer):
    check_env(gym.make(env_id, tokenizer=tokenizer, difficulty=difficulty).unwrapped, skip_render_check=True)


def test_reset_is_seeded(env, tokenizer):
    other = gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, difficulty="easy")
    obs_a, info_a = env.reset(seed=11)
    obs_b, info_b = other.reset(seed=11)
    assert info_a["task_id"] == info_b["task_id"] and info_a["task_id"].startswith("train-easy-")
    assert np.array_equal(obs_a["prompt_ids"], obs_b["prompt_ids"])
    assert len({env.reset(seed=s)[1]["task_id"] for s in range(10)}) > 5
    test_env = gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, difficulty="easy", split="test")
    assert test_env.reset(seed=11)[1]["task_id"].startswith("test-easy-")


def test_pin_a_task_by_id_or_by_dict(env):
    obs, info = env.reset(options={"task_id": "test-hard-5"})
    task = env.unwrapped.task
    assert info["task_id"] == "test-hard-5" and len(task.numbers) == 6
    assert f"Target: {task.target}" in obs["messages"][-1]["content"]
    obs, info = env.reset(options={"task": TASK})
    assert info["task_id"] == "t" and "Numbers: 3, 3, 8, 8" in obs["messages"][-1]["content"]
    with pytest.raises(KeyError, match="ids look like"):
        env.reset(options={"task_id": "test-0"})


def test_rewards_and_info(env):
    env.reset(options={"task": TASK})
    _, reward, terminated, truncated, info = env.step(act(env, "Try fractions.\n<answer>8 / (3 - 8 / 3)</answer>"))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] is True and info["answer_check"] == "correct" and info["value"] == "24"
    assert info["reward_components"] == {"outcome": 1.0}
    cases = {
        "<answer>8 * 3</answer>": ("correct", 1.0),
        "#### 8 + 8 + 8": ("number_reused", 0.0),
        "<answer>8 * 3 + 1</answer>": ("number_not_given", 0.0),
        "<answer>8 * 3 - 3 + 3 - 8 + 8 + 1 - 1</answer>": ("number_not_given", 0.0),
        "<answer>8 + 8</answer>": ("wrong_value", 0.0),
        "<answer>8 +* 3</answer>": ("unparsable", 0.0),
        "I give up.": ("no_answer", 0.0),
    }
    for text, (reason, expected) in cases.items():
        env.reset(options={"task": TASK})
        _, reward, terminated, _, info = env.step(act(env, text))
        assert (info["answer_check"], reward, terminated) == (reason, expected, True), text
        assert info["answer_detail"]


def test_bad_actions_end_with_a_clear_info_entry(env):
    vocab = env.unwrapped.template.vocab_size
    rng = np.random.default_rng(0)
    bad = {
        "empty": [],
        "garbage": rng.integers(0, vocab, size=300).tolist(),
        "out_of_vocabulary": [1, 2, vocab + 5],
        "negative": [-1],
        "100k_tokens": np.ones(100_000, dtype=np.int64),
        "2d": np.ones((2, 3), dtype=np.int64),
        "floats": np.array([1.5, 2.5]),
    }
    for name, action in bad.items():
        env.reset(seed=0)
        _, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and terminated and not truncated, name
        assert info["correct"] is False, name
        explained = info.get("invalid_action") or info.get("answer_check")
        assert explained, name
    env.reset(seed=0)
    assert env.step([])[4]["answer_check"] == "no_answer"
    env.reset(seed=0)
    assert "outside the vocabulary" in env.step([vocab])[4]["invalid_action"]
    env.reset(seed=0)
    assert "max_action_tokens" in env.step(np.ones(100_000, dtype=np.int64))[4]["invalid_action"]


def test_tool_episode_keeps_ids_and_grades_the_final_answer(tool_env):
    obs, _ = tool_env.reset(options={"task": TASK})
    prompt = list(obs["prompt_ids"])
    texts = [calc_call("8 / 3"), calc_call("3 - 8 / 3"), "So 8 / (3 - 8/3) = 24.\n<answer>8 / (3 - 8 / 3)</answer>"]
    for k, text in enumerate(texts, start=1):
        action = act(tool_env, text)
        obs, reward, terminated, truncated, info = tool_env.step(np.asarray(action))
        ids = list(obs["prompt_ids"])
        assert ids[: len(prompt) + len(action)] == prompt + action  # no drift
        assert info["turn"] == k and info["new_segment"] is False
        prompt = ids
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["tool_calls"] == 2 and info["tool_errors"] == 0 and info["answer_check"] == "correct"
    assert [m["content"] for m in obs["messages"] if m["role"] == "tool"] == ["2.666666667", "0.3333333333"]


def test_tool_env_turn_limit_and_async(tokenizer):
    env = gym.make("AgentR1/CountdownTool-v0", tokenizer=tokenizer, max_turns=2)
    env.reset(options={"task": TASK})
    _, _, terminated, truncated, _ = env.step(act(env, calc_call("1+1")))
    assert not (terminated or truncated)
    _, reward, terminated, truncated, info = env.step(act(env, calc_call("2+2")))
    assert (reward, terminated, truncated, info["truncated_reason"]) == (0.0, False, True, "max_turns")

    async def episode():
        env.reset(options={"task": TASK})
        await env.unwrapped.astep(act(env, calc_call("8*3")))
        return await env.unwrapped.astep(act(env, "<answer>8 * 3</answer>"))

    _, reward, terminated, _, info = asyncio.run(episode())
    assert (reward, terminated, info["answer_check"]) == (1.0, True, "correct")


def test_easy_opens_with_worked_examples(tokenizer, env):
    obs, _ = env.reset(options={"task": TASK})
    assert [m["role"] for m in obs["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert obs["messages"][2]["content"] == "3 + 9 = 12\n<answer>3 + 9</answer>"
    assert "Numbers: 3, 3, 8, 8" in obs["messages"][-1]["content"]
    for kwargs in ({"difficulty": "medium"}, {"difficulty": "easy", "few_shot": False}):
        plain = gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, **kwargs)
        assert [m["role"] for m in plain.reset(seed=0)[0]["messages"]] == ["system", "user"]
    hard = gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, difficulty="hard", few_shot=True)
    assert len(hard.reset(seed=0)[0]["messages"]) == 6
    tool = gym.make("AgentR1/CountdownTool-v0", tokenizer=tokenizer, difficulty="easy")
    assert len(tool.reset(seed=0)[0]["messages"]) == 2


def test_bad_constructor_arguments(tokenizer):
    with pytest.raises(ValueError, match="unknown Countdown difficulty"):
        gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, difficulty="extreme")
    with pytest.raises(ValueError, match="unknown split"):
        gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, split="dev")


def test_prompt_templates_can_be_overridden(tmp_path, tokenizer):
    (tmp_path / "countdown_user.j2").write_text("Reach {{ target }} with {{ numbers | join(' ') }}.")
    env = gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, prompt_dir=tmp_path)
    obs, _ = env.reset(options={"task": TASK})
    assert obs["messages"][-1]["content"] == "Reach 24 with 3 3 8 8."
