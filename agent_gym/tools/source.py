"""Tool sources: tools that come with a lifecycle, plugged into any env through one interface.

A plain :class:`~agent_gym.tools.Tool` is offered as it is (``tools=[...]``). A :class:`ToolSource` brings
its tools and is told where the episodes begin and end (``tool_sources=[...]``): it may hold sessions,
connections or processes per episode, say why an episode cannot be snapshotted, and release everything
when the env closes. ``AgentEnv`` offers a source's tools after its own ``tools``, and drives every
source through this protocol alone, in the order given.

The MCP servers of ``mcp_servers=[...]`` are one such source (:class:`agent_gym.tools.mcp.MCPToolset`):
:func:`collect_sources` makes it, importing the MCP SDK only then. The protocol lives in ``tools``
because the core, which uses it, sits above ``tools`` in the layers (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agent_gym.tools.base import Tool
from agent_gym.tools.parsing import ToolCallParser

__all__ = ["ToolSource", "collect_sources"]


@runtime_checkable
class ToolSource(Protocol):
    """Tools with a lifecycle. Every method is called by the env that holds the source, never concurrently."""

    @property
    def tools(self) -> Sequence[Tool]:
        """The tools offered, fixed when the source is made (the env's tool-call parser is built for them)."""
        ...

    def start_episode(self) -> None:
        """An episode begins (``reset``); the previous one, if any, has ended."""
        ...

    def end_episode(self) -> None:
        """The episode ended (terminated, truncated or invalid); a stateful source starts fresh next time."""
        ...

    def fork_blocker(self) -> str | None:
        """Why an episode using these tools cannot be snapshotted (``None``: it can), naming what to change.
        Forks are made with the env's arguments, so they share a source passed as an object: one that
        keeps per-episode state must refuse."""
        ...

    def close(self) -> None:
        """Release what the source holds; an env holding it is closing (each env that shares it closes
        it once), maybe before any episode."""
        ...


def collect_sources(
    sources: Sequence[ToolSource],
    *,
    mcp_servers: Sequence[Mapping[str, Any]] = (),
    tool_format: str | ToolCallParser = "hermes",
) -> list[ToolSource]:
    """An env's tool sources: ``sources``, then the MCP servers of ``mcp_servers`` as one more.

    Raises:
        TypeError: an entry of ``sources`` that is no :class:`ToolSource` (a plain tool goes in ``tools=``).
        ImportError, MCPServerError, ValueError: from :class:`~agent_gym.tools.mcp.MCPToolset`.
    """
    found = list(sources)
    for source in found:
        if not isinstance(source, ToolSource):
            hint = "; a single tool goes in tools=[...]" if isinstance(source, Tool) else ""
            raise TypeError(f"tool_sources takes ToolSource objects (tools, start_episode, end_episode, "
                            f"fork_blocker, close), got {type(source).__name__}{hint}")
    if mcp_servers:
        from agent_gym.tools.mcp import MCPToolset  # the MCP SDK is imported only here

        found.append(MCPToolset(mcp_servers, tool_format))
    return found
