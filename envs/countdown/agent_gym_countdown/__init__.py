"""The Countdown numbers game for agent-r1-gym (``agent_gym_countdown``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`:

- ``AgentR1/Countdown-v0``: one step, the answer is an expression in ``<answer>...</answer>``;
- ``AgentR1/CountdownTool-v0``: several turns with the ``calculate`` tool.
"""

from __future__ import annotations

__all__ = ["register"]

_PACKAGE = "agent-r1-gym-countdown"


def register() -> None:
    """Register ``AgentR1/Countdown-v0`` and ``AgentR1/CountdownTool-v0`` (import strings only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "Countdown-v0",
        "agent_gym_countdown.env:CountdownEnv",
        description="Countdown numbers game, one step; reward 1 for an exact expression in <answer>",
        package=_PACKAGE,
    )
    register_env(
        "CountdownTool-v0",
        "agent_gym_countdown.env:CountdownToolEnv",
        description="Countdown with a calculator tool, up to 6 turns; outcome reward",
        tools=("calculate",),
        package=_PACKAGE,
    )
