"""EnvPool, the in-process implementation of the env pool protocol: an env made once per kind and handed
to the next episode of that kind, closed instead of kept when its episode raises."""

from __future__ import annotations

import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.rollout.pool import EnvPool, EnvPoolProtocol


def test_envs_are_reused_per_kind_and_a_failed_episode_closes_its_env(tokenizer):
    pool = EnvPool(tokenizer)
    assert isinstance(pool, EnvPoolProtocol)
    pool.reserve("AgentR1/ArithmeticTool-v0", {"level": 1}, 64)  # in process: envs are made on demand
    assert pool.made == 0
    with pool.lease("AgentR1/ArithmeticTool-v0", {"level": 1}) as env:
        env.reset(seed=0)
    with pool.lease("AgentR1/ArithmeticTool-v0", {"level": 1}) as again:
        assert again is env  # the idle env of the same kind
    with pool.lease("AgentR1/ArithmeticTool-v0", {"level": 2}) as other:
        assert other is not env  # another kind: its own env
    assert pool.made == 2 and pool.idle() == 2
    with pytest.raises(ValueError, match="bad episode"):
        with pool.lease("AgentR1/ArithmeticTool-v0", {"level": 1}) as env:
            raise ValueError("bad episode")
    assert pool.idle() == 1  # the failed episode's env was closed, not kept
    with pool.lease("AgentR1/ArithmeticTool-v0", {"level": 1}) as fresh:
        assert fresh is not env and pool.made == 3
    pool.close()
    assert pool.idle() == 0
