"""Reading any env's tasks (what the verl export and the TRL dataset both build on)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.core.tasks import env_takes, make_on_split, source_tasks, text_of


def test_a_finite_source_gives_its_first_tasks_in_order(tokenizer):
    env = make_on_split("AgentR1/GSM8K-v0", "test", tokenizer=tokenizer)
    tasks = source_tasks(env, 3)
    assert [env.unwrapped.task_id_of(t) for t in tasks] == ["test-0", "test-1", "test-2"]
    assert len(source_tasks(env)) == 1319
    picked = source_tasks(env, task_ids=["test-5", "test-2"])
    assert [env.unwrapped.task_id_of(t) for t in picked] == ["test-5", "test-2"]


def test_a_generated_source_gives_the_tasks_of_seeds_0_to_n(tokenizer):
    env = make_on_split("AgentR1/Arithmetic-v0", env_kwargs={"level": 1}, tokenizer=tokenizer)
    tasks = source_tasks(env, 40)
    ids = [env.unwrapped.task_id_of(t) for t in tasks]
    assert len(ids) == len(set(ids)) <= 40  # duplicates dropped, seed order kept
    twin = gym.make("AgentR1/Arithmetic-v0", tokenizer=tokenizer, level=1)
    expected = []
    for seed in range(40):
        task_id = twin.reset(seed=seed)[1]["task_id"]
        if task_id not in expected:
            expected.append(task_id)
    assert ids == expected
    with pytest.raises(ValueError, match="generates its tasks .* pass n="):
        source_tasks(env)
    with pytest.raises(ValueError, match="n must be >= 1"):
        source_tasks(env, 0)


def test_make_on_split_says_what_is_wrong(tokenizer):
    assert env_takes("AgentR1/GSM8K-v0", "split") and env_takes("AgentR1/Arithmetic-v0", "level")
    with pytest.raises(ValueError, match="unknown env id 'AgentR1/Nope-v0'"):
        make_on_split("AgentR1/Nope-v0")
    with pytest.raises(ValueError, match="disagree"):
        make_on_split("AgentR1/GSM8K-v0", "test", {"split": "train"}, tokenizer)


def test_text_of():
    assert (text_of(None), text_of(3), text_of({"b": 1, "a": [2]})) == ("", "3", '{"a": [2], "b": 1}')
