"""``await env.astep(action)`` on what ``gym.make`` returns, keeping what every wrapper layer does."""

from __future__ import annotations

import asyncio
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded

import agent_gym  # noqa: F401  (registers the envs, installs Wrapper.astep)
from agent_gym.core.async_step import astep
from agent_gym.wrappers import RewardShaping

ENV_ID = "AgentR1/GSM8KTool-v0"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}\n</tool_call>'


def act(env, text: str) -> np.ndarray:
    template = env.unwrapped.template
    return np.asarray(template.encode(text) + template.end_of_turn_ids, dtype=np.int64)


@pytest.fixture()
def make(tokenizer):
    return lambda **kw: gym.make(ENV_ID, tokenizer=tokenizer, split="test", **kw)


def test_astep_on_the_made_env_equals_step(make):
    sync_env, async_env = make(), make()
    assert isinstance(async_env, gym.Wrapper)  # gymnasium's own wrappers are around it
    for env in (sync_env, async_env):
        env.reset(options={"task_id": "test-0"})

    async def play():
        first = await async_env.astep(act(async_env, CALL))
        return first, await async_env.astep(act(async_env, "#### 18"))

    (obs_a, *rest_a), (fin_a, reward_a, term_a, trunc_a, info_a) = asyncio.run(play())
    obs_s, *rest_s = sync_env.step(act(sync_env, CALL))
    fin_s, reward_s, term_s, trunc_s, info_s = sync_env.step(act(sync_env, "#### 18"))
    assert obs_a["prompt_ids"].tolist() == obs_s["prompt_ids"].tolist()
    assert obs_a["messages"][-1] == {"role": "tool", "content": "9", "tool_call_id": "call_0", "name": "calculate"}
    assert fin_a["prompt_ids"].tolist() == fin_s["prompt_ids"].tolist()
    assert (reward_a, term_a, trunc_a) == (reward_s, term_s, trunc_s) == (1.0, True, False)
    assert info_a["tool_calls"] == info_s["tool_calls"] == 1


def test_order_enforcing_still_applies(make):
    env = make()
    with pytest.raises(ResetNeeded):
        asyncio.run(env.astep(act(env, "#### 18")))
    # Reward shaping used to reach past the wrappers (env.unwrapped.astep): now it goes through them.
    shaped = RewardShaping(make())
    with pytest.raises(ResetNeeded):
        asyncio.run(shaped.astep(act(shaped, "#### 18")))


def test_time_limit_truncates_async_steps_like_sync_ones(make):
    env = make(max_episode_steps=1)
    env.reset(options={"task_id": "test-0"})
    _, _, terminated, truncated, info = asyncio.run(env.astep(act(env, CALL)))
    assert (terminated, truncated, info["tool_calls"]) == (False, True, 1)


def test_reward_shaping_over_gym_make_shapes_async_steps(make):
    env = RewardShaping(make(), format_bonus=0.1, tool_use_bonus=0.2)
    env.reset(options={"task_id": "test-0"})

    async def play():
        await env.astep(act(env, CALL))
        return await env.astep(act(env, "#### 17"))

    _, reward, _, _, info = asyncio.run(play())
    assert info["reward_components"] == {"outcome": 0.0, "format": 0.1, "tool_use": 0.2, "tool_error_penalty": 0.0}
    assert reward == pytest.approx(0.3)


def test_gymnasium_transform_wrappers_run_on_the_loop_and_keep_their_effect(make):
    threads: list[int] = []

    class Tagged(gym.ObservationWrapper):
        def observation(self, observation):
            threads.append(threading.get_ident())
            return {**observation, "tag": len(observation["prompt_ids"])}

    class Doubled(gym.RewardWrapper):
        def reward(self, reward):
            return 2 * reward

    env = Doubled(Tagged(make()))
    env.reset(options={"task_id": "test-0"})
    obs, reward, terminated, _, _ = asyncio.run(env.astep(act(env, "#### 18")))
    assert obs["tag"] == len(obs["prompt_ids"])
    assert (reward, terminated) == (2.0, True)
    assert threads == [threading.get_ident()] * 2  # reset and step: the async form, not a worker thread


def test_a_wrapper_that_only_overrides_step_keeps_its_semantics(make):
    """A third-party wrapper with a sync ``step`` and no ``astep``: its step runs (in a thread)."""
    calls: list[int] = []

    class Counting(gym.Wrapper):
        def step(self, action):
            calls.append(threading.get_ident())
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, reward + 5.0, terminated, truncated, {**info, "counted": len(calls)}

    env = Counting(make())
    env.reset(options={"task_id": "test-0"})
    _, reward, _, _, info = asyncio.run(env.astep(act(env, "#### 18")))
    assert (reward, info["counted"]) == (6.0, 1)
    assert calls and calls[0] != threading.get_ident()


