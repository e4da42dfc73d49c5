"""``AgentR1/MCPTask-v0``: an MCP tool task without code (``agent_gym_mcp``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`. Made
with no arguments it plays the packaged demo: warehouse questions answered with the ``stock`` and
``price`` tools of :mod:`agent_gym_mcp.demo_server`; ``tasks=`` and ``mcp_servers=`` make it yours.
"""

from __future__ import annotations

__all__ = ["DEMO_TASKS", "demo_servers", "register"]


def register() -> None:
    """Register ``AgentR1/MCPTask-v0`` (an import string only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "MCPTask-v0",
        "agent_gym_mcp.env:MCPTaskEnv",
        description="tasks from a JSONL file, tools from MCP servers; exact-match or custom grader (demo: a warehouse)",
        tools=("stock", "price"),
        package="agent-r1-gym-mcp",
    )


def __getattr__(name: str):
    # The demo's defaults, importable from the package without importing the env (and gymnasium,
    # transformers) on ``import agent_gym_mcp``.
    if name in ("DEMO_TASKS", "demo_servers"):
        from agent_gym_mcp import env

        return getattr(env, name)
    raise AttributeError(f"module 'agent_gym_mcp' has no attribute {name!r}")
