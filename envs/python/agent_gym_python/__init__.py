"""GSM8K with a sandboxed Python interpreter for agent-r1-gym (``agent_gym_python``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/GSM8KPython-v0`` (an import string only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "GSM8KPython-v0",
        "agent_gym_python.env:GSM8KPythonEnv",
        description="GSM8K with a sandboxed Python interpreter (tool-integrated reasoning), up to 5 turns; outcome reward",
        tools=("python",),
        package="agent-r1-gym-python",
    )
