"""The MCPTask-v0 demo server's processes, for the tests that count them (agent loop, export-verl)."""

from __future__ import annotations

from typing import Any


def mcp_demo_servers() -> list[Any]:
    """This process's stdio MCP demo-server processes (psutil)."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("agent_gym_mcp.demo_server" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found
