"""Question answering over generated tables, with pandas in a sandbox (``agent_gym_tableqa``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/TableQA-v0`` (an import string only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "TableQA-v0",
        "agent_gym_tableqa.env:TableQAEnv",
        description="Questions over generated tables (filters, aggregates, arg-max, joins) answered with pandas in a sandbox; up to 6 turns; exact-match reward",
        tools=("python",),
        package="agent-r1-gym-tableqa",
    )
