"""Fixtures of the SWE tests: the default model's tokenizer, and a small repository of our own (a git
checkout with a bug, its tests and the fix), so that most episodes grade in about a second."""

from __future__ import annotations

import json
import subprocess

import pytest

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
FIXED = CALC.replace("return a + b\n", "return a - b\n").replace("return a - b\n", "return a + b\n", 1)
TESTS = (
    "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n"
)


@pytest.fixture(scope="session")
def tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory):
    """A git checkout: commit 1 has the bug in ``sub``; the task file names its tests."""
    root = tmp_path_factory.mktemp("calc")
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TESTS)
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "calc with a bug")
    task = {
        "instance_id": "calc-1",
        "repo": "calc",
        "problem_statement": "sub(5, 3) returns 8, not 2.",
        "FAIL_TO_PASS": ["test_calc.py::test_sub"],
        "PASS_TO_PASS": ["test_calc.py::test_add", "test_calc.py::test_add_zero"],
        "patch": "--- a/calc.py\n+++ b/calc.py\n@@ -4,3 +4,3 @@\n \n def sub(a, b):\n-    return a + b\n+    return a - b\n",
    }
    tasks = root.parent / "calc_tasks.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    return root, tasks


@pytest.fixture()
def calc_env(tokenizer, calc_repo):
    import gymnasium as gym

    root, tasks = calc_repo
    env = gym.make("AgentR1/SWE-v0", tokenizer=tokenizer, tasks=str(tasks), repo=str(root), test_command="python -m pytest")
    yield env
    env.close()


def _call(env, name: str, **arguments) -> list[int]:
    e = env.unwrapped
    return e.template.encode(e.parser.format_calls([{"name": name, "arguments": arguments}])) + list(e.template.end_of_turn_ids)


@pytest.fixture(scope="session")
def call():
    """``call(env, name, **arguments)``: the token ids of one assistant turn calling ``name`` (hermes
    format) and ending the turn."""
    return _call
