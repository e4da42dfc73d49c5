"""EnvRollout called as GRPOTrainer calls it, on a real (untrained) trainer: budgets, mixed envs, metrics,
refusals, and the padded rounds of collective generation backends."""

from __future__ import annotations

import asyncio
import json

import pytest
from _trl_support import CalculatorPolicy, expected_sample, grpo_args

from agent_gym.rollout.policy import Generation, ScriptedPolicy
from agent_gym_trl import EnvRollout, env_dataset, env_reward
from agent_gym_trl.rollout import _Backend, _cut, _Rounds


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tokenizer):
    from trl import GRPOTrainer

    from agent_gym.models import load_causal_lm

    ds = env_dataset("AgentR1/Arithmetic-v0", n=4, env_kwargs={"level": 1}, tokenizer=tokenizer)
    return GRPOTrainer(
        model=load_causal_lm("smollm2-135m-instruct"),
        reward_funcs=env_reward,
        args=grpo_args(tmp_path_factory.mktemp("grpo"), max_completion_length=64),
        train_dataset=ds,
        processing_class=tokenizer,
        rollout_func=EnvRollout(),
    )


def tool_prompts(tokenizer, n=2, repeat=2):
    ds = env_dataset("AgentR1/ArithmeticTool-v0", n=n, env_kwargs={"level": 1, "few_shot": True}, tokenizer=tokenizer)
    return [p for p in ds["prompt"] for _ in range(repeat)]  # as TRL's sampler repeats each row


def test_multi_turn_samples_are_the_env_contexts(trainer, tokenizer):
    contexts = {}
    rollout = EnvRollout(policy=CalculatorPolicy(tokenizer), on_episode=lambda t, env: contexts.setdefault(t.id, list(env.unwrapped.context.ids)))
    prompts = tool_prompts(tokenizer)
    out = rollout(prompts, trainer)

    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "env_return", "env_info"}
    assert out["logprobs"] is None  # the scripted policy reports none
    trajectories = rollout.last_trajectories
    assert [t.task_id for t in trajectories] == [json.loads(p[-1]["agent_gym"])["task_id"] for p in prompts]
    for k, t in enumerate(trajectories):
        prompt, completion, mask = expected_sample(t)
        assert (out["prompt_ids"][k], out["completion_ids"][k], out["env_mask"][k]) == (prompt, completion, mask)
        assert prompt + completion == contexts[t.id]  # token for token the env's final context
        assert len(t.steps) == 2 and 0 in mask  # a tool call, then the env's reply (masked), then the answer
        assert out["env_return"][k] == t.return_ == sum(s.reward for s in t.steps)
        assert out["env_info"][k]["tool_calls"] == 1
    assert out["env_return"] == [1.0, 0.0, 1.0, 0.0]  # every second episode asked for the wrong sum


def test_the_completion_budget_stops_an_episode(trainer, tokenizer):
    # The tool call takes about 31 ids and the env's reply 12: a budget of 40 leaves the answer no room.
    rollout = EnvRollout(policy=CalculatorPolicy(tokenizer), max_completion_tokens=40)
    out = rollout(tool_prompts(tokenizer, n=1, repeat=1), trainer)
    [t] = rollout.last_trajectories
    assert t.metadata["truncated_reason"] == "max_completion_tokens"
    assert len(out["completion_ids"][0]) == 40  # the env's reply fills the budget, masked out
    context = t.steps[-1].prompt_ids + t.steps[-1].response_ids + t.tail_ids
    assert out["prompt_ids"][0] + out["completion_ids"][0] == context[: len(out["prompt_ids"][0]) + 40]
    assert out["env_mask"][0] == [1] * len(t.steps[0].response_ids) + [0] * (40 - len(t.steps[0].response_ids))
    assert out["env_return"] == [0.0]


def test_one_batch_mixes_envs_and_logs_each_envs_metrics(trainer, tokenizer):
    import datasets

    one = env_dataset("AgentR1/Arithmetic-v0", n=1, env_kwargs={"level": 1}, tokenizer=tokenizer)
    prompts = list(datasets.concatenate_datasets([one, one])["prompt"][:1]) + tool_prompts(tokenizer, n=1, repeat=1)

    def script(conversation, turn):
        return "#### 0"  # a final answer on turn 1 in both envs

    trainer._pending_metrics.clear()
    rollout = EnvRollout(policy=ScriptedPolicy(tokenizer, script))
    out = rollout(prompts, trainer)
    assert [t.env_id for t in rollout.last_trajectories] == ["AgentR1/Arithmetic-v0", "AgentR1/ArithmeticTool-v0"]
    assert out["env_mask"] == [[1] * len(ids) for ids in out["completion_ids"]]  # single turns: no env ids
    metrics = dict(trainer._pending_metrics)
    assert metrics["env/turns"] == [1.0] and metrics["env/tool_calls"] == [0.0]
    assert metrics["env/AgentR1/Arithmetic-v0/correct"] == [0.0]
    assert "env/AgentR1/ArithmeticTool-v0/return" in metrics
    trainer._pending_metrics.clear()


