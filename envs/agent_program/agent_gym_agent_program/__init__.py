"""``AgentR1/AgentProgram-v0``: any agent program that calls an OpenAI-compatible chat API, as an env.

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`. Made with
no arguments it plays the demo: an arithmetic agent with a calculator tool
(:func:`agent_gym_agent_program.demo.calculator_program`); ``program=``, ``grader=`` and ``tasks=`` make it
yours (docs/agent-programs.md).
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/AgentProgram-v0`` (an import string only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "AgentProgram-v0",
        "agent_gym_agent_program.env:AgentProgramEnv",
        description="any agent program over an OpenAI-compatible endpoint; graded on its result (demo: a calculator agent)",
        tools=("calculate",),
        package="agent-r1-gym-agent-program",
        # Its reset and step wait for a program: gymnasium's passive checker would run the first of
        # each in a worker thread (a few per process), where they would queue behind each other.
        env_checker=False,
    )