def test_an_env_without_astep_is_stepped_in_a_thread():
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    twin = gym.make("CartPole-v1")
    twin.reset(seed=0)
    obs, reward, *_ = asyncio.run(astep(env, 1))
    obs2, reward2, *_ = twin.step(1)
    assert obs.tolist() == obs2.tolist() and reward == reward2


class _WaitingReset(gym.Env):
    """An env whose reset waits (as a remote session or an agent program's does): it has ``areset``."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.threads: list[str] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.threads.append(threading.current_thread().name)
        return 0, {"how": "sync"}

    async def areset(self, *, seed=None, options=None):
        await asyncio.sleep(0)
        return 1, {"how": "async"}

    def step(self, action):
        return 2, 1.0, True, False, {}


def test_areset_awaits_an_env_that_has_one_through_every_wrapper_layer():
    from agent_gym.core.async_step import areset

    env = gym.wrappers.TimeLimit(gym.wrappers.TransformObservation(
        gym.wrappers.common.OrderEnforcing(_WaitingReset()), lambda o: o * 10, gym.spaces.Discrete(30)), max_episode_steps=5)
    with pytest.raises(ResetNeeded):
        env.step(0)
    obs, info = asyncio.run(areset(env, seed=1))
    assert (obs, info) == (10, {"how": "async"})  # awaited below, transformed on the way up
    assert env.unwrapped.threads == []  # the blocking reset never ran
    assert env.step(0)[0] == 20  # OrderEnforcing saw the reset
    assert env._elapsed_steps == 1  # TimeLimit counted from zero


def test_areset_of_an_env_without_one_is_its_plain_reset(make):
    from agent_gym.core.async_step import areset

    env = make()
    obs, info = asyncio.run(areset(env, options={"task_id": "test-0"}))
    assert info["task_id"] == "test-0" and obs["prompt_ids"].size > 0


@pytest.mark.parametrize("faked", ["1.5.0", "2.0.0", "0.29.1", "nightly"])
def test_a_gymnasium_outside_the_tested_range_fails_loudly(monkeypatch, faked):
    """install() (run on ``import agent_gym``) reads ``gymnasium.__version__``; faked here, the check refuses."""
    from agent_gym.core import async_step

    monkeypatch.setattr(gym, "__version__", faked)
    message = (f"agent_gym is tested with gymnasium>=1.0,<1.5 and reads private attributes of its wrappers "
               f"(agent_gym/core/async_step.py), but gymnasium {faked} is installed: pip install 'gymnasium>=1.0,<1.5'")
    with pytest.raises(async_step.UnsupportedGymnasium) as raised:
        async_step.install()
    assert str(raised.value) == message


@pytest.mark.parametrize("faked", ["1.0.0", "1.4.0", "1.4.9rc1"])
def test_a_gymnasium_in_the_tested_range_passes(monkeypatch, faked):
    from agent_gym.core import async_step

    monkeypatch.setattr(gym, "__version__", faked)
    assert async_step.check_version() == faked
    async_step.install()  # idempotent: astep and areset are already there


def test_the_installed_gymnasium_is_in_the_tested_range_and_the_pin_says_the_same():
    import re
    from pathlib import Path

    from agent_gym.core import async_step

    assert async_step.check_version() == gym.__version__
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert re.findall(r'"gymnasium([^"]*)"', pyproject) == [async_step.TESTED_GYMNASIUM]


@pytest.mark.parametrize(
    "version, tested, inside",
    [("1.0.0", ">=1.0,<1.5", True), ("1.4.9rc1", ">=1.0,<1.5", True), ("1.5.0", ">=1.0,<1.5", False),
     ("0.29.1", ">=1.0,<1.5", False), ("0.24.3", ">=0.24,<0.25", True), ("0.25.0", ">=0.24,<0.25", False),
     ("main", ">=0.24,<0.25", False)],
)
def test_one_tested_range_check_serves_gymnasium_and_vllm(version, tested, inside):
    from agent_gym.versions import in_tested_range

    assert in_tested_range(version, tested) is inside


def test_a_malformed_tested_range_is_the_callers_bug():
    from agent_gym.versions import in_tested_range

    with pytest.raises(ValueError, match=r"a tested range reads '>=MAJOR.MINOR,<MAJOR.MINOR', got '<1.5'"):
        in_tested_range("1.0", "<1.5")
