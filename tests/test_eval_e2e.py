"""End to end on CPU with the real default model (smollm2-135m-tool: SmolLM2-135M-Instruct with the
packaged tool-use LoRA merged in): ``agent-gym eval`` and :class:`HFPolicy`."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.cli.main import main
from agent_gym.trajectory import read_trajectories

pytestmark = pytest.mark.slow

ENV_ID = "AgentR1/GSM8KTool-v0"


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    """Decode with one intra-op thread while these tests run.

    CI runners and dev boxes here have 2 cores shared with other jobs; on an oversubscribed CPU
    torch's intra-op threads spin-wait on each other and greedy decoding got ~8x slower (3 x 32
    tokens: 105 s with 2 threads, 12.5 s with 1, same load). One thread keeps the runtime bounded.
    """
    import torch

    before = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        # eval picks one thread per physical core unless OMP_NUM_THREADS is set (agent_gym.cpu).
        mp.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        yield
    torch.set_num_threads(before)


def test_eval_three_real_problems_end_to_end(tokenizer, tmp_path, capsys):
    out = tmp_path / "eval.jsonl"
    argv = [
        "eval", ENV_ID, "--episodes", "3", "--split", "test", "--max-new-tokens", "128",
        "--device", "cpu", "--out", str(out), "--json", "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    import torch

    assert torch.get_num_threads() == 1  # the OMP_NUM_THREADS of one_cpu_thread won over one per core
    summary = json.loads(capsys.readouterr().out)
    assert set(summary) >= {
        "env_id", "model", "trajectories", "episodes", "accuracy", "mean_reward", "mean_turns", "tool_calls",
        "tool_calls_per_episode", "tool_errors", "format_errors", "generated_tokens", "wall_seconds",
        "tokens_per_second",
    }  # fmt: skip
    assert summary["env_id"] == ENV_ID
    assert summary["model"] == "smollm2-135m-tool"
    assert summary["episodes"] == 3
    assert summary["trajectories"] == str(out)
    assert 0.0 <= summary["accuracy"] <= 1.0

    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 3
    assert sorted(t.seed for t in trajectories) == [0, 1, 2]
    env = gym.make(ENV_ID, tokenizer=tokenizer, split="test")
    generated = 0
    for traj in trajectories:
        obs, info = env.reset(seed=traj.seed)
        assert traj.task_id == info["task_id"]
        assert traj.steps[0].prompt_ids == obs["prompt_ids"].tolist()
        assert traj.steps[-1].terminated or traj.steps[-1].truncated
        for step in traj.steps:
            assert step.response_ids
            assert len(step.response_ids) <= 128
            assert step.response_logprobs is not None and len(step.response_logprobs) == len(step.response_ids)
            generated += len(step.response_ids)
        for prev, step in zip(traj.steps, traj.steps[1:]):
            head = prev.prompt_ids + prev.response_ids
            assert step.prompt_ids[: len(head)] == head
    assert summary["generated_tokens"] == generated
    assert summary["mean_turns"] == pytest.approx(sum(t.num_turns for t in trajectories) / 3)


@pytest.fixture(scope="module")
def policy():
    from agent_gym.rollout import HFPolicy

    return HFPolicy(device="cpu", batch_size=4)


def chat_prompt(policy, text: str) -> list[int]:
    return policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )["input_ids"]


def env_prompt(policy, task_id: str) -> list[int]:
    env = gym.make(ENV_ID, tokenizer=policy.tokenizer, split="test")
    return env.reset(options={"task_id": task_id})[0]["prompt_ids"].tolist()


def test_hf_policy_greedy_is_deterministic_and_stops_at_end_of_turn(policy):
    # A GSM8KTool prompt, what the default model was tuned on: its first turn is a calculator call of
    # about 32 tokens. (On a bare chat question such as "What is 2+3?" it repeats "2+3=5" for 78 tokens.)
    prompt = env_prompt(policy, "test-1121")
    first, second = policy.generate([prompt, prompt], max_new_tokens=64)
    [again] = policy.generate([prompt], max_new_tokens=64)
    assert first.ids == second.ids == again.ids
    assert policy.stop_ids == [policy.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    for g in (first, again):
        assert g.finish_reason == "stop"
        assert g.ids[-1] in policy.stop_ids
        assert not any(t in policy.stop_ids for t in g.ids[:-1])
        assert len(g.logprobs) == len(g.ids)
        assert all(lp <= 0.0 for lp in g.logprobs)


def test_hf_policy_length_limit_and_mixed_batch(policy):
    short = chat_prompt(policy, "What is 2+3?")
    long = chat_prompt(policy, "Write a long poem about the sea, the sky and the mountains, with many verses.")
    results = policy.generate([long, short, long], max_new_tokens=4)
    assert [len(g.ids) for g in results] == [4, 4, 4]
    assert [g.finish_reason for g in results] == ["length"] * 3
    assert results[0].ids == results[2].ids
    for g in results:
        assert len(g.logprobs) == 4 and all(lp <= 0.0 for lp in g.logprobs)
    before = policy.generated_tokens
    policy.generate([short], max_new_tokens=2)
    assert policy.generated_tokens == before + 2


def test_the_default_model_calls_the_calculator(policy):
    """One greedy GSM8KTool episode (test-1121, what seed 0 picks) with the default model: it calls the
    calculator, and every call parses and runs. (Seeds 0-7 all made 3-4 calls, no tool or format
    errors, the same turns with batches of 1 and of 4.)"""
    from agent_gym.rollout import run_episodes

    env = gym.make(ENV_ID, tokenizer=policy.tokenizer, split="test")
    result = run_episodes(env, policy, task_ids=["test-1121"], batch_size=1, max_new_tokens=256, progress=False)
    [traj] = result.trajectories
    info = traj.final_info
    assert info["tool_calls"] >= 1
    assert info["tool_errors"] == 0 and info["format_errors"] == 0
    assert result.summary()["tool_calls"] == info["tool_calls"]
    first = policy.tokenizer.decode(traj.steps[0].response_ids)
    assert first.startswith('<tool_call>\n{"name": "calculate", "arguments": {"expression": ')


def test_eval_in_order_plays_the_first_tasks_of_the_split_once_each(tmp_path, capsys):
    out = tmp_path / "eval.jsonl"
    argv = [
        "eval", ENV_ID, "--episodes", "3", "--split", "test", "--in-order", "--max-new-tokens", "8",
        "--device", "cpu", "--out", str(out), "--json", "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 3
    trajectories = sorted(read_trajectories(out), key=lambda t: t.seed)
    # The tasks `agent-gym export-verl --split test --limit 3` writes, not three seeded draws.
    assert [t.task_id for t in trajectories] == ["test-0", "test-1", "test-2"]
    assert all(t.metadata["in_order"] is True for t in trajectories)
