"""RayEnvPool: GSM8KTool envs in Ray workers on a local CPU cluster play the episodes an env in process plays,
and a worker that dies fails its episode with a clear error, is replaced, and nothing hangs.

One local Ray cluster (2 CPUs) and one pool of 2 workers for the whole module: Ray and each worker take
seconds to start on a small machine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import agent_gym  # noqa: E402,F401  (registers the envs)
from agent_gym.rollout import Generation, ScriptedPolicy, play_episode  # noqa: E402
from agent_gym.rollout.async_runner import arun_episodes  # noqa: E402
from agent_gym.rollout.ray_pool import EnvWorkerDied, RayEnvPool, _Slots, import_ray  # noqa: E402
from agent_gym.tools import HermesParser  # noqa: E402

ENV_ID = "AgentR1/GSM8KTool-v0"
TASKS = ["test-0", "test-1", "test-2", "test-3"]
#: Every async wait of a test ends within this: a hang fails the test instead of the CI job.
TIMEOUT_S = 120


def calc(expression: str) -> str:
    return HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": expression}}])


# Three turns: two calculator calls, then an answer (right for test-0, wrong for the others).
SCRIPT = {1: calc("16 - 3 - 4"), 2: calc("9 * 2"), 3: "She sells 9 eggs for $2 each.\n#### 18"}


def script(conversation: int, turn: int) -> str:
    return SCRIPT[turn]


@pytest.fixture(scope="module")
def pool():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with RayEnvPool(ENV_ID, num_workers=2, envs_per_worker=2, env_kwargs={"split": "test"}, start_timeout_s=TIMEOUT_S) as p:
            yield p
    finally:
        ray.shutdown()


def play(envs, tokenizer, **kwargs):
    async def main():
        return await asyncio.wait_for(
            arun_episodes(envs, ScriptedPolicy(tokenizer, script), task_ids=TASKS, progress=False, generate_in_thread=False, **kwargs),
            TIMEOUT_S,
        )

    return asyncio.run(main())


def test_same_trajectories_as_in_process(pool, tokenizer):
    local = play(lambda: gym.make(ENV_ID, tokenizer=tokenizer, split="test"), tokenizer, concurrency=4)
    remote = play(pool.make_env, tokenizer, concurrency=4)
    assert [t.reward for t in local.trajectories] == [1.0, 0.0, 0.0, 0.0]
    for mine, theirs in zip(remote.trajectories, local.trajectories, strict=True):
        assert (mine.env_id, mine.task_id, mine.seed, mine.reward) == (theirs.env_id, theirs.task_id, theirs.seed, theirs.reward)
        assert mine.messages == theirs.messages
        assert len(mine.steps) == len(theirs.steps) == 3
        for a, b in zip(mine.steps, theirs.steps):
            assert (a.prompt_ids, a.response_ids) == (b.prompt_ids, b.response_ids)
            assert (a.reward, a.terminated, a.truncated, a.new_segment) == (b.reward, b.terminated, b.truncated, b.new_segment)
            assert a.info == b.info
        for key in ("env_kwargs", "tokenizer", "truncated_reason", "finish_reasons"):
            assert mine.metadata[key] == theirs.metadata[key], key
    assert [w["episodes"] for w in pool.workers()] == [0, 0]  # every slot given back


def test_the_steps_of_one_loop_turn_go_to_a_worker_in_one_ray_call(pool, tokenizer):
    before = [ray.get(pool.actor(i).stats.remote()) for i in range(2)]
    # the scripted policy answers a whole round at once, so the 4 episodes step in the same loop turns
    play(pool.make_env, tokenizer, concurrency=4, max_batch_size=4)
    after = [ray.get(pool.actor(i).stats.remote()) for i in range(2)]
    env_calls = sum(a["env_calls"] - b["env_calls"] for a, b in zip(after, before))
    ray_calls = sum(a["ray_calls"] - b["ray_calls"] for a, b in zip(after, before))
    assert env_calls == 4 * (1 + 3)  # a reset and three steps per episode
    # 2 episodes per worker: their reset and each of their 3 steps share a call (8 calls, not 16)
    assert ray_calls == 2 * (1 + 3)


def test_sync_api_and_spaces(pool, tokenizer):
    local = gym.make(ENV_ID, tokenizer=tokenizer, split="test")
    with pool.env() as env:
        assert env.unwrapped is env and env.spec.id == ENV_ID and env.action_space == local.action_space
        obs, info = env.reset(seed=3, options={"task_id": "test-0"})
        want, want_info = local.reset(seed=3, options={"task_id": "test-0"})
        assert obs["prompt_ids"].dtype == np.int64 and obs["prompt_ids"].flags.writeable
        assert np.array_equal(obs["prompt_ids"], want["prompt_ids"]) and info == want_info
        assert env.worker_index is not None and "env worker" in env.worker
        action = ScriptedPolicy(tokenizer, script).generate([want["prompt_ids"].tolist()], max_new_tokens=256)[0].ids
        step = env.step(action)
        assert step[1:] == local.step(action)[1:]
        env.close()  # mid-episode: the slot goes back
        assert sum(w["episodes"] for w in pool.workers()) == 0
        with pytest.raises(RuntimeError, match="closed"):
            env.reset()
    fresh = pool.env()
    with pytest.raises(gym.error.ResetNeeded, match="reset first"):
        fresh.step(action)


@pytest.mark.parametrize("kill", ["ray.kill", "os.kill"])
def test_a_dead_worker_fails_its_episode_and_is_replaced(pool, tokenizer, kill):
    replaced = pool.replaced
    policy = ScriptedPolicy(tokenizer, script)
    env = pool.env()
    victim: dict[str, int] = {}

    async def generate(prompt: list[int]) -> Generation:
        [generation] = policy.generate([prompt], max_new_tokens=256)
        if len(victim) == 0 and len(policy.outputs) == 2:  # the second turn: its step will find no worker
            index = env.worker_index
            victim["index"] = index
            if kill == "ray.kill":
                ray.kill(pool.actor(index))
            else:
                os.kill(pool.workers()[index]["pid"], signal.SIGKILL)
        return generation

    async def doomed():
        return await asyncio.wait_for(play_episode(env, generate, task_id="test-0"), TIMEOUT_S)

    with pytest.raises(EnvWorkerDied, match=rf"env worker \d of 2 \(pid \d+ on .+\) died during step of {ENV_ID}") as err:
        asyncio.run(doomed())
    assert f"env worker {victim['index']} of 2" in str(err.value)
    assert pool.replaced == replaced + 1
    assert pool.workers()[victim["index"]]["generation"] >= 1
    # The next episodes run, on the replacement too (4 episodes, 2 slots per worker).
    result = play(pool.make_env, tokenizer, concurrency=4)
    assert [t.reward for t in result.trajectories] == [1.0, 0.0, 0.0, 0.0]
    assert [w["episodes"] for w in pool.workers()] == [0, 0]


@pytest.mark.slow
def test_eval_with_env_workers_records_what_an_env_in_process_replays(pool, tmp_path, monkeypatch):
    """``agent-gym eval --env-workers 2`` with the real model: every recorded episode replays exactly
    in process (same prompt ids, rewards, info)."""
    import json

    import agent_gym.rollout.ray_pool as ray_pool
    from agent_gym.cli.main import main

    monkeypatch.setitem(ray_pool.DEFAULT_WORKER_OPTIONS, "num_cpus", 0)  # the module's pool holds both CPUs
    out = tmp_path / "eval.jsonl"
    argv = ["eval", ENV_ID, "--episodes", "2", "--batch-size", "2", "--max-new-tokens", "48", "--in-order",
            "--env-workers", "2", "--out", str(out), "--json", "--no-progress"]
    assert main(argv) == 0
    reports = agent_gym.replay(out)
    assert len(reports) == 2 and all(r.matched for r in reports), [r.line() for r in reports]
    assert [json.loads(line)["task_id"] for line in out.read_text().splitlines()] == ["test-0", "test-1"]


def test_slots_least_loaded_ties_in_turn_and_bounded():
    slots = _Slots(workers=3, per_worker=2)
    taken = [slots.take() for _ in range(3)]
    assert sorted(taken) == [0, 1, 2]  # one each before any gets a second
    taken += [slots.take() for _ in range(3)]
    assert sorted(taken) == [0, 0, 1, 1, 2, 2]

    async def waits() -> int:
        waiter = asyncio.ensure_future(slots.atake())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # all 6 slots taken: the 7th episode waits...
        slots.give(1)
        return await asyncio.wait_for(waiter, 5)  # ...for the first slot given back

    assert asyncio.run(waits()) == 1


def test_tokenizer_goes_by_name():
    with pytest.raises(TypeError, match="name_or_path"):
        RayEnvPool(ENV_ID, tokenizer=object())  # type: ignore[arg-type]


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r'pip install "agent-r1-gym\[ray\]"'):
        import_ray()


def test_nothing_else_imports_ray():
    code = "import sys, agent_gym, agent_gym.rollout, agent_gym.rollout.ray_pool, agent_gym.cli.main; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ray_env_pools_keep_the_pool_protocol_per_env_kind(pool, tokenizer):
    """RayEnvPools is the env pool protocol on Ray, as EnvPool is in process: reserve sizes a kind's workers
    to the episodes a batch plays at once (remade only when too small), lease gives an episode its proxy,
    and an episode that raises has its env closed in the worker instead of kept."""
    from agent_gym.rollout.pool import EnvPool, EnvPoolProtocol
    from agent_gym.rollout.ray_pool import RayEnvPools

    # num_cpus 0: the module's pool holds both CPUs of the test cluster, and these workers only wait
    pools = RayEnvPools(num_workers=1, tokenizer=None, worker_options={"num_cpus": 0})
    assert isinstance(pools, EnvPoolProtocol) and isinstance(EnvPool(), EnvPoolProtocol)
    try:
        with pytest.raises(KeyError, match=r"no env workers for AgentR1/GSM8KTool-v0 \{\"split\": \"test\"\}: reserve"):
            pools.pool(ENV_ID, {"split": "test"})
        pools.reserve(ENV_ID, {"split": "test"}, 2)
        first = pools.pool(ENV_ID, {"split": "test"})
        assert (first.num_workers, first.capacity) == (1, 2)
        pools.reserve(ENV_ID, {"split": "test"}, 1)
        assert pools.pool(ENV_ID, {"split": "test"}) is first  # big enough: kept
        pools.reserve(ENV_ID, {"split": "test"}, 3)
        grown = pools.pool(ENV_ID, {"split": "test"})
        assert grown is not first and grown.capacity == 3 and list(pools.pools()) == [(ENV_ID, '{"split": "test"}')]

        def envs_in_worker():
            return ray.get(grown.actor(0).stats.remote(), timeout=TIMEOUT_S)["envs"]

        assert envs_in_worker() == 1  # the one a worker makes as it starts
        with pools.lease(ENV_ID, {"split": "test"}) as env:
            obs, _ = env.reset(options={"task_id": "test-0"})
        assert envs_in_worker() == 1  # kept for the next episode
        with pytest.raises(RuntimeError, match="the episode failed"):
            with pools.lease(ENV_ID, {"split": "test"}) as env:
                env.reset(options={"task_id": "test-0"})
                raise RuntimeError("the episode failed")
        for _ in range(100):  # the release is fire and forget: the worker settles it a moment later
            if envs_in_worker() == 0:
                break
            time.sleep(0.05)
        assert envs_in_worker() == 0  # closed in the worker: its state is unknown
    finally:
        pools.close()
    assert pools.pools() == {} and ray.is_initialized()  # the Ray it did not start stays up
