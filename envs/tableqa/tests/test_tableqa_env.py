"""AgentR1/TableQA-v0 through gymnasium: check_env, pandas in the sandbox, rewards, bad actions, seeding."""

from __future__ import annotations

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
from agent_gym_tableqa.generate import generate_task

ENV_ID = "AgentR1/TableQA-v0"
SANDBOX = {"timeout_s": 5, "cpu_s": 5, "memory_mb": 512, "output_bytes": 2000, "prefork": 1}


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


def test_registered_and_check_env_passes(env):
    cards = {c.id: c for c in agent_gym.list_envs()}
    assert cards[ENV_ID].tools == ("python",)
    assert env.unwrapped.sandbox.isolation["preloaded"] == ["pandas"]
    check_env(env.unwrapped)


def test_prompt_describes_the_tables(env):
    obs, info = env.reset(options={"task_id": "test-easy-0"})
    system = obs["messages"][0]["content"]
    assert "`orders` (orders.csv" in system and "unit_price (float)" in system and "launch_year (int)" in system
    assert obs["messages"][1]["content"].startswith(generate_task("test", "easy", 0).question)
    assert info["difficulty"] == "easy"


@pytest.mark.parametrize("task_id", ["test-easy-1", "test-medium-1", "test-hard-1"])
def test_solved_episode_runs_pandas_on_the_tables(env, task_id):
    task = generate_task(*task_id.split("-")[:2], int(task_id.split("-")[2]))
    env.reset(options={"task_id": task_id})
    obs, reward, terminated, truncated, info = env.step(act(env, py(task.solution)))
    output = obs["messages"][-1]["content"]
    assert not (terminated or truncated) and info["tool_errors"] == 0, output
    obs, reward, terminated, truncated, info = env.step(act(env, f"From the table:\n#### {output.strip()}"))
    assert (reward, terminated, info["correct"], info["answer_check"]) == (1.0, True, True, "correct"), (task.question, task.answer, output)
    assert info["difficulty"] == task.difficulty and info["expected"] == task.answer


def test_failed_and_unparsable_answers(env):
    env.reset(options={"task_id": "test-easy-2"})
    task = env.unwrapped.task
    wrong = "Nobody" if task.answer_type in ("str", "date") else str(int(task.exact) + 1000)
    _, reward, terminated, _, info = env.step(act(env, f"#### {wrong}"))
    assert (reward, terminated, info["answer_check"]) == (0.0, True, "wrong_answer")
    env.reset(options={"task_id": "test-easy-2"})
    _, reward, _, _, info = env.step(act(env, "I do not know."))
    assert (reward, info["answer_check"]) == (0.0, "no_final_answer")


def test_stateful_session_and_files(env):
    env.reset(options={"task_id": "test-medium-5"})
    obs, *_ = env.step(act(env, py("import os\nprint(sorted(f for f in os.listdir('.') if f.endswith('.csv')), len(orders))")))
    assert obs["messages"][-1]["content"] == f"['orders.csv', 'products.csv'] {len(env.unwrapped.task.tables[0].rows)}"
    env.step(act(env, py("total = orders['quantity'].sum()")))
    obs, _, _, _, info = env.step(act(env, py("print(total == orders.quantity.sum())")))
    assert obs["messages"][-1]["content"] == "True" and info["tool_errors"] == 0


def test_sandbox_errors_in_pandas_code(env):
    env.reset(options={"task_id": "test-hard-3"})
    obs, _, _, _, info = env.step(act(env, py("orders['no_such_column']")))
    assert "KeyError: 'no_such_column'" in obs["messages"][-1]["content"] and info["tool_error_kinds"] == {"sandbox_error": 1}
    obs, _, _, _, info = env.step(act(env, py("orders.to_csv('/usr/leak.csv')")))
    assert info["tool_error_kinds"]["sandbox_forbidden_file"] == 1


@pytest.mark.parametrize(
    "action, key, value",
    [
        (np.array([], dtype=np.int64), "answer_check", "no_final_answer"),
        (np.array([49152]), "invalid_action", "token id 49152 is outside the vocabulary [0, 49152)"),
        (np.ones(100_000, dtype=np.int64), "invalid_action", "action has 100000 tokens; the limit is max_action_tokens=1024"),
        ("#### \ufffd<tool_call>{{{", "answer_check", "wrong_answer"),
    ],
)
def test_bad_actions_end_with_a_clear_info(env, action, key, value):
    env.reset(options={"task_id": "test-easy-4"})
    obs, reward, terminated, truncated, info = env.step(action)
    assert reward == 0.0 and (terminated or not truncated)
    if key == "answer_check" and value == "wrong_answer":
        assert info.get("answer_check") in ("wrong_answer", "unparsable_answer") or info["tool_errors"] >= 1
    else:
        assert info[key] == value


def test_difficulty_levels_and_task_pinning(tokenizer):
    e = gym.make(ENV_ID, tokenizer=tokenizer, split="train", difficulty=["hard"], sandbox=SANDBOX)
    levels = {e.reset(seed=s)[1]["difficulty"] for s in range(5)}
    assert levels == {"hard"}
    _, info = e.reset(options={"task": {"difficulty": "easy", "index": 9}})
    assert info["task_id"] == "train-easy-9"
    with pytest.raises(KeyError, match="ids look like"):
        e.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="unknown TableQA difficulty"):
        gym.make(ENV_ID, tokenizer=tokenizer, difficulty="expert")
    e.close()


def test_reset_seed_picks_the_same_task_in_another_process(env, tokenizer):
    """The seeded task choice and the generated tables are process-independent (a fresh interpreter
    with another hash seed, no tokenizer needed: reset seeds gymnasium's generator and calls
    sample_task); the prompt ids then follow from the task alone."""
    obs, info = env.reset(seed=99)
    task = env.unwrapped.task
    code = (
        "import hashlib, types\n"
        "from gymnasium.utils import seeding\n"
        "from agent_gym_tableqa.env import TableQAEnv\n"
        "rng, _ = seeding.np_random(99)\n"
        "t = TableQAEnv.sample_task(types.SimpleNamespace(split='test', difficulties=('easy', 'medium', 'hard')), rng)\n"
        "print(t.id, hashlib.sha256((t.question + ''.join(t.files().values())).encode()).hexdigest())\n"
    )
    env_vars = {**os.environ, "PYTHONHASHSEED": "4242"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, env=env_vars).stdout.split()
    assert out == [task.id, hashlib.sha256((task.question + "".join(task.files().values())).encode()).hexdigest()]
    other = gym.make(ENV_ID, tokenizer=tokenizer, split="test", sandbox=SANDBOX)
    obs2, info2 = other.reset(seed=99)
    assert info2["task_id"] == info["task_id"] and np.array_equal(obs2["prompt_ids"], obs["prompt_ids"])
    other.close()


@pytest.mark.slow
def test_reset_seed_gives_the_same_prompt_ids_in_another_process(env):
    obs, info = env.reset(seed=99)
    code = (
        "import gymnasium as gym, hashlib, agent_gym\n"
        f"env = gym.make({ENV_ID!r}, split='test', sandbox={SANDBOX!r})\n"
        "obs, info = env.reset(seed=99)\n"
        "print(info['task_id'], hashlib.sha256(obs['prompt_ids'].tobytes()).hexdigest())\n"
        "env.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300).stdout.split()
    assert out == [info["task_id"], hashlib.sha256(obs["prompt_ids"].tobytes()).hexdigest()]