def test_an_env_that_rewrites_its_context_is_refused(trainer, tokenizer):
    ds = env_dataset("AgentR1/FrozenLake-v0", n=1, env_kwargs={"context": "board"}, tokenizer=tokenizer)
    rollout = EnvRollout(policy=ScriptedPolicy(tokenizer, lambda c, t: "<action>up</action>"))
    with pytest.raises(ValueError, match="rewrote its context.*TRL trains one sequence per sample"):
        rollout(list(ds["prompt"]), trainer)


def test_trl_backend_rounds_and_stop_ids(trainer, tokenizer):
    # TRL's own generation (transformers, the trainer's model): one call per round of turns.
    rollout = EnvRollout()
    ds = env_dataset("AgentR1/Arithmetic-v0", n=2, env_kwargs={"level": 1}, tokenizer=tokenizer)
    out = rollout(list(ds["prompt"]), trainer)
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for ids, t in zip(out["completion_ids"], rollout.last_trajectories):
        assert ids == t.steps[0].response_ids and 0 < len(ids) <= 64
        assert (ids[-1] == eot) == (t.metadata["finish_reasons"] == ["stop"])
        assert eot not in ids[:-1]


def test_reward_function_needs_the_rollout():
    assert env_reward(completions=[None, None], env_return=[1, 0.5]) == [1.0, 0.5]
    with pytest.raises(ValueError, match="rollout_func=agent_gym_trl.EnvRollout"):
        env_reward(completions=[None])


def test_cut_keeps_the_first_end_of_turn_and_the_budget():
    g = Generation(ids=[5, 6, 2, 7, 8], logprobs=[-1.0, -2.0, -3.0, -4.0, -5.0], finish_reason="length")
    assert _cut(g, {2}, 10) == Generation([5, 6, 2], [-1.0, -2.0, -3.0], "stop")
    assert _cut(g, {2}, 2) == Generation([5, 6], [-1.0, -2.0], "length")
    assert _cut(g, {9}, 10) is g


class _PeerBackend(_Backend):
    """A collective backend whose other process holds the given round sizes (the other process is the
    boundary a single-process test cannot reach: it stands in for accelerate's gather)."""

    collective = True

    def __init__(self, peer_rounds):
        self.peer_rounds = list(peer_rounds)
        self.batches = []

    def round_size(self, local):
        return max(local, self.peer_rounds.pop(0) if self.peer_rounds else 0)

    def generate(self, prompts):
        self.batches.append([list(p) for p in prompts])
        return [Generation([7], None, "length") for _ in prompts]


def test_collective_rounds_pad_and_outlive_the_local_episodes():
    backend = _PeerBackend([3, 3, 2])
    rounds = _Rounds(backend, live=2)

    async def episode(turns, first):
        for k in range(turns):
            await rounds.generate([first, k])
        rounds.finished()

    async def main():
        runner = asyncio.ensure_future(rounds.run())
        await asyncio.gather(episode(2, 11), episode(1, 12))
        await runner

    asyncio.run(main())
    # Round 1: both episodes + one dummy; round 2: the longer one + two dummies; round 3 (the peer's last):
    # only dummies; then every process is done.
    assert backend.batches == [[[11, 0], [12, 0], [11]], [[11, 1], [11], [11]], [[11], [11]]]


def test_the_tested_range_is_the_declared_one():
    import tomllib
    from pathlib import Path

    from agent_gym_trl import TESTED_TRL

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert f"trl{TESTED_TRL}" in project["dependencies"]


class _FailingBackend(_Backend):
    """Fails on its second round (a generation server that went away, say)."""

    def __init__(self):
        self.calls = 0

    def generate(self, prompts):
        self.calls += 1
        if self.calls == 2:
            raise ConnectionError("generation server went away")
        return [Generation([7, 2], None, "stop") for _ in prompts]


def test_a_backend_failure_fails_the_rollout_instead_of_hanging():
    backend = _FailingBackend()
    rounds = _Rounds(backend, live=2)

    async def episode(first, pause):
        await rounds.generate([first])
        await asyncio.sleep(pause)  # an env step that takes a while: the round waits for it
        await rounds.generate([first, 1])
        rounds.finished()

    async def main():
        runner = asyncio.ensure_future(rounds.run())
        results = await asyncio.gather(episode(1, 0.0), episode(2, 0.05), return_exceptions=True)
        with pytest.raises(ConnectionError):
            await runner
        return results

    results = asyncio.run(asyncio.wait_for(main(), 10))
    assert [type(r) for r in results] == [ConnectionError, ConnectionError]


def test_env_workers_without_ray_name_the_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ImportError, match=r'pip install "agent-r1-gym\[ray\]"'):
        EnvRollout(env_workers=2)
    with pytest.raises(ValueError, match="envs_per_worker and ray_address go with env_workers=N"):
        EnvRollout(envs_per_worker=4)
