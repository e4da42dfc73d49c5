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


def test_a_registered_task_source_is_made_by_name():
    """GSM8KPython plays GSM8K's tasks through the core: agent-r1-gym-gsm8k registers the source "gsm8k"."""
    import numpy as np

    from agent_gym.core.tasks import TaskSource, make_task_source, task_source_names

    assert "gsm8k" in task_source_names()
    source = make_task_source("gsm8k", split="test")
    assert isinstance(source, TaskSource)
    assert len(source.tasks) == 1319
    assert source.get_task("test-2").id == "test-2"
    assert source.sample_task(np.random.default_rng(0)).id == source.sample_task(np.random.default_rng(0)).id
    assert source.task_from_dict({"question": "1+1?", "answer": "2"}).answer == "2"


def test_an_unknown_task_source_names_the_fix():
    from agent_gym.core.tasks import make_task_source

    with pytest.raises(LookupError, match=r"no task source 'nope' is registered .*'gsm8k'.*pip install agent-r1-gym-nope"):
        make_task_source("nope", needs="agent-r1-gym-nope")


def test_a_task_source_is_not_replaced_silently():
    from agent_gym.core.tasks import register_task_source

    register_task_source("gsm8k", "agent_gym_gsm8k.env:GSM8KTasks", package="agent-r1-gym-gsm8k")  # the same: a no-op
    with pytest.raises(ValueError, match="already registered by agent-r1-gym-gsm8k"):
        register_task_source("gsm8k", "elsewhere:Tasks")


def test_gsm8k_python_plays_the_gsm8k_source(tokenizer):
    env = gym.make("AgentR1/GSM8KPython-v0", tokenizer=tokenizer, split="test")
    try:
        gsm8k = gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test")
        for seed in (0, 7):
            env.reset(seed=seed)
            gsm8k.reset(seed=seed)
            assert env.unwrapped.task == gsm8k.unwrapped.task
        gsm8k.close()
    finally:
        env.close()
