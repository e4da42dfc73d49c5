"""AgentR1/GSM8KPython-v0: check_env, rewards of hand-written episodes, sandbox errors as tool messages,
stateful and stateless sessions, bad actions, seeding across processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym

ENV_ID = "AgentR1/GSM8KPython-v0"
SANDBOX = {"timeout_s": 2, "cpu_s": 1, "memory_mb": 256, "output_bytes": 1000, "prefork": 2}


def act(env, text: str) -> list[int]:
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def py(code: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": code}}) + "\n</tool_call>"


@pytest.fixture(scope="module")
def env(tokenizer):
    e = gym.make(ENV_ID, tokenizer=tokenizer, split="test", sandbox=SANDBOX)
    yield e
    e.close()


def test_registered_with_its_tool():
    cards = {c.id: c for c in agent_gym.list_envs()}
    assert cards[ENV_ID].tools == ("python",) and cards[ENV_ID].package == "agent-r1-gym-python"


def test_check_env_passes(tokenizer):
    e = gym.make(ENV_ID, tokenizer=tokenizer, split="test", sandbox=SANDBOX)
    check_env(e.unwrapped)
    e.close()


def test_solved_episode_with_code_reward_1(env):
    obs, info = env.reset(options={"task_id": "test-0"})  # Janet's ducks: 16 - 3 - 4 eggs at $2: 18
    assert info["task_id"] == "test-0" and "python" in obs["messages"][0]["content"]
    prompt = list(obs["prompt_ids"])
    for text in [py("eggs = 16 - 3 - 4\nprint(eggs)"), py("eggs * 2")]:
        action = act(env, text)
        obs, reward, terminated, truncated, info = env.step(action)
        ids = list(obs["prompt_ids"])
        assert ids[: len(prompt) + len(action)] == prompt + action and not info["new_segment"]  # no drift
        prompt = ids
        assert (reward, terminated, truncated) == (0.0, False, False)
    assert [m["content"] for m in obs["messages"] if m["role"] == "tool"] == ["9", "18"]
    obs, reward, terminated, truncated, info = env.step(act(env, "She makes $18.\n#### 18"))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] is True and info["answer_check"] == "correct"
    assert info["tool_calls"] == 2 and info["tool_errors"] == 0 and info["reward_components"] == {"outcome": 1.0}


def test_failed_and_unanswered_episodes(env):
    env.reset(options={"task_id": "test-0"})
    env.step(act(env, py("print(16 - 3)")))
    _, reward, terminated, _, info = env.step(act(env, "#### 13"))
    assert (reward, terminated, info["answer_check"], info["correct"]) == (0.0, True, "wrong_answer", False)
    env.reset(options={"task_id": "test-0"})
    _, reward, terminated, _, info = env.step(act(env, "I think it is eighteen."))
    assert (reward, info["answer_check"]) == (0.0, "no_final_answer")


def test_sandbox_failures_are_tool_messages_with_counted_kinds(env):
    env.reset(options={"task_id": "test-0"})
    steps = [
        (py("1 / 0"), "ZeroDivisionError: division by zero", "sandbox_error"),
        (py("import time\ntime.sleep(10)"), "TimeoutError: the code ran longer than 2 s", "sandbox_timeout"),
        (py("import urllib.request\nurllib.request.urlopen('http://example.com')"), "PermissionError: network access is not allowed in this sandbox", "sandbox_forbidden_network"),
        (py("x = ' ' * 10 ** 10"), "MemoryError: the code exceeded the 256 MB memory limit", "sandbox_memory"),
    ]
    for text, message, kind in steps:
        obs, reward, terminated, truncated, info = env.step(act(env, text))
        assert not (terminated or truncated)
        assert obs["messages"][-1]["role"] == "tool" and obs["messages"][-1]["content"].endswith(message)
        assert info["tool_error_kinds"][kind] == 1
    assert info["tool_errors"] == 4 and info["tool_calls"] == 4
    _, reward, _, truncated, info = env.step(act(env, py("print('too late')")))
    assert truncated and info["truncated_reason"] == "max_turns" and reward == 0.0


def test_stateful_keeps_variables_within_an_episode_only(env):
    env.reset(options={"task_id": "test-0"})
    env.step(act(env, py("secret = 41")))
    obs, *_ = env.step(act(env, py("secret + 1")))
    assert obs["messages"][-1]["content"] == "42"
    env.reset(options={"task_id": "test-1"})  # a new episode: a new interpreter
    obs, _, _, _, info = env.step(act(env, py("secret")))
    assert "NameError" in obs["messages"][-1]["content"] and info["tool_error_kinds"] == {"sandbox_error": 1}


def test_stateless_forgets_between_calls(tokenizer):
    e = gym.make(ENV_ID, tokenizer=tokenizer, split="test", stateful=False, sandbox=SANDBOX)
    e.reset(options={"task_id": "test-0"})
    assert "fresh interpreter" in e.unwrapped.tools[0].description
    e.step(act(e, py("secret = 41")))
    obs, *_ = e.step(act(e, py("secret")))
    assert "NameError: name 'secret' is not defined" in obs["messages"][-1]["content"]
    e.close()


@pytest.mark.parametrize(
    "action, expected",
    [
        (np.array([], dtype=np.int64), {"answer_check": "no_final_answer"}),
        (np.array([10**6]), {"invalid_action": "token id 1000000 is outside the vocabulary [0, 49152)"}),
        (np.array([-1]), {"invalid_action": "token id -1 is outside the vocabulary [0, 49152)"}),
        (np.zeros(100_000, dtype=np.int64), {"invalid_action": "action has 100000 tokens; the limit is max_action_tokens=1024"}),
        (np.array([[1, 2]]), {"invalid_action": "action must be a 1-D sequence of token ids, got shape (1, 2)"}),
    ],
)
def test_bad_actions_end_the_episode_with_a_clear_info(env, action, expected):
    env.reset(options={"task_id": "test-0"})
    obs, reward, terminated, truncated, info = env.step(action)
    assert reward == 0.0 and terminated and not truncated
    for key, value in expected.items():
        assert info[key] == value


def test_garbage_text_never_raises(env):
    env.reset(seed=3)
    for text in ["<tool_call>{not json</tool_call>", '<tool_call>\n{"name": "python", "arguments": {"code": 5}}\n</tool_call>', "\x00\ufffd" * 50]:
        env.reset(seed=3)
        obs, reward, terminated, truncated, info = env.step(act(env, text))
        assert env.unwrapped.observation_space.contains(obs) and reward == 0.0
    env.reset(seed=3)
    _, _, _, _, info = env.step(act(env, '<tool_call>\n{"name": "python", "arguments": {"code": 5}}\n</tool_call>'))
    assert info["tool_error_kinds"] == {"invalid_arguments": 1}


def test_async_steps_of_many_episodes_overlap(tokenizer):
    """All 8 steps are in flight at once: a step that blocked the event loop while its sandboxed code
    slept would finish before the next episode's step began, and the count would never pass 1."""
    envs = [gym.make(ENV_ID, tokenizer=tokenizer, split="test", sandbox=SANDBOX).unwrapped for _ in range(8)]
    in_flight = {"now": 0, "peak": 0}

    async def episode(e):
        e.reset(seed=0)
        in_flight["now"] += 1
        in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        try:
            obs, *_ = await e.astep(act(e, py("import time\ntime.sleep(0.3)\nprint('slept')")))
        finally:
            in_flight["now"] -= 1
        return obs["messages"][-1]["content"]

    async def main():
        return await asyncio.gather(*(episode(e) for e in envs))

    out = asyncio.run(main())
    assert out == ["slept"] * 8
    assert in_flight == {"now": 0, "peak": 8}
    for e in envs:
        e.close()


