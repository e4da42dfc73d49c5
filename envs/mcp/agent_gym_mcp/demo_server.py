"""The demo MCP server of ``AgentR1/MCPTask-v0``: a small warehouse, built on the official SDK.

Two deterministic, read-only tools over a fixed catalog (:data:`CATALOG`):

- ``stock(item)``: the units of ``item`` in stock;
- ``price(item)``: the unit price of ``item``, in whole dollars.

An item is named as in the catalog, in any case, singular or plural (``"Sprockets"`` is ``sprocket``);
an unknown item is a tool error (``isError``) that lists the catalog. The packaged demo tasks
(``agent_gym_mcp/data/warehouse_tasks.jsonl``) are answered from these tools alone.

    python -m agent_gym_mcp.demo_server                 # stdio (what MCPTask-v0 starts by default)
    python -m agent_gym_mcp.demo_server --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import sys
from typing import NamedTuple

__all__ = ["CATALOG", "Item", "lookup", "main"]


class Item(NamedTuple):
    price: int  # dollars per unit
    stock: int  # units in stock


#: The warehouse's catalog: item name -> (unit price in dollars, units in stock).
CATALOG: dict[str, Item] = {
    "widget": Item(4, 120),
    "gadget": Item(15, 32),
    "sprocket": Item(7, 85),
    "gear": Item(9, 60),
    "bolt": Item(2, 480),
    "washer": Item(3, 250),
    "spring": Item(5, 140),
    "valve": Item(24, 18),
    "hinge": Item(6, 75),
    "pulley": Item(13, 27),
    "lever": Item(11, 40),
    "cog": Item(8, 95),
    "piston": Item(31, 12),
    "clamp": Item(12, 44),
    "bracket": Item(10, 66),
    "flange": Item(17, 23),
}


def lookup(item: str) -> Item:
    """The catalog entry of ``item`` (any case, singular or plural).

    Raises:
        ValueError: an item the warehouse does not stock; the message lists the catalog.
    """
    name = " ".join(str(item).split()).lower()
    for candidate in (name, name[:-1] if name.endswith("s") else None):
        if candidate in CATALOG:
            return CATALOG[candidate]
    raise ValueError(f"unknown item {item!r}; the warehouse stocks: {', '.join(CATALOG)}")


def _server():
    """The SDK server offering ``stock`` and ``price`` (the SDK is imported here, not on import)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    # An unknown item is an expected tool error (ToolError: the policy reads why), not a log line.
    server = MCPServer("warehouse", log_level="WARNING")

    def find(item: str) -> Item:
        try:
            return lookup(item)
        except ValueError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    def stock(item: str) -> int:
        """The number of units of item in stock in the warehouse."""
        return find(item).stock

    @server.tool()
    def price(item: str) -> int:
        """The unit price of item, in whole dollars."""
        return find(item).price

    return server


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or over streamable HTTP with ``--http PORT``."""
    args = sys.argv[1:] if argv is None else argv
    server = _server()
    if len(args) == 2 and args[0] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(args[1]))
    elif not args:
        server.run()
    else:
        raise SystemExit("usage: python -m agent_gym_mcp.demo_server [--http PORT]")


if __name__ == "__main__":
    main()
