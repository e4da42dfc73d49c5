"""env_dataset: rows built from the env's own task source, each carrying its route."""

from __future__ import annotations

import json
import warnings

import datasets
import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym_trl import ROUTE_KEY, Route, env_dataset, env_rows, route_of
from agent_gym_trl.dataset import DuplicateTasksDropped


def test_a_finite_task_source_gives_its_first_tasks(tokenizer):
    ds = env_dataset("AgentR1/GSM8KTool-v0", n=3, split="test", tokenizer=tokenizer)
    assert isinstance(ds, datasets.Dataset) and len(ds) == 3
    assert ds["task_id"] == ["test-0", "test-1", "test-2"]
    assert set(ds["env_id"]) == {"AgentR1/GSM8KTool-v0"}
    assert json.loads(ds[0]["env_kwargs"]) == {"split": "test"}
    route = route_of(ds[0]["prompt"])
    assert route == Route("AgentR1/GSM8KTool-v0", "test-0", json.dumps({"split": "test"}))
    # Only the last message carries the route; the messages are the env's opening chat.
    assert [m[ROUTE_KEY] is not None for m in ds[0]["prompt"]] == [False] * (len(ds[0]["prompt"]) - 1) + [True]
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, **route.env_kwargs)
    obs, info = env.reset(options={"task_id": route.task_id})
    assert info["task_id"] == "test-0"
    assert [(m["role"], m["content"]) for m in ds[0]["prompt"]] == [(m["role"], m["content"]) for m in obs["messages"]]


def test_a_generated_source_gives_the_tasks_of_seeds(tokenizer):
    rows = env_rows("AgentR1/Arithmetic-v0", n=5, env_kwargs={"level": 1}, tokenizer=tokenizer)
    env = gym.make("AgentR1/Arithmetic-v0", tokenizer=tokenizer, level=1)
    expected = []
    for seed in range(5):
        _, info = env.reset(seed=seed)
        if info["task_id"] not in expected:
            expected.append(info["task_id"])
    assert [r["task_id"] for r in rows] == expected
    assert rows[0]["prompt"][-1]["content"].startswith("What is ")
    with pytest.raises(ValueError, match="generates its tasks .* pass n="):
        env_rows("AgentR1/Arithmetic-v0")


def test_duplicate_tasks_of_a_generated_source_are_dropped_with_a_warning(tokenizer):
    """Arithmetic level 1 draws seed 237's task again at seed 342: 343 seeds give 342 rows, and say so."""
    with pytest.warns(DuplicateTasksDropped) as caught:
        ds = env_dataset("AgentR1/Arithmetic-v0", n=343, env_kwargs={"level": 1}, tokenizer=tokenizer)
    assert len(ds) == 342 and len(set(ds["task_id"])) == 342
    assert [str(w.message) for w in caught] == [
        "AgentR1/Arithmetic-v0: 343 seeds drew 342 distinct tasks; 1 duplicate dropped (rows are the distinct "
        "tasks of seeds 0..342; a larger n gives more)"
    ]
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", DuplicateTasksDropped)  # no duplicates, no finite source: no warning
        assert len(env_rows("AgentR1/Arithmetic-v0", n=342, env_kwargs={"level": 1}, tokenizer=tokenizer)) == 342
        assert len(env_rows("AgentR1/GSM8KTool-v0", n=3, split="test", tokenizer=tokenizer)) == 3


def test_task_ids_pick_tasks_and_datasets_of_two_envs_concatenate(tokenizer):
    a = env_dataset("AgentR1/Arithmetic-v0", task_ids=["train-L1-3", "train-L1-4"], env_kwargs={"level": 1}, tokenizer=tokenizer)
    b = env_dataset("AgentR1/ArithmeticTool-v0", n=2, env_kwargs={"level": 1, "few_shot": True}, tokenizer=tokenizer)
    mixed = datasets.concatenate_datasets([a, b])
    assert mixed["env_id"] == ["AgentR1/Arithmetic-v0"] * 2 + ["AgentR1/ArithmeticTool-v0"] * 2
    routes = [route_of(p) for p in mixed["prompt"]]
    assert [r.task_id for r in routes[:2]] == ["train-L1-3", "train-L1-4"]
    assert routes[2].env_kwargs == {"level": 1, "few_shot": True}


def test_bad_input_gets_clear_errors(tokenizer):
    with pytest.raises(ValueError, match="unknown env id 'AgentR1/Nope-v0'"):
        env_rows("AgentR1/Nope-v0", n=1)
    with pytest.raises(ValueError, match="must not hold a tokenizer"):
        env_rows("AgentR1/Arithmetic-v0", n=1, env_kwargs={"tokenizer": "x"})
    with pytest.raises(ValueError, match="JSON values"):
        env_rows("AgentR1/Arithmetic-v0", n=1, env_kwargs={"level": object()})
    with pytest.raises(ValueError, match="disagree"):
        env_rows("AgentR1/GSM8K-v0", n=1, split="test", env_kwargs={"split": "train"})
    with pytest.raises(KeyError, match="no arithmetic task with id 'bogus'"):
        env_rows("AgentR1/Arithmetic-v0", task_ids=["bogus"], tokenizer=tokenizer)
    with pytest.raises(ValueError, match="carries no agent_gym route.*env_dataset"):
        route_of([{"role": "user", "content": "What is 1 + 1?"}])
    with pytest.raises(ValueError, match="not a valid route"):
        route_of([{"role": "user", "content": "x", ROUTE_KEY: "{not json"}])
