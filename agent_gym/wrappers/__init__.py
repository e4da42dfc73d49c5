"""Wrappers for agent envs (opt-in reward shaping, ...)."""

from agent_gym.wrappers.shaping import RewardShaping

__all__ = ["RewardShaping"]
