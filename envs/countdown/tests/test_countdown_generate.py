"""Procedural Countdown tasks: reproducible in any process, solvable, split-disjoint, leveled."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from agent_gym_countdown.generate import (
    LEVELS,
    generate_task,
    parse_task_id,
    sample_task,
    split_of,
    task_from_id,
    task_from_mapping,
)

_SNIPPET = (
    "import json, numpy as np\n"
    "from agent_gym_countdown.generate import sample_task\n"
    "out = []\n"
    "for d in ('easy', 'medium', 'hard'):\n"
    "    for s in ('train', 'test'):\n"
    "        rng = np.random.default_rng(2024)\n"
    "        out += [sample_task(rng, d, s).to_dict() for _ in range(5)]\n"
    "print(json.dumps(out))\n"
)


def _here() -> list[dict]:
    out = []
    for d in ("easy", "medium", "hard"):
        for s in ("train", "test"):
            rng = np.random.default_rng(2024)
            out += [sample_task(rng, d, s).to_dict() for _ in range(5)]
    return out


@pytest.mark.parametrize("hash_seed", ["1", "12345"])
def test_tasks_are_the_same_in_a_fresh_process(hash_seed):
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    result = subprocess.run([sys.executable, "-c", _SNIPPET], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert json.loads(result.stdout) == _here()


def test_task_ids_regenerate_the_task():
    rng = np.random.default_rng(7)
    for difficulty in LEVELS:
        task = sample_task(rng, difficulty, "test")
        assert task.id.startswith(f"test-{difficulty}-")
        assert task_from_id(task.id) == task
        assert parse_task_id(task.id)[:2] == ("test", difficulty)


@pytest.mark.parametrize("bad", ["nope", "train-easy", "train-impossible-3", "dev-easy-3", "train-easy-x"])
def test_bad_task_ids_say_what_ids_look_like(bad):
    with pytest.raises(KeyError, match="ids look like 'train-easy-123'"):
        task_from_id(bad)


def test_splits_are_disjoint_by_content():
    train = {(tuple(sorted(t.numbers)), t.target) for t in (generate_task(n, "easy", "train") for n in range(300))}
    test = {(tuple(sorted(t.numbers)), t.target) for t in (generate_task(n, "easy", "test") for n in range(300))}
    assert train and test and not (train & test)
    assert all(split_of(list(k[0]), k[1]) == "train" for k in train)
    assert all(split_of(list(k[0]), k[1]) == "test" for k in test)


def test_difficulty_levels():
    easy = [generate_task(n, "easy") for n in range(200)]
    assert {len(t.numbers) for t in easy} == {2, 3}
    assert all(1 <= x <= 10 for t in easy for x in t.numbers)
    ops = [sum(t.solution.count(op) for op in "+-*/") for t in easy]
    assert set(ops) == {1, 2} and ops.count(1) > ops.count(2)  # mostly a single operation
    assert all("/" not in t.solution for t in easy)
    medium = [generate_task(n, "medium") for n in range(100)]
    assert {len(t.numbers) for t in medium} == {4}
    hard = [generate_task(n, "hard") for n in range(100)]
    assert {len(t.numbers) for t in hard} == {6}
    assert all(100 <= t.target <= 999 for t in hard)
    assert any(set(t.numbers) & {25, 50, 75, 100} for t in hard)


def test_custom_tasks_from_a_mapping():
    task = task_from_mapping({"numbers": [3, 7, 25], "target": 46, "id": "mine"})
    assert (task.id, task.numbers, task.target) == ("mine", (3, 7, 25), 46)
    with pytest.raises(ValueError, match="missing"):
        task_from_mapping({"numbers": [1]})
    with pytest.raises(ValueError, match="integers"):
        task_from_mapping({"numbers": ["a"], "target": 1})


def test_bad_generation_arguments():
    with pytest.raises(ValueError, match="unknown Countdown difficulty"):
        generate_task(0, "extreme")
    with pytest.raises(ValueError, match="unknown split"):
        generate_task(0, "easy", "dev")
