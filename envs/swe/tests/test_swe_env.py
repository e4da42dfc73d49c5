"""AgentR1/SWE-v0: tools on a per-episode repository, grading by hidden tests with partial credit,
tampering with tests does not pay, snapshot/restore and replay, SWE-bench instances from a local git
checkout, the packaged tasks and their demonstrations."""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.rollout import Generation, play_episode

ENV_ID = "AgentR1/SWE-v0"
FIX = {"path": "calc.py", "old_str": "def sub(a, b):\n    return a + b", "new_str": "def sub(a, b):\n    return a - b"}


def test_registered_with_its_tools():
    cards = {c.id: c for c in agent_gym.list_envs()}
    assert cards[ENV_ID].tools == ("bash", "view", "edit", "submit") and cards[ENV_ID].package == "agent-r1-gym-swe"


def test_fixing_the_bug_and_submitting_scores_1(calc_env, call):
    env = calc_env
    obs, info = env.reset(options={"task_id": "calc-1"})
    assert info["task_id"] == "calc-1" and "sub(5, 3) returns 8" in obs["messages"][1]["content"]
    prompt = list(obs["prompt_ids"])
    obs, reward, terminated, truncated, info = env.step(call(env, "bash", command="ls && python -m pytest -q 2>&1 | tail -1"))
    assert (reward, terminated, truncated) == (0.0, False, False) and info["tool_results"] == ["ok"]
    out = obs["messages"][-1]["content"]
    assert out.startswith("calc.py\ntest_calc.py\n") and "1 failed, 2 passed" in out
    assert list(obs["prompt_ids"])[: len(prompt)] == prompt and not info["new_segment"]  # no drift
    obs, *_ = env.step(call(env, "view", path="calc.py", start_line=5, end_line=6))
    assert obs["messages"][-1]["content"] == "     5\tdef sub(a, b):\n     6\t    return a + b"
    obs, *_, info = env.step(call(env, "edit", **FIX))
    assert obs["messages"][-1]["content"].startswith("edited calc.py; lines 2-6 now read:")
    obs, reward, terminated, truncated, info = env.step(call(env, "submit"))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["correct"] is True and info["answer_check"] == "resolved" and info["submitted"] is True
    assert info["tests"] == {"fail_to_pass": [1, 1], "pass_to_pass": [2, 2], "partial_credit": 1.0, "exit_status": 0}
    assert info["changed_files"] == ["calc.py"] and info["reward_components"] == {"outcome": 1.0}
    assert info["tool_calls"] == 4 and info["tool_errors"] == 0


def test_partial_credit_and_tampered_tests_do_not_pay(calc_env, call):
    env = calc_env
    env.reset(options={"task_id": "calc-1"})
    env.step(call(env, "bash", command="printf 'def test_sub():\\n    pass\\n' > test_calc.py && echo 'import sys' > conftest.py"))
    obs, reward, terminated, truncated, info = env.step(call(env, "submit"))
    assert (reward, terminated) == (0.0, True) and info["answer_check"] == "unresolved"
    assert info["tests"]["fail_to_pass"] == [0, 1] and info["tests"]["pass_to_pass"] == [2, 2]
    assert info["tests"]["partial_credit"] == pytest.approx(2 / 3, abs=1e-4)
    assert info["ignored_files"] == ["conftest.py", "test_calc.py"] and info["changed_files"] == []


def test_tool_errors_are_counted_and_never_raise(calc_env, call):
    env = calc_env
    env.reset(options={"task_id": "calc-1"})
    steps = [
        (call(env, "edit", path="calc.py", old_str="return a + b", new_str="x"), "old_str occurs 2 times"),
        (call(env, "edit", path="calc.py", old_str="nowhere", new_str="x"), "old_str was not found"),
        (call(env, "view", path="../../etc", start_line=1), "is outside the repository"),
        (call(env, "view", path="calc.py", start_line=50), "lines 50-6 are outside calc.py, which has 6 lines"),
        (call(env, "bash", command="sleep 5"), "[the command was stopped after 1 s]"),
    ]
    env.unwrapped.workspace.command_timeout_s = 1.0
    for action, message in steps:
        obs, reward, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated) and message in obs["messages"][-1]["content"]
    assert info["tool_errors"] == 5 and info["tool_calls"] == 5
    obs, *_ = env.step(call(env, "bash", command="exit 3"))
    assert obs["messages"][-1]["content"] == "(no output)\n[exit code 3]"  # a failing command is no tool error


@pytest.mark.parametrize("action, key", [(np.array([10**6]), "invalid_action"), (np.array([[1, 2]]), "invalid_action")])
def test_bad_actions_end_the_episode(calc_env, action, key):
    calc_env.reset(options={"task_id": "calc-1"})
    _, reward, terminated, _, info = calc_env.step(action)
    assert reward == 0.0 and terminated and key in info


