"""A key-value MCP server for the tests of ``agent_gym.tools.mcp``, built on the official SDK.

Tools: ``set``/``get`` (a store per session: per process over stdio, per ``Mcp-Session-Id`` over HTTP
in the 2025 protocol era), ``slow`` (sleeps), ``fail`` (raises), ``crash`` (the process exits at once),
``picture`` (an image block), ``pid`` (the server's process id).

    python kv_server.py                 # stdio
    python kv_server.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("kv", log_level="CRITICAL")  # the tests' own failures are expected: no tracebacks on stderr
STORES: dict[str, dict[str, str]] = {}


def store(ctx: Context) -> dict[str, str]:
    """This session's store: the HTTP session id, or the one store of a stdio process."""
    session = (ctx.headers or {}).get("mcp-session-id", "stdio")
    return STORES.setdefault(session, {})


@server.tool()
def set(key: str, value: str, ctx: Context) -> str:  # noqa: A001 - the tool's name
    """Store value under key."""
    store(ctx)[key] = value
    return f"stored {key}"


@server.tool()
def get(key: str, ctx: Context) -> str:
    """The value stored under key."""
    return store(ctx).get(key, f"no value for {key}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def fail(reason: str) -> str:
    """Raise an exception."""
    raise ValueError(reason)


@server.tool()
def crash() -> str:
    """End the server process at once, as a crash does."""
    os._exit(3)


@server.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + bytes(24), format="png")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
