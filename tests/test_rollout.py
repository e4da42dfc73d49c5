"""The rollout driver with a scripted policy on the real GSM8K tool env (real tokenizer, real data)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.chat.template import ChatTemplate
from agent_gym.rollout import Generation, Policy, RolloutResult, ScriptedPolicy, run_episodes
from agent_gym.tools import HermesParser
from agent_gym.trajectory import TrajectoryWriter, read_trajectories

ENV_ID = "AgentR1/GSM8KTool-v0"
SUMMARY_KEYS = {
    "episodes",
    "accuracy",
    "mean_reward",
    "mean_turns",
    "tool_calls",
    "tool_calls_per_episode",
    "tool_errors",
    "format_errors",
    "generated_tokens",
    "wall_seconds",
    "tokens_per_second",
}


def calc(expression: str) -> str:
    return HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": expression}}])


# test-0: Janet's ducks lay 16 eggs, she eats 3 and bakes with 4, sells the rest at $2: 18.
JANET = {1: calc("16 - 3 - 4"), 2: calc("9 * 2"), 3: "She sells 9 eggs for $2 each.\n#### 18"}


def janet_script(conversation: int, turn: int) -> str:
    return JANET[turn]


@pytest.fixture()
def make_env(tokenizer):
    return lambda: gym.make(ENV_ID, tokenizer=tokenizer, split="test")


def test_scripted_three_turn_episode(tokenizer, make_env, tmp_path):
    policy = ScriptedPolicy(tokenizer, janet_script)
    path = tmp_path / "rollouts.jsonl"
    with TrajectoryWriter(path) as writer:
        result = run_episodes(make_env, policy, task_ids=["test-0"], progress=False, writer=writer)

    assert isinstance(result, RolloutResult)
    [traj] = result.trajectories
    assert traj.env_id == ENV_ID
    assert traj.task_id == "test-0"
    assert traj.seed == 0
    assert traj.reward == 1.0
    assert traj.num_turns == 3
    assert [s.reward for s in traj.steps] == [0.0, 0.0, 1.0]
    assert [s.terminated for s in traj.steps] == [False, False, True]
    assert not any(s.truncated or s.new_segment for s in traj.steps)
    assert traj.metadata["finish_reasons"] == ["stop", "stop", "stop"]
    final = traj.final_info
    assert (final["correct"], final["tool_calls"], final["tool_errors"], final["format_errors"]) == (True, 2, 0, 0)
    # The final chat: system, user, then assistant/tool/assistant/tool/assistant.
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["content"] for m in traj.messages if m["role"] == "tool"] == ["9", "18"]

    # Each response is exactly what the policy returned: the text's tokens plus the end of turn.
    template = ChatTemplate(tokenizer)
    expected = [template.encode(JANET[k]) + template.end_of_turn_ids for k in (1, 2, 3)]
    assert [s.response_ids for s in traj.steps] == expected
    assert [g.ids for g in policy.outputs] == expected
    # No drift: each prompt extends the previous prompt and response verbatim.
    for prev, step in zip(traj.steps, traj.steps[1:]):
        head = prev.prompt_ids + prev.response_ids
        assert step.prompt_ids[: len(head)] == head
        assert len(step.prompt_ids) > len(head)

    summary = result.summary()
    assert set(summary) == SUMMARY_KEYS
    assert summary["episodes"] == 1
    assert summary["accuracy"] == 1.0
    assert summary["mean_reward"] == 1.0
    assert summary["mean_turns"] == 3.0
    assert summary["tool_calls"] == 2
    assert summary["tool_calls_per_episode"] == 2.0
    assert summary["tool_errors"] == 0
    assert summary["format_errors"] == 0
    assert summary["generated_tokens"] == sum(len(ids) for ids in expected)
    assert summary["wall_seconds"] > 0

    # Written at once, and read back equal.
    assert writer.count == 1
    assert list(read_trajectories(path)) == result.trajectories


@pytest.mark.parametrize("runner", ["run_episodes", "run_episodes_concurrent"])
def test_runners_read_the_env_id_without_copying_the_spec(tokenizer, make_env, monkeypatch, runner):
    """A wrapper's ``spec`` deep-copies the spec with its kwargs on first access (with a tokenizer
    among them: about 0.25 s per env). The runners read the id from the unwrapped env instead."""
    import gymnasium.core
    import gymnasium.wrappers.common

    from agent_gym.rollout.async_runner import run_episodes_concurrent

    copies: list[object] = []
    monkeypatch.setattr(gymnasium.wrappers.common, "deepcopy", lambda obj, memo=None: copies.append(obj) or obj)
    monkeypatch.setattr(gymnasium.core, "deepcopy", lambda obj, memo=None: copies.append(obj) or obj)
    env = make_env()
    run = {"run_episodes": run_episodes, "run_episodes_concurrent": run_episodes_concurrent}[runner]
    result = run([env], ScriptedPolicy(tokenizer, janet_script), task_ids=["test-0"], progress=False)
    [traj] = result.trajectories
    assert (traj.env_id, traj.reward) == (ENV_ID, 1.0)
    assert copies == []
    assert env.spec is not None and copies  # what reading the wrapper's spec costs


def test_batched_episodes_refill_slots_in_episode_order(tokenizer, make_env, tmp_path):
    # Episode 0 takes three turns while the others answer at once (wrongly): with 2 slots the
    # short episodes keep refilling slot 1 while episode 0 is still running in slot 0.
    def script(conversation: int, turn: int) -> str:
        return JANET[turn] if conversation == 0 else f"I guess.\n#### {conversation}"

    policy = ScriptedPolicy(tokenizer, script)
    task_ids = [f"test-{i}" for i in range(5)]
    path = tmp_path / "batch.jsonl"
    with TrajectoryWriter(path) as writer:
        result = run_episodes(make_env, policy, task_ids=task_ids, batch_size=2, progress=False, writer=writer)

    assert [t.task_id for t in result.trajectories] == task_ids
    assert [t.metadata["episode"] for t in result.trajectories] == [0, 1, 2, 3, 4]
    assert [t.reward for t in result.trajectories] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [t.num_turns for t in result.trajectories] == [3, 1, 1, 1, 1]
    # Rounds: [ep0 t1, ep1], [ep0 t2, ep2], [ep0 t3, ep3], [ep4]: four generate calls.
    assert policy.calls == 4
    # The file holds the episodes in the order they finished.
    assert [t.task_id for t in read_trajectories(path)] == ["test-1", "test-2", "test-0", "test-3", "test-4"]
    s = result.summary()
    assert (s["episodes"], s["accuracy"], s["mean_reward"], s["mean_turns"]) == (5, 0.2, 0.2, 1.4)
    assert (s["tool_calls"], s["tool_calls_per_episode"], s["tool_errors"], s["format_errors"]) == (2, 0.4, 0, 0)


def test_seeds_choose_tasks_like_a_direct_reset(tokenizer, make_env):
    policy = ScriptedPolicy(tokenizer, lambda c, t: "#### 0")
    result = run_episodes(make_env, policy, episodes=3, base_seed=10, batch_size=3, progress=False)
    env = make_env()
    expected = [env.reset(seed=10 + i)[1]["task_id"] for i in range(3)]
    assert [t.task_id for t in result.trajectories] == expected
    assert [t.seed for t in result.trajectories] == [10, 11, 12]
    for traj, seed in zip(result.trajectories, (10, 11, 12)):
        assert traj.steps[0].prompt_ids == env.reset(seed=seed)[0]["prompt_ids"].tolist()


def test_tool_and_format_errors_are_counted(tokenizer, make_env):
    def script(conversation: int, turn: int) -> str:
        return {1: "<tool_call>{not json</tool_call>", 2: calc("1 / 0"), 3: "#### 18"}[turn]

    result = run_episodes(make_env, ScriptedPolicy(tokenizer, script), task_ids=["test-0"], progress=False)
    [traj] = result.trajectories
    assert traj.steps[0].info["tool_results"] == ["malformed"]
    assert traj.steps[1].info["tool_results"] != ["ok"]
    s = result.summary()
    assert (s["tool_calls"], s["tool_errors"], s["format_errors"], s["accuracy"]) == (1, 2, 1, 1.0)


def test_length_limit_cuts_the_reply_and_says_so(tokenizer, make_env):
    policy = ScriptedPolicy(tokenizer, lambda c, t: "Let me think about this for a very long time.\n#### 18")
    result = run_episodes(make_env, policy, task_ids=["test-0"], max_new_tokens=5, progress=False)
    [traj] = result.trajectories
    assert len(traj.steps[0].response_ids) == 5
    assert traj.metadata["finish_reasons"] == ["length"]
    assert traj.reward == 0.0


def test_scripted_policy_tracks_conversations_by_prefix(tokenizer):
    seen: list[tuple[int, int]] = []

    def script(conversation: int, turn: int) -> str:
        seen.append((conversation, turn))
        return f"c{conversation}t{turn}"

    policy = ScriptedPolicy(tokenizer, script, logprob=-0.5)
    a, b = [1, 2, 3], [1, 2, 4]
    ga, gb = policy.generate([a, b], max_new_tokens=50)
    assert isinstance(ga, Generation) and ga.finish_reason == "stop"
    assert ga.ids == policy.template.encode("c0t1") + policy.template.end_of_turn_ids
    assert ga.logprobs == [-0.5] * len(ga.ids)
    # Continuations (history + env suffix) keep their conversation; a fresh prompt opens a new one.
    policy.generate([b + gb.ids + [7], a + ga.ids + [8, 9], [5]], max_new_tokens=50)
    assert seen == [(0, 1), (1, 1), (1, 2), (0, 2), (2, 1)]
    # Verbatim ids are returned as given (no end of turn appended) and still tracked.
    verbatim = ScriptedPolicy(tokenizer, lambda c, t: [11, 12, 13] if t == 1 else [c, t])
    [g] = verbatim.generate([[1]], max_new_tokens=50)
    assert (g.ids, g.finish_reason, g.logprobs) == ([11, 12, 13], "length", None)
    [g2] = verbatim.generate([[1, 11, 12, 13, 99]], max_new_tokens=50)
    assert g2.ids == [0, 2]


def test_policy_protocol_and_wrong_batch_size(tokenizer, make_env):
    policy = ScriptedPolicy(tokenizer, janet_script)
    assert isinstance(policy, Policy)

    class Broken:
        def generate(self, prompts, *, max_new_tokens):
            return []

    with pytest.raises(RuntimeError, match="returned 0 generations for 1 prompts"):
        run_episodes(make_env, Broken(), episodes=1, progress=False)


def test_generation_validates_its_fields():
    with pytest.raises(ValueError, match="finish_reason"):
        Generation(ids=[1], finish_reason="eos")
    with pytest.raises(ValueError, match="one per id"):
        Generation(ids=[1, 2], logprobs=[0.0])


def test_importing_rollout_does_not_import_torch():
    code = "import sys, agent_gym.rollout as r; r.Policy; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_prompts_converts_integer_sequences_and_refuses_the_rest():
    """Lists, tuples and integer arrays come back as lists of Python ints; floats are refused, not truncated."""
    from agent_gym.rollout.policy import check_prompts

    out = check_prompts([[1, 2, 3], np.array([4, 5], dtype=np.int32), (6,), np.array([7], dtype=np.uint16)], 4, vocab_size=10)
    assert out == [[1, 2, 3], [4, 5], [6], [7]] and all(type(t) is int for p in out for t in p)
    cases = [
        ([], "every prompt needs at least one token"),
        ([1.5, 2], "prompt ids must be integer token ids, got float64 values such as 1.5"),
        (np.array([2.0, 3.0]), "prompt ids must be integer token ids, got float64 values such as 2.0"),
        ([[1, 2], [3, 4]], "a prompt must be a flat sequence of token ids, got an array of shape (2, 2)"),
        ([1, [2, 3]], "a prompt must be a flat sequence of token ids, got a ragged nested one"),
        ("abc", "a prompt must be a flat sequence of token ids, got an array of shape ()"),
        ([3, -1, 10, 12, 11, 13, 14], "prompt holds ids outside the vocabulary [0, 10): [-1, 10, 12, 11, 13]"),
    ]
    for prompt, message in cases:
        with pytest.raises(ValueError) as excinfo:
            check_prompts([[0], prompt], 4, vocab_size=10)
        assert str(excinfo.value) == message, prompt
    assert check_prompts([[9, -3, 10**6]], 1) == [[9, -3, 10**6]]  # without a vocabulary size the ids are not range-checked