def test_snapshot_restores_the_workspace_in_a_fresh_env(calc_env, tokenizer, calc_repo, call):
    env = calc_env
    env.reset(options={"task_id": "calc-1"})
    env.step(call(env, "edit", **FIX))
    env.step(call(env, "bash", command="echo note > NOTES && rm test_calc.py"))
    snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
    assert snap.tool_state["bash"]["changes"]["test_calc.py"] is None and set(snap.tool_state["bash"]["changes"]) == {"calc.py", "NOTES", "test_calc.py"}
    root, tasks = calc_repo
    other = agent_gym.restore(gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks), repo=str(root), test_command="python -m pytest"), snap)
    obs, *_ = other.step(call(other, "bash", command="ls && cat NOTES && grep -c 'a - b' calc.py"))
    assert obs["messages"][-1]["content"] == "NOTES\ncalc.py\nnote\n1"
    _, reward, terminated, _, info = other.step(call(other, "submit"))
    assert (reward, terminated, info["tests"]["fail_to_pass"]) == (1.0, True, [1, 1])  # the tests that grade are pristine
    other.close()


def test_replay_of_a_recorded_episode_matches(calc_env, call):
    env = calc_env
    texts = [call(env, "view", path="calc.py"), call(env, "edit", **FIX), call(env, "submit")]

    async def generate(prompt_ids):
        return Generation(texts.pop(0), None, "stop")

    trajectory = asyncio.run(play_episode(env, generate, task_id="calc-1"))
    assert trajectory.return_ == 1.0
    (report,) = agent_gym.replay([trajectory])
    assert report.matched, report.line()


def test_repo_without_a_task_file_is_refused(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="pass tasks=PATH"):
        gym.make(ENV_ID, tokenizer=tokenizer, repo=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tmp_path / "none.jsonl"))


def test_swe_bench_instance_from_a_local_git_checkout(tokenizer, calc_repo, tmp_path, call):
    """SWE-bench's fields: the repository at base_commit, test_patch applied only for grading (the
    agent never sees the new test), FAIL_TO_PASS / PASS_TO_PASS as JSON strings."""
    root, _ = calc_repo
    base = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    test_patch = ("--- a/test_calc.py\n+++ b/test_calc.py\n@@ -12,2 +12,6 @@\n def test_add_zero():\n     assert add(0, 0) == 0\n"
                  "+\n+\n+def test_sub_negative():\n+    assert sub(1, 4) == -3\n")
    instance = {
        "instance_id": "local__calc-2", "repo": "local/calc", "base_commit": base, "repo_path": str(root),
        "problem_statement": "sub is wrong for negative results too.",
        "patch": "--- a/calc.py\n+++ b/calc.py\n@@ -5,2 +5,2 @@\n def sub(a, b):\n-    return a + b\n+    return a - b\n",
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(["test_calc.py::test_sub_negative"]),
        "PASS_TO_PASS": json.dumps(["test_calc.py::test_add"]),
    }
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(instance) + "\n")
    env = gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(path))
    env.reset(options={"task_id": "local__calc-2"})
    obs, *_ = env.step(call(env, "bash", command="grep -c negative test_calc.py"))
    assert obs["messages"][-1]["content"] == "0\n[exit code 1]"
    from agent_gym_swe.demonstrations import fix_turns

    turns, outcome = fix_turns(env.unwrapped, env.unwrapped.task)
    assert outcome == "kept" and len(turns) == 3
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.template.encode(turn) + list(env.unwrapped.template.end_of_turn_ids))
    assert (reward, terminated, info["tests"]["fail_to_pass"], info["tests"]["pass_to_pass"]) == (1.0, True, [1, 1], [1, 1])
    env.close()


@pytest.mark.parametrize("repo", ["cachetools-8.0.3", "inflection-0.5.1", "isodate-0.7.2", "webcolors-25.10.0"])
def test_packaged_task_demonstration_scores_1(tokenizer, repo):
    """The first train task of each packaged project, fixed by its demonstration through the env: the
    generated data is sound. (isodate's tests parametrized over a set change their ids from one run to the
    next; listed, they made every isodate task unresolvable.)"""
    from agent_gym_swe.demonstrations import demonstrations

    env = gym.make(ENV_ID, tokenizer=tokenizer, split="train")
    offset = next(n for n, t in enumerate(env.unwrapped.tasks) if t.repo == repo)
    ((task_id, turns, outcome),) = list(demonstrations(env, offset=offset, limit=1))
    assert outcome == "kept" and json.loads(turns[-1].split("\n")[1]) == {"name": "submit", "arguments": {}}
    obs, info = env.reset(options={"task_id": task_id})
    task = env.unwrapped.task
    assert not any(name in obs["messages"][1]["content"] for name in task.FAIL_TO_PASS)  # no hidden test name leaks
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.template.encode(turn) + list(env.unwrapped.template.end_of_turn_ids))
    assert (reward, terminated) == (1.0, True)
    f2p, p2p = len(task.FAIL_TO_PASS), len(task.PASS_TO_PASS)
    assert info["tests"]["fail_to_pass"] == [f2p, f2p] and info["tests"]["pass_to_pass"] == [p2p, p2p] and f2p >= 1
    assert info["tool_errors"] == 0
    env.close()
