"""The GSM8K envs through gymnasium: check_env, seeding, pinning, exact ids, rewards, bad actions."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_gym
from agent_gym.tools import HermesParser, ToolCall
from agent_gym.wrappers import RewardShaping

IDS = ["AgentR1/GSM8K-v0", "AgentR1/GSM8KTool-v0"]


@pytest.fixture(scope="module")
def tool_env(tokenizer):
    return gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")


def calc_call(expression: str) -> str:
    return HermesParser().format_calls([ToolCall(id="call_0", name="calculate", arguments={"expression": expression}, raw="")])


def act(env, text: str) -> list[int]:
    """The ids a policy would generate for ``text``: its tokens plus the end-of-turn token."""
    template = env.unwrapped.template
    return template.encode(text) + template.end_of_turn_ids


def test_every_registered_env_is_listed():
    ids = [card.id for card in agent_gym.list_envs()]
    assert set(IDS) <= set(ids)


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(env_id, tokenizer):
    env = gym.make(env_id, tokenizer=tokenizer, split="test")
    check_env(env.unwrapped)


@pytest.mark.parametrize("env_id", IDS)
def test_reset_is_deterministic_under_a_seed(env_id, tokenizer):
    a = gym.make(env_id, tokenizer=tokenizer, split="test")
    b = gym.make(env_id, tokenizer=tokenizer, split="test")
    obs_a, info_a = a.reset(seed=123)
    obs_b, info_b = b.reset(seed=123)
    assert info_a["task_id"] == info_b["task_id"]
    assert np.array_equal(obs_a["prompt_ids"], obs_b["prompt_ids"])
    chosen = {a.reset(seed=s)[1]["task_id"] for s in range(10)}
    assert len(chosen) > 1  # the seed really chooses


def test_pinning_a_task_by_id_and_by_dict(tool_env):
    obs, info = tool_env.reset(options={"task_id": "test-0"})
    assert info["task_id"] == "test-0"
    assert obs["messages"][1]["content"].startswith("Janet")
    obs, info = tool_env.reset(options={"task": {"id": "mine", "question": "What is 6*7?", "answer": "42"}})
    assert info["task_id"] == "mine" and "6*7" in obs["messages"][1]["content"]
    with pytest.raises(KeyError, match="no task with id 'nope' in the GSM8K test split"):
        tool_env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="unknown reset option"):
        tool_env.reset(options={"taskid": "test-0"})


def test_single_step_rewards_on_real_task(tokenizer):
    env = gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test")
    env.reset(options={"task_id": "test-0"})
    _, reward, terminated, truncated, info = env.step(act(env, "16-3-4=9 eggs, 9*2=18.\n#### 18"))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] is True and info["answer_check"] == "correct"
    assert info["reward_components"] == {"outcome": 1.0}
    env.reset(options={"task_id": "test-0"})
    _, reward, _, _, info = env.step(act(env, "The answer is 18."))
    assert reward == 0.0 and info["answer_check"] == "no_final_answer"


def test_five_turn_tool_episode_ids_are_exactly_what_the_policy_generated(tool_env):
    obs, _ = tool_env.reset(options={"task_id": "test-0"})
    texts = [
        "First the eggs left.\n" + calc_call("16 - 3 - 4"),
        "Now the money.\n" + calc_call("9 * 2"),
        calc_call("9 * 2 + 0"),
        calc_call("18 / 1"),
        "She makes 18 dollars.\n#### 18",
    ]
    prompt = list(obs["prompt_ids"])
    actions = []
    for k, text in enumerate(texts, start=1):
        action = act(tool_env, text)
        actions.append(action)
        obs, reward, terminated, truncated, info = tool_env.step(np.asarray(action))
        ids = list(obs["prompt_ids"])
        # no drift: the next prompt is the previous one + the action, token for token, + env turn
        assert ids[: len(prompt)] == prompt
        assert ids[len(prompt) : len(prompt) + len(action)] == action
        assert info["turn"] == k and info["new_segment"] is False
        prompt = ids
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["tool_calls"] == 4 and info["tool_errors"] == 0 and info["correct"] is True
    tool_messages = [m for m in obs["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["9", "18", "18", "18"]


def test_tool_errors_are_messages_and_counted(tool_env):
    tool_env.reset(options={"task_id": "test-0"})
    bad_json = "<tool_call>\n{not json}\n</tool_call>"
    obs, reward, terminated, truncated, info = tool_env.step(act(tool_env, bad_json))
    assert not (terminated or truncated) and reward == 0.0
    assert obs["messages"][-1]["role"] == "tool"
    assert obs["messages"][-1]["content"].startswith("Error: malformed tool call")
    assert info["tool_errors"] == 1 and info["format_errors"] == 1 and info["tool_error_kinds"] == {"malformed": 1}
    obs, _, _, _, info = tool_env.step(act(tool_env, calc_call("__import__('os')")))
    assert obs["messages"][-1]["content"].startswith("Error:")
    assert info["tool_errors"] == 2
    unknown = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'
    obs, _, _, _, info = tool_env.step(act(tool_env, unknown))
    assert obs["messages"][-1]["content"] == "Error: unknown tool 'search'. Available tools: calculate."
    assert info["tool_error_kinds"]["unknown_tool"] == 1


def test_turn_limit_truncates(tokenizer):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_turns=2)
    env.reset(options={"task_id": "test-0"})
    _, _, terminated, truncated, _ = env.step(act(env, calc_call("1+1")))
    assert not (terminated or truncated)
    _, reward, terminated, truncated, info = env.step(act(env, calc_call("2+2")))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["truncated_reason"] == "max_turns"
    with pytest.raises(RuntimeError, match="the episode is over; call reset"):
        env.step(act(env, "#### 18"))


def test_context_limit_truncates(tokenizer):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_context_tokens=400)
    obs, _ = env.reset(options={"task_id": "test-0"})
    long_call = "x " * 150 + calc_call("1+1")
    _, _, terminated, truncated, info = env.step(act(env, long_call))
    assert truncated and not terminated and info["truncated_reason"] == "max_context_tokens"


@pytest.mark.parametrize(
    "action, message",
    [
        (np.array([10**6]), "token id 1000000 is outside the vocabulary [0, 49152)"),
        (np.array([-5, 3]), "token id -5 is outside the vocabulary [0, 49152)"),
        (np.zeros(100_000, dtype=np.int64), "action has 100000 tokens; the limit is max_action_tokens=1024"),
        (np.array([[1, 2]]), "action must be a 1-D sequence of token ids, got shape (1, 2)"),
        (np.array([1.5, 2.0]), "action must hold integer token ids, got dtype float64"),
    ],
)
def test_invalid_actions_end_the_episode_with_a_clear_info(tool_env, action, message):
    obs0, _ = tool_env.reset(options={"task_id": "test-0"})
    obs, reward, terminated, truncated, info = tool_env.step(action)
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["invalid_action"] == message
    assert np.array_equal(obs["prompt_ids"], obs0["prompt_ids"])  # nothing invalid enters the context


def test_empty_action_is_a_final_answer_with_no_answer(tool_env):
    tool_env.reset(options={"task_id": "test-0"})
    _, reward, terminated, _, info = tool_env.step([])
    assert reward == 0.0 and terminated and info["answer_check"] == "no_final_answer"


def test_text_action_is_accepted_as_a_convenience(tool_env):
    tool_env.reset(options={"task_id": "test-0"})
    _, reward, terminated, _, _ = tool_env.step("#### 18")
    assert reward == 1.0 and terminated


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.sampled_from(list('<>/{}"[]:, abc123\n') + ["<tool_call>", "</tool_call>", '"name"', '"arguments"', "calculate", "####"]), max_size=80).map("".join) | st.text(max_size=200))
def test_arbitrary_text_never_raises_out_of_step(tool_env, text):
    tool_env.reset(seed=0)
    obs, reward, terminated, truncated, info = tool_env.step(act(tool_env, text))
    assert reward in (0.0, 1.0)
    assert tool_env.unwrapped.observation_space.contains(obs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(min_value=-10, max_value=60_000), max_size=64))
def test_arbitrary_token_ids_never_raise_out_of_step(tool_env, ids):
    tool_env.reset(seed=1)
    obs, reward, terminated, truncated, info = tool_env.step(ids)
    if any(i < 0 or i >= 49152 for i in ids):
        assert terminated and "outside the vocabulary" in info["invalid_action"]
    assert tool_env.unwrapped.observation_space.contains(obs)


def test_shaping_is_opt_in_and_reported_per_component(tokenizer):
    env = RewardShaping(gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test"), format_bonus=0.1, tool_use_bonus=0.2)
    env.reset(options={"task_id": "test-0"})
    env.step(act(env.unwrapped, calc_call("16-3-4")))
    _, reward, _, _, info = env.step(act(env.unwrapped, "#### 17"))
    assert info["reward_components"] == {"outcome": 0.0, "format": 0.1, "tool_use": 0.2, "tool_error_penalty": 0.0}
    assert reward == pytest.approx(0.3)


def test_async_step_matches_sync_step(tokenizer):
    import asyncio

    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test").unwrapped
    env.reset(options={"task_id": "test-0"})
    obs, *_ = asyncio.run(env.astep(act(env, calc_call("16-3-4"))))
    assert obs["messages"][-1] == {"role": "tool", "content": "9", "tool_call_id": "call_0", "name": "calculate"}


def test_make_without_prior_import_in_a_fresh_interpreter():
    import subprocess
    import sys

    code = (
        "import sys, gymnasium as gym\n"
        "env = gym.make('agent_gym:AgentR1/GSM8KTool-v0', split='test')\n"
        "obs, info = env.reset(seed=0)\n"
        "print(info['task_id'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith("test-")


def test_import_agent_gym_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, agent_gym; print(json.dumps(sorted(m for m in ('torch', 'transformers') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_tool_demonstration_runs_the_calls_through_the_env(tool_env):
    demo = tool_env.unwrapped.tool_demonstration("q", [[{"name": "calculate", "arguments": {"expression": "2+3"}}]], "#### 5")
    assert demo == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+3"}}\n</tool_call>'},
        {"role": "tool", "content": "5", "tool_call_id": "call_0", "name": "calculate"},
        {"role": "assistant", "content": "#### 5"},
    ]
    with pytest.raises(ValueError, match=r"^demonstration call 'calculate' failed: Error: division by zero$"):
        tool_env.unwrapped.tool_demonstration("q", [[{"name": "calculate", "arguments": {"expression": "1/0"}}]], "a")
    with pytest.raises(ValueError, match=r"^demonstration call 'nope' failed: Error: unknown tool 'nope'\. Available tools: calculate\.$"):
        tool_env.unwrapped.tool_demonstration("q", [[{"name": "nope", "arguments": {}}]], "a")


def test_few_shot_prompt_shows_two_calculator_calls_and_counts_only_the_episodes_own(tokenizer):
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", few_shot=True)
    plain = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")
    obs, _ = env.reset(options={"task_id": "test-0"})
    plain_obs, _ = plain.reset(options={"task_id": "test-0"})
    messages = obs["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert messages[0] == plain_obs["messages"][0] and messages[-1] == plain_obs["messages"][-1]
    assert messages[1]["content"].startswith("A baker makes 24 muffins in each batch")
    assert [messages[k]["content"] for k in (2, 3, 4, 5)] == [calc_call("24 * 7"), "168", calc_call("168 - 150"), "18"]
    assert messages[6]["content"].endswith("#### 18")
    text = tokenizer.decode(obs["prompt_ids"])
    assert "<|im_start|>tool\n168<|im_end|>\n<|im_start|>assistant\n<tool_call>" in text
    assert len(obs["prompt_ids"]) > len(plain_obs["prompt_ids"])
    # the episode itself: one call, then the answer (test-0 is 18)
    obs, reward, terminated, _, info = env.step(np.asarray(act(env, calc_call("16 - 3 - 4"))))
    assert obs["messages"][-1]["content"] == "9" and not terminated
    obs, reward, terminated, _, info = env.step(np.asarray(act(env, "#### 18")))
    assert (reward, terminated, info["tool_calls"], info["turn"]) == (1.0, True, 1, 2)
    again, _ = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", few_shot=True).reset(seed=3)
    assert list(again["prompt_ids"]) == list(env.reset(seed=3)[0]["prompt_ids"])
    check_env(gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", few_shot=True).unwrapped, skip_render_check=True)
