"""Rollouts: policies that generate token ids, the episode engine, and drivers that play many episodes.

:func:`play_episode` plays one episode of any env against any async generate function; the batched
driver :func:`run_episodes` (lockstep rounds), :func:`run_episodes_concurrent` / :func:`arun_episodes`
(episodes in flight on an event loop, for server engines), :func:`play_selfplay` (each role of a
multi-agent game) and every trainer adapter call it. The drivers' settings are one :class:`RolloutConfig`.

``import agent_gym.rollout`` does not import torch: :class:`HFPolicy` (transformers) is resolved
on first access.

Example::

    import gymnasium as gym
    import agent_gym
    from agent_gym.rollout import HFPolicy, run_episodes

    policy = HFPolicy()  # the embedded SmolLM2-135M-Instruct, greedy
    result = run_episodes(lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=policy.tokenizer, split="test"),
                          policy, episodes=20, max_new_tokens=256)
    print(result.summary())
"""

from __future__ import annotations

from typing import Any

from agent_gym.rollout.async_runner import arun_episodes, run_episodes_concurrent
from agent_gym.rollout.batcher import Batcher
from agent_gym.rollout.config import RolloutConfig
from agent_gym.rollout.driver import RolloutResult, run_episodes
from agent_gym.rollout.episode import EndEpisode, play_episode
from agent_gym.rollout.policy import AsyncPolicy, Generation, Policy, ScriptedPolicy
from agent_gym.rollout.pool import EnvPool
from agent_gym.rollout.selfplay import RoleBaseline, play_selfplay
from agent_gym.rollout.tree import play_tree, tree_advantages

__all__ = [
    "AsyncPolicy",
    "Batcher",
    "EndEpisode",
    "EnvPool",
    "Generation",
    "HFPolicy",
    "Policy",
    "RoleBaseline",
    "RolloutConfig",
    "RolloutResult",
    "ScriptedPolicy",
    "arun_episodes",
    "play_episode",
    "play_selfplay",
    "play_tree",
    "run_episodes",
    "run_episodes_concurrent",
    "tree_advantages",
]


def __getattr__(name: str) -> Any:
    # PEP 562: HFPolicy's module imports nothing heavy itself, but keeping it out of the eager
    # imports keeps the promise even if that changes.
    if name == "HFPolicy":
        from agent_gym.rollout.hf import HFPolicy

        return HFPolicy
    raise AttributeError(f"module 'agent_gym.rollout' has no attribute {name!r}")