def test_reset_seed_picks_the_same_task_in_another_process(env, tokenizer):
    """The seeded task choice is process-independent (checked in a fresh interpreter with another hash
    seed, without loading a tokenizer: reset seeds gymnasium's generator and calls sample_task); the
    prompt ids then follow from the task alone."""
    obs, info = env.reset(seed=1234)
    code = (
        "from gymnasium.utils import seeding\n"
        "from agent_gym.core.tasks import TaskList\n"
        "from agent_gym_gsm8k.data import load_gsm8k\n"
        "rng, _ = seeding.np_random(1234)\n"
        "print(TaskList(load_gsm8k('test')).sample(rng).id)\n"
    )
    env_vars = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, env=env_vars).stdout.split()
    assert out == [info["task_id"]]
    other = gym.make(ENV_ID, tokenizer=tokenizer, split="test", sandbox=SANDBOX)
    obs2, info2 = other.reset(seed=1234)
    assert info2["task_id"] == info["task_id"] and np.array_equal(obs2["prompt_ids"], obs["prompt_ids"])
    other.close()


@pytest.mark.slow
def test_reset_seed_gives_the_same_prompt_ids_in_another_process(env):
    obs, info = env.reset(seed=1234)
    code = (
        "import gymnasium as gym, hashlib, agent_gym\n"
        f"env = gym.make({ENV_ID!r}, split='test', sandbox={SANDBOX!r})\n"
        "obs, info = env.reset(seed=1234)\n"
        "print(info['task_id'], hashlib.sha256(obs['prompt_ids'].tobytes()).hexdigest())\n"
        "env.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300).stdout.split()
    assert out == [info["task_id"], hashlib.sha256(obs["prompt_ids"].tobytes()).hexdigest()]


def test_envs_with_equal_configs_share_one_sandbox(tokenizer, env):
    other = gym.make(ENV_ID, tokenizer=tokenizer, split="test", sandbox=dict(SANDBOX))
    assert other.unwrapped.sandbox is env.unwrapped.sandbox
    other.close()
    with pytest.raises(TypeError, match="exactly one tool"):
        gym.make(ENV_ID, tokenizer=tokenizer, split="test", tools=[])
