"""Arithmetic problems with difficulty levels for agent-r1-gym (``agent_gym_arithmetic``).

The smallest models get some of these right, so a learning curve can start above zero (GSM8K is far
too hard for a 135M model). Registered through the ``agent_gym.envs`` entry point :func:`register`.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/Arithmetic-v0`` and ``AgentR1/ArithmeticTool-v0``."""
    from agent_gym.registry import register_env

    register_env(
        "Arithmetic-v0",
        "agent_gym_arithmetic.env:ArithmeticEnv",
        description="generated arithmetic (levels 1-4), one step; reward 1 for the exact final number",
        package="agent-r1-gym-arithmetic",
    )
    register_env(
        "ArithmeticTool-v0",
        "agent_gym_arithmetic.env:ArithmeticToolEnv",
        description="generated arithmetic with a calculator tool, up to 3 turns; outcome reward",
        tools=("calculate",),
        package="agent-r1-gym-arithmetic",
    )
