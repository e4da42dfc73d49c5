"""Opt-in reward shaping: format and tool-use bonuses on top of the outcome reward.

Envs give the outcome reward only. Shaping is explicit: wrap the env, and every bonus is reported as
its own entry of ``info["reward_components"]`` on the final step, so a learning curve can always be
split into "solved the task" and "was paid for form".
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from agent_gym.core.async_step import astep

__all__ = ["RewardShaping"]


class RewardShaping(gym.Wrapper):
    """Adds shaping bonuses to the final step's reward.

    Args:
        env: an agent env (any ``AgentR1/...`` env).
        format_bonus: paid when the final answer is well-formed (``info["format_ok"]``) and no
            tool call in the episode was malformed (``info["format_errors"] == 0``).
        tool_use_bonus: paid when the episode made at least one tool call and every tool call
            succeeded (``tool_calls > 0`` and ``tool_errors == 0``).
        tool_error_penalty: subtracted once per tool error (``info["tool_errors"]``), use >= 0.

    The shaped reward is ``outcome + format + tool_use - penalty``; ``info["reward_components"]``
    gets the keys ``format``, ``tool_use`` and ``tool_error_penalty`` next to ``outcome``.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        format_bonus: float = 0.1,
        tool_use_bonus: float = 0.1,
        tool_error_penalty: float = 0.0,
    ):
        super().__init__(env)
        if tool_error_penalty < 0:
            raise ValueError(f"tool_error_penalty is subtracted; give it as a value >= 0, got {tool_error_penalty}")
        self.format_bonus = float(format_bonus)
        self.tool_use_bonus = float(tool_use_bonus)
        self.tool_error_penalty = float(tool_error_penalty)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return (obs, *self._shape(reward, terminated, truncated, info))

    async def astep(self, action: Any):
        """Async step of the wrapped env, shaped the same way."""
        obs, reward, terminated, truncated, info = await astep(self.env, action)
        return (obs, *self._shape(reward, terminated, truncated, info))

    def _shape(self, reward: SupportsFloat, terminated: bool, truncated: bool, info: dict[str, Any]):
        if not (terminated or truncated):
            return reward, terminated, truncated, info
        components = dict(info.get("reward_components") or {"outcome": reward})
        components["format"] = (
            self.format_bonus if info.get("format_ok") and info.get("format_errors", 0) == 0 else 0.0
        )
        tool_calls, tool_errors = info.get("tool_calls", 0), info.get("tool_errors", 0)
        components["tool_use"] = self.tool_use_bonus if tool_calls > 0 and tool_errors == 0 else 0.0
        components["tool_error_penalty"] = -self.tool_error_penalty * tool_errors
        info = {**info, "reward_components": components}
        return float(sum(components.values())), terminated, truncated, info
