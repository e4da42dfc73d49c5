"""GSM8K grade-school math environments for agent-r1-gym (``agent_gym_gsm8k``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/GSM8K-v0``, ``AgentR1/GSM8KTool-v0`` and the task source ``"gsm8k"`` (which
    GSM8KPython plays) (import strings only: cheap)."""
    from agent_gym.core.tasks import register_task_source
    from agent_gym.registry import register_env

    register_task_source("gsm8k", "agent_gym_gsm8k.env:GSM8KTasks", package="agent-r1-gym-gsm8k")

    register_env(
        "GSM8K-v0",
        "agent_gym_gsm8k.env:GSM8KEnv",
        description="GSM8K grade-school math, one step; reward 1 for the right number after ####",
        package="agent-r1-gym-gsm8k",
    )
    register_env(
        "GSM8KTool-v0",
        "agent_gym_gsm8k.env:GSM8KToolEnv",
        description="GSM8K with a calculator tool, up to 5 turns; outcome reward",
        tools=("calculate",),
        package="agent-r1-gym-gsm8k",
    )
