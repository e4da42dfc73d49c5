"""EnvRollout(env_workers=N): the envs in Ray workers on a local CPU cluster give the samples envs in process
give (prompt ids, completion ids, env mask, returns, infos), one pool per env id and arguments of the rows,
and the refusals name their fix.

Ray is optional: without it this module is skipped (.ci/ray.sh installs Ray and runs it, after .ci/trl.sh
has installed the adapter).
"""

from __future__ import annotations

import copy

import pytest

try:
    import ray
except ImportError:
    pytest.skip('Ray is not installed: pip install "agent-r1-gym[ray]" (.ci/ray.sh installs it and runs this file)',
                allow_module_level=True)

from _trl_support import CalculatorPolicy, grpo_args  # noqa: E402

from agent_gym_trl import EnvRollout, env_dataset, env_reward  # noqa: E402


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tokenizer):
    from trl import GRPOTrainer

    from agent_gym.models import load_causal_lm

    ds = env_dataset("AgentR1/ArithmeticTool-v0", n=2, env_kwargs={"level": 1, "few_shot": True}, tokenizer=tokenizer)
    return GRPOTrainer(
        model=load_causal_lm("smollm2-135m-instruct"),
        reward_funcs=env_reward,
        args=grpo_args(tmp_path_factory.mktemp("grpo"), max_completion_length=96),
        train_dataset=ds,
        processing_class=tokenizer,
        rollout_func=EnvRollout(),
    )


def mixed_prompts(tokenizer):
    """Two tasks of level 1 and two of level 2, each row twice (a GRPO group): two env arguments."""
    prompts = []
    for level in (1, 2):
        ds = env_dataset("AgentR1/ArithmeticTool-v0", n=2, env_kwargs={"level": level, "few_shot": True}, tokenizer=tokenizer)
        prompts += [p for p in ds["prompt"] for _ in range(2)]
    return prompts


def test_envs_in_ray_workers_give_the_in_process_samples(trainer, tokenizer):
    prompts = mixed_prompts(tokenizer)
    local = EnvRollout(policy=CalculatorPolicy(tokenizer))
    want = local(prompts, trainer)
    assert want["env_return"] == [1.0, 0.0] * 4  # every second episode asks for the wrong sum

    assert not ray.is_initialized()
    remote = EnvRollout(policy=CalculatorPolicy(tokenizer), env_workers=1)  # Ray starts at the first call
    try:
        got = remote(prompts, trainer)
        assert ray.is_initialized()
        # one pool per env arguments, each with a slot for each of its 4 episodes of the batch
        pools = remote._envs.pools()
        assert sorted(key[1] for key in pools) == ['{"few_shot": true, "level": 1}', '{"few_shot": true, "level": 2}']
        assert [(p.num_workers, p.capacity) for p in pools.values()] == [(1, 4), (1, 4)]
        assert all(w["episodes"] == 0 for p in pools.values() for w in p.workers())  # every slot given back
        for key in ("prompt_ids", "completion_ids", "env_mask", "env_return", "env_info", "logprobs"):
            assert got[key] == want[key], key
        assert [len(t.steps) for t in remote.last_trajectories] == [2] * 8 and 0 in got["env_mask"][0]
        for mine, theirs in zip(remote.last_trajectories, local.last_trajectories, strict=True):
            assert (mine.env_id, mine.task_id, mine.messages) == (theirs.env_id, theirs.task_id, theirs.messages)
            assert [s.info for s in mine.steps] == [s.info for s in theirs.steps]
            for key in ("env_kwargs", "tokenizer", "route", "finish_reasons", "truncated_reason"):
                assert mine.metadata[key] == theirs.metadata[key], key
        # a later batch of the same shape plays on the same workers
        again = remote(prompts, trainer)
        assert again["completion_ids"] == want["completion_ids"] and remote._envs.pools() == pools
    finally:
        remote.close()
        local.close()
    assert not ray.is_initialized()  # close() stops the Ray it started


def test_too_few_env_slots_and_a_tokenizer_the_workers_cannot_load_are_refused(trainer, tokenizer):
    prompts = mixed_prompts(tokenizer)[:4]
    with pytest.raises(ValueError, match=r"a batch has 4 episodes of AgentR1/ArithmeticTool-v0 .*hold 2: raise "
                                         r"envs_per_worker to 2 \(or leave it None"):
        EnvRollout(policy=CalculatorPolicy(tokenizer), env_workers=2, envs_per_worker=1)(prompts, trainer)
    unnamed = copy.copy(tokenizer)
    unnamed.name_or_path = "/nonexistent/tokenizer"
    with pytest.raises(ValueError, match=r"name_or_path '/nonexistent/tokenizer' does not load .*pass "
                                         r"EnvRollout\(tokenizer=NAME_OR_PATH\)"):
        EnvRollout(policy=CalculatorPolicy(tokenizer), env_workers=1, tokenizer=unnamed)(prompts, trainer)
    assert not ray.is_initialized()  # refused before any worker started


def test_a_grpo_step_through_trainer_train_with_envs_in_two_ray_workers(tmp_path, tokenizer):
    """The path `train_trl.py --env-workers 2` takes: TRL's own generation backend (no policy=) calls the
    rollout inside trainer.train(), the envs step in 2 Ray workers, and the optimizer step runs on what
    they returned."""
    from trl import GRPOTrainer

    from agent_gym.models import load_causal_lm

    ds = env_dataset("AgentR1/ArithmeticTool-v0", n=2, env_kwargs={"level": 1, "few_shot": True}, tokenizer=tokenizer)
    rollout = EnvRollout(env_workers=2)
    trainer = GRPOTrainer(
        model=load_causal_lm("smollm2-135m-instruct"),
        reward_funcs=env_reward,
        args=grpo_args(tmp_path, max_steps=1, max_completion_length=48),
        train_dataset=ds,
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    assert not ray.is_initialized()
    try:
        result = trainer.train()
        assert result.global_step == 1
        [pool] = rollout._envs.pools().values()
        assert pool.num_workers == 2 and all(w["episodes"] == 0 for w in pool.workers())
        assert len(rollout.last_trajectories) == 4
        assert all(t.env_id == "AgentR1/ArithmeticTool-v0" and t.steps for t in rollout.last_trajectories)
        assert {t.metadata["tokenizer"] for t in rollout.last_trajectories} == {"smollm2-135m-instruct"}
        assert [h for h in trainer.state.log_history if "loss" in h], trainer.state.log_history
    finally:
        rollout.close()
    assert not ray.is_initialized()
