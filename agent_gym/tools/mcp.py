"""Tools served by MCP servers (Model Context Protocol), through the official SDK (``mcp`` on PyPI).

A server is declared as a mapping (see :class:`MCPServerConfig`)::

    {"command": ["python", "kv_server.py"], "env": {"KV_DIR": "/tmp/kv"}}     # started over stdio
    {"url": "http://127.0.0.1:8000/mcp", "read_only": True}                    # streamable HTTP

and :class:`MCPToolset` turns its tools (names, descriptions, JSON input schemas) into
:class:`~agent_gym.tools.Tool` objects that every tool-call format can offer. ``gym.make(...,
mcp_servers=[...])`` does this for any :class:`~agent_gym.AgentEnv`.

Why the design is what it is:

- **Optional SDK.** Nothing here imports ``mcp`` until a server is used, so ``import agent_gym.tools``
  stays light; a missing SDK raises ``ImportError`` naming ``pip install "agent-r1-gym[mcp]"``.
- **One background event loop.** The SDK is async and its sessions are anyio task groups that must be
  entered and left in one task. Every session therefore lives in an *owner task* on one process-wide
  loop thread; sync ``step`` and any number of ``astep`` coroutines on other loops reach it through
  thread-safe futures, so no caller's loop is ever blocked by a server and no session is bound to a
  caller's loop (``ToolExecutor.execute`` runs each sync step on a fresh loop).
- **Sessions.** One session per episode (opened on ``reset``, closed at the episode's end and on
  ``close``), so a stateful server starts fresh every episode; a stdio server is a fresh process per
  episode, so one that crashed is simply started again. A server declared ``read_only`` keeps one
  session shared by every episode and env of the process (restarted when it died).
- **Errors are results.** Bad arguments (checked against the server's JSON schema before the call), an
  ``isError`` result, a JSON-RPC error, a time-out and a dead server each become a tool message and a
  counted error kind (:data:`MCP_ERROR_KINDS`, ``invalid_arguments``); nothing raises out of ``step``.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import copy
import json
import logging
import math
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_gym.tools.base import Tool, ToolError
from agent_gym.tools.formats import get_parser
from agent_gym.tools.parsing import ToolCallParser

__all__ = [
    "INSTALL_HINT",
    "MCP_ERROR_KINDS",
    "MCPCallError",
    "MCPServerConfig",
    "MCPServerError",
    "MCPTool",
    "MCPToolset",
    "check_tool_format",
    "live_server_count",
]

logger = logging.getLogger(__name__)

#: What to run when the SDK is missing.
INSTALL_HINT = 'pip install "agent-r1-gym[mcp]"'

#: The error kinds MCP tools add to :data:`agent_gym.tools.ERROR_KINDS` (besides ``invalid_arguments``).
MCP_ERROR_KINDS: tuple[str, ...] = (
    "mcp_error",  # the server answered with an error (an isError result or a JSON-RPC error)
    "mcp_timeout",  # no answer within the server's timeout_s
    "mcp_server_crashed",  # the server died, its connection broke, or it could not be started
)

# How long close() waits for the server processes of an env to exit; the SDK's own shutdown is bounded
# (stdin closed, 2 s grace, SIGTERM, 2 s, SIGKILL), so this is only a backstop.
_CLOSE_WAIT_S = 15.0
# Added to a call's timeout_s before the caller stops waiting even if the SDK's own timer did not fire.
_CALL_GRACE_S = 10.0

_T = TypeVar("_T")


def _sdk() -> Any:
    """The ``mcp`` package, imported on first use (it is an optional dependency)."""
    try:
        import mcp
    except ImportError as exc:
        raise ImportError(f"MCP tools need the MCP SDK, which is not installed: {INSTALL_HINT}") from exc
    return mcp


class MCPServerError(RuntimeError):
    """An MCP server could not be used when an env was made (not started, tools not listed, a bad schema)."""


class MCPCallError(ToolError):
    """A failed MCP call; the message is for the policy, :attr:`kind` one of :data:`MCP_ERROR_KINDS`.

    Every :class:`~agent_gym.tools.ToolExecutor` counts a ToolError under its :attr:`kind`.
    """

    def __init__(self, message: str, kind: str):
        super().__init__(message, kind=kind)


# --------------------------------------------------------------------------------------------- config


class MCPServerConfig(BaseModel):
    """One MCP server, as ``mcp_servers=[{...}]`` gives it. Exactly one of ``command`` and ``url``.

    Attributes:
        command: the stdio server's command line (a list, or a string split like a shell would).
        env: environment variables for the stdio server, over the SDK's safe default set (``PATH``,
            ``HOME``, ...; the rest of this process's environment is not passed on).
        cwd: the stdio server's working directory.
        url: a streamable-HTTP endpoint (``http://host:port/mcp``).
        headers: HTTP headers sent with every request (an API key, ...).
        name: what messages call the server (default: the command's script or the URL's host).
        read_only: the server keeps no state a call could change: one session is shared by every
            episode (and env) of the process instead of one per episode.
        timeout_s: seconds a call may take; a later answer is an ``mcp_timeout`` error.
        connect_timeout_s: seconds a server may take to start and answer the handshake.
        tools: offer only these tools of the server (its names); default all.
        prefix: put before every tool name (``"kv_"``): two servers with a ``get`` tool, say.
        rename: server tool name -> offered name, for names a format cannot write (``"db.query"``).
        protocol: the SDK's ``mode``: ``"auto"`` (the newest both sides speak), ``"legacy"`` (the
            2025 handshake era, whose HTTP wire has sessions with an ``Mcp-Session-Id``: use it for an
            HTTP server that keeps state per session) or a protocol version.
        stderr: ``"inherit"`` (the server's log goes to this process's stderr) or ``"devnull"``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    name: str | None = None
    read_only: bool = False
    timeout_s: float = Field(30.0, gt=0)
    connect_timeout_s: float = Field(60.0, gt=0)
    tools: tuple[str, ...] | None = None
    prefix: str = ""
    rename: dict[str, str] | None = None
    protocol: str = "auto"
    stderr: Literal["inherit", "devnull"] = "inherit"

    @model_validator(mode="before")
    @classmethod
    def _split_command(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("command"), str):
            return {**data, "command": tuple(shlex.split(data["command"]))}
        return data

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError('an MCP server needs exactly one of "command" (stdio) and "url" (streamable HTTP)')
        if self.command is not None and not self.command:
            raise ValueError('"command" is empty: give the server\'s command line, e.g. ["python", "server.py"]')
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f'"url" must be an http:// or https:// URL, got {self.url!r}')
        if self.url is not None and (self.env or self.cwd):
            raise ValueError('"env" and "cwd" are for stdio servers ("command"), not for a "url"')
        return self

    @property
    def label(self) -> str:
        """The server's name in messages."""
        if self.name:
            return self.name
        if self.command is not None:
            script = next((part for part in reversed(self.command) if not part.startswith("-")), self.command[0])
            return os.path.basename(script)
        return re.sub(r"^https?://", "", self.url or "").split("/")[0]

    @property
    def key(self) -> str:
        """What identifies the server process or endpoint (for the tool-list cache and shared sessions)."""
        fields = ("command", "env", "cwd", "url", "headers", "protocol", "stderr")
        return json.dumps(self.model_dump(include=set(fields)), sort_keys=True)

    @classmethod
    def coerce(cls, value: MCPServerConfig | Mapping[str, Any]) -> MCPServerConfig:
        """A config from a mapping; ``ValueError`` naming the keys it takes otherwise."""
        if isinstance(value, MCPServerConfig):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"an MCP server is a mapping like {{'command': [...]}} or {{'url': ...}}, got {value!r}")
        try:
            return cls.model_validate(dict(value))
        except pydantic.ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'server'}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise ValueError(f"invalid MCP server {dict(value)!r}: {details} (keys: {', '.join(cls.model_fields)})") from None


# --------------------------------------------------------------------------------- background loop


class _LoopThread:
    """The process's event loop for MCP sessions, on a daemon thread, started on first use.

    A forked child gets a loop of its own (the parent's thread does not exist there).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = -1

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="agent-gym-mcp", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run ``coro`` on the loop; its result as a thread-safe future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop())

    def call_soon(self, fn: Callable[[], Any]) -> None:
        self.loop().call_soon_threadsafe(fn)


_LOOP = _LoopThread()
# Every connection whose owner task has not finished (for close at exit and for live_server_count).
_LIVE: set[_Connection] = set()
_LIVE_LOCK = threading.Lock()


def live_server_count() -> int:
    """Sessions (for stdio: server processes) of this process that are open or still shutting down."""
    with _LIVE_LOCK:
        return len(_LIVE)


def _stderr_for(config: MCPServerConfig) -> Any:
    """The stream a stdio server writes its log to: it needs a real file descriptor."""
    if config.stderr == "devnull":
        return open(os.devnull, "w")  # noqa: SIM115 - closed with the connection
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # noqa: SIM115 - no stderr with a descriptor here (a notebook, say)


class _Connection:
    """One MCP client session. Its owner task on the background loop enters the SDK's ``Client``,
    publishes it through :attr:`ready` and leaves it when :meth:`close` is called, so every anyio
    scope is entered and exited in that one task (leaving shuts a stdio server down and reaps it)."""

    def __init__(self, config: MCPServerConfig):
        self.config = config
        self.ready: concurrent.futures.Future[Any] = concurrent.futures.Future()
        #: why the connection ended before it was closed (a crash), once a call saw it
        self.lost: str | None = None
        self._stop = asyncio.Event()
        self._closing = False
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.done = _LOOP.submit(self._own())

    @property
    def alive(self) -> bool:
        """Not closed, not lost, and not failed to start."""
        if self._closing or self.lost is not None or self.done.done():
            return False
        return not (self.ready.done() and self.ready.exception() is not None)

    def close(self) -> concurrent.futures.Future[None]:
        """Ask the owner task to leave the session (non-blocking); the returned future is done once the
        server process has exited (stdio) or the HTTP session was ended."""
        if not self._closing:
            self._closing = True
            _LOOP.call_soon(self._stop.set)
        return self.done

    async def _own(self) -> None:
        try:
            await self._serve()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)

    async def _serve(self) -> None:
        import anyio

        mcp = _sdk()
        deadline = anyio.current_time() + self.config.connect_timeout_s
        with anyio.CancelScope(deadline=deadline) as scope:
            try:
                async with AsyncExitStack() as stack:
                    transport = _transport(self.config, stack)
                    client = await stack.enter_async_context(mcp.Client(transport, mode=self.config.protocol))
                    scope.deadline = math.inf  # started: from now on only close() ends it
                    self.ready.set_result(client)
                    await self._stop.wait()
            except Exception as exc:  # noqa: BLE001 - handed to every caller through `ready`, or logged
                self._fail(exc)
        if scope.cancelled_caught and not self.ready.done():
            self._fail(TimeoutError(f"no answer to the handshake within connect_timeout_s={self.config.connect_timeout_s:g}"))

    def _fail(self, exc: BaseException) -> None:
        if not self.ready.done():
            self.ready.set_exception(exc)
        elif self.lost is None and not self._closing:
            self.lost = _describe(exc)
            logger.warning("MCP server %r: the session ended with an error: %s", self.config.label, self.lost)
        else:
            # Shutting down a session whose server had already died: the error is that death, which
            # the calls of the episode reported; keep it visible for debugging.
            logger.debug("MCP server %r: error while closing: %s", self.config.label, _describe(exc))

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """``tools/call`` on the owner loop (the SDK applies the read timeout)."""
        client = await asyncio.wrap_future(self.ready)
        return await client.call_tool(name, arguments, read_timeout_seconds=self.config.timeout_s)

    async def list_tools(self) -> list[Any]:
        client = await asyncio.wrap_future(self.ready)
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools


def _transport(config: MCPServerConfig, stack: AsyncExitStack) -> Any:
    """The SDK transport of a server: a stdio subprocess or a streamable-HTTP client."""
    mcp = _sdk()
    if config.command is not None:
        from mcp.client.stdio import stdio_client

        errlog = _stderr_for(config)
        if config.stderr == "devnull":
            stack.callback(errlog.close)
        params = mcp.StdioServerParameters(
            command=config.command[0], args=list(config.command[1:]), env=config.env, cwd=config.cwd
        )
        return stdio_client(params, errlog=errlog)
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers=dict(config.headers or {}))
    stack.push_async_callback(http.aclose)
    return streamable_http_client(str(config.url), http_client=http)


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups (anyio task groups raise them)."""
    inner = getattr(exc, "exceptions", None)
    if inner:
        return "; ".join(_describe(e) for e in inner)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------------------------ shared sessions, cache

_SHARED: dict[str, tuple[_Connection, int]] = {}
_SHARED_LOCK = threading.Lock()
_TOOL_CACHE: dict[str, list[dict[str, Any]]] = {}
_TOOL_CACHE_LOCK = threading.Lock()


def _acquire_shared(config: MCPServerConfig, previous: _Connection | None) -> _Connection:
    """The process's shared session of a read-only server, started again if it died; ``previous`` (this
    holder's earlier session) is released."""
    with _SHARED_LOCK:
        if previous is not None:
            _release_locked(config.key, previous)
        conn, count = _SHARED.get(config.key, (None, 0))
        if conn is None or not conn.alive:
            if conn is not None:
                conn.close()
            conn, count = _Connection(config), 0
        _SHARED[config.key] = (conn, count + 1)
        return conn


def _release_shared(config: MCPServerConfig, conn: _Connection) -> concurrent.futures.Future[None] | None:
    with _SHARED_LOCK:
        return _release_locked(config.key, conn)


def _release_locked(key: str, conn: _Connection) -> concurrent.futures.Future[None] | None:
    current, count = _SHARED.get(key, (None, 0))
    if current is not conn:
        return conn.close()  # it died and was replaced in the registry: ours still needs closing
    if count > 1:
        _SHARED[key] = (conn, count - 1)
        return None
    del _SHARED[key]
    return conn.close()


def _list_tools(config: MCPServerConfig, conn: _Connection | None) -> list[dict[str, Any]]:
    """The server's tools as ``{"name", "description", "inputSchema"}``, listed once per process and
    server (an env made 64 times starts the server once for this); over ``conn`` or a session of its own."""
    with _TOOL_CACHE_LOCK:
        if config.key in _TOOL_CACHE:
            return copy.deepcopy(_TOOL_CACHE[config.key])
    own = conn is None
    session = _Connection(config) if conn is None else conn
    try:
        listed = _LOOP.submit(session.list_tools()).result(timeout=config.connect_timeout_s + config.timeout_s)
    except concurrent.futures.TimeoutError:
        raise MCPServerError(f"MCP server {config.label!r} did not list its tools within {config.connect_timeout_s + config.timeout_s:g} s") from None
    except Exception as exc:
        where = f"command {list(config.command)}" if config.command is not None else f"url {config.url}"
        raise MCPServerError(
            f"could not list the tools of MCP server {config.label!r} ({where}): {_describe(exc)}. "
            "Check that the server starts on its own (its log goes to stderr unless stderr='devnull')."
        ) from exc
    finally:
        if own:
            session.close().result(timeout=_CLOSE_WAIT_S)
    specs = [
        {"name": t.name, "description": t.description or t.title or "", "inputSchema": dict(t.input_schema or {})}
        for t in listed
    ]
    with _TOOL_CACHE_LOCK:
        _TOOL_CACHE[config.key] = copy.deepcopy(specs)
    return specs


def _close_all_at_exit() -> None:
    """Stop every session still open when the interpreter exits, so no server process outlives it."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    waits = [conn.close() for conn in live]
    if waits:
        concurrent.futures.wait(waits, timeout=_CLOSE_WAIT_S)


atexit.register(_close_all_at_exit)


# ---------------------------------------------------------------------------------------- the tool


class _Arguments(BaseModel):
    """The validated arguments of an MCP call, as the server's JSON schema accepted them."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any]


@dataclass(frozen=True)
class _Outcome:
    text: str
    kind: str | None = None


class MCPTool(Tool):
    """One tool of an MCP server, offered under :attr:`name` (its server name is :attr:`remote_name`).

    The schema is the server's JSON input schema as it is; :meth:`validate` checks arguments against it
    with ``jsonschema`` (a ``pydantic.ValidationError``, so the executor reports ``invalid_arguments``);
    the call goes to the session of the current episode. The executor's own timer is off
    (``timeout_s=None``): the server's ``timeout_s`` applies, reported as ``mcp_timeout``.
    """

    def __init__(self, server: _Server, spec: Mapping[str, Any], name: str):
        from jsonschema import exceptions as schema_exceptions
        from jsonschema import validators

        self.server = server
        self.remote_name = str(spec["name"])
        schema = _object_schema(spec.get("inputSchema"), name, server.config.label)
        try:
            validator_class = validators.validator_for(schema)
            validator_class.check_schema(schema)
        except schema_exceptions.SchemaError as exc:
            raise MCPServerError(
                f"MCP tool {self.remote_name!r} of server {server.config.label!r} has an invalid input schema: "
                f"{exc.message}; leave it out with the server's \"tools\" list"
            ) from None
        self._validator = validator_class(schema)
        super().__init__(name=name, description=str(spec.get("description") or ""), args_model=_Arguments,
                         fn=self._not_called_directly, timeout_s=None)
        self._parameters = schema

    def _not_called_directly(self, **_: Any) -> str:
        raise TypeError(f"MCP tool {self.name!r} is called through an executor (ainvoke), not directly")

    def validate(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Check ``arguments`` against the server's JSON schema.

        Raises:
            pydantic.ValidationError: one line per schema violation (path and ``jsonschema``'s message).
        """
        errors = sorted(self._validator.iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.absolute_path])
        if errors:
            from pydantic_core import InitErrorDetails, PydanticCustomError

            details = [
                InitErrorDetails(
                    type=PydanticCustomError("json_schema", "{message}", {"message": e.message}),
                    loc=tuple(e.absolute_path),
                    input=e.instance,
                )
                for e in errors
            ]
            raise pydantic.ValidationError.from_exception_data(self.name, details)
        return _Arguments(arguments=dict(arguments))

    async def aoutcome(self, args: BaseModel) -> _Outcome:
        """The call's text and error kind (``None`` when it succeeded); never raises but for cancellation."""
        arguments = getattr(args, "arguments", None)
        if not isinstance(arguments, dict):
            return _Outcome(f"Error: internal error: {type(args).__name__} is not an MCP call's arguments", "mcp_error")
        return await self.server.acall(self.remote_name, self.name, arguments)

    async def ainvoke(self, args: BaseModel) -> str:
        outcome = await self.aoutcome(args)
        if outcome.kind is not None:
            raise MCPCallError(outcome.text.removeprefix("Error: "), outcome.kind)
        return outcome.text


def _object_schema(schema: Any, name: str, server: str) -> dict[str, Any]:
    """The input schema as an offered tool's ``parameters``: an object schema (``properties`` and
    ``required`` present, as some templates expect); MCP demands ``type: object``."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise MCPServerError(
            f"MCP tool {name!r} of server {server!r}: the input schema must be a JSON object schema, got {schema!r}"
        )
    parameters = {key: copy.deepcopy(value) for key, value in schema.items() if key not in ("title", "$schema")}
    parameters["type"] = "object"
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    return parameters


def _render_result(result: Any) -> str:
    """A ``CallToolResult`` as text: text blocks as they are, other content as a placeholder naming it."""
    parts = [_render_content(block) for block in getattr(result, "content", None) or ()]
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _render_content(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        data = str(getattr(block, "data", "") or "")
        size = len(data) * 3 // 4 - data[-2:].count("=")  # base64: the decoded size
        return f"[{kind} content: {getattr(block, 'mime_type', 'unknown type')}, {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if text is not None:
            return str(text)
        return f"[embedded resource {resource.uri}: {getattr(resource, 'mime_type', None) or 'binary'}, not shown]"
    return f"[{kind or type(block).__name__} content, not shown]"


# -------------------------------------------------------------------------------------- one server


class _Server:
    """One configured server of one env: its tools and the session of the current episode."""

    def __init__(self, config: MCPServerConfig):
        self.config = config
        self._conn: _Connection | None = None
        self._closing: list[concurrent.futures.Future[None]] = []
        self._lock = threading.Lock()
        if config.read_only:
            self._conn = _acquire_shared(config, None)
        try:
            specs = _list_tools(config, self._conn)
        except BaseException:
            self.close()
            raise
        self.tools = self._make_tools(specs)

    def _make_tools(self, specs: list[dict[str, Any]]) -> list[MCPTool]:
        names = [s["name"] for s in specs]
        wanted = list(self.config.tools) if self.config.tools is not None else names
        missing = [n for n in [*wanted, *(self.config.rename or {})] if n not in names]
        if missing:
            raise MCPServerError(
                f"MCP server {self.config.label!r} has no tool {missing[0]!r}; its tools: {', '.join(names) or 'none'}"
            )
        tools = []
        for spec in specs:
            if spec["name"] not in wanted:
                continue
            offered = self.config.prefix + (self.config.rename or {}).get(spec["name"], spec["name"])
            try:
                tools.append(MCPTool(self, spec, offered))
            except ValueError as exc:
                raise MCPServerError(
                    f"MCP tool {spec['name']!r} of server {self.config.label!r} cannot be offered as {offered!r}: {exc}; "
                    'give it a name of that form with the server\'s "rename" ({"server.name": "server_name"})'
                ) from None
        return tools

    def start_episode(self) -> None:
        """A fresh session for the episode (the previous one is closed), or the shared one of a read-only server."""
        with self._lock:
            if self.config.read_only:
                # Keep the shared session while it lives: releasing it first would stop it whenever this
                # env is its only holder, and the close of a session that died is waited for in close().
                if self._conn is None or not self._conn.alive:
                    if self._conn is not None:
                        closing = _release_shared(self.config, self._conn)
                        if closing is not None:
                            self._closing.append(closing)
                    self._conn = _acquire_shared(self.config, None)
                return
            self._end_locked()
            self._conn = _Connection(self.config)

    def end_episode(self) -> None:
        """Close the episode's session (without waiting); a read-only server's shared session stays."""
        with self._lock:
            if not self.config.read_only:
                self._end_locked()

    def _end_locked(self) -> None:
        if self._conn is not None:
            self._closing.append(self._conn.close())
            self._conn = None
        self._closing = [f for f in self._closing if not f.done()]

    def close(self) -> None:
        """Close every session of this server that this env opened and wait until they are gone."""
        with self._lock:
            if self.config.read_only and self._conn is not None:
                closing = _release_shared(self.config, self._conn)
                if closing is not None:
                    self._closing.append(closing)
                self._conn = None
            self._end_locked()
            pending, self._closing = self._closing, []
        if pending:
            _, not_done = concurrent.futures.wait(pending, timeout=_CLOSE_WAIT_S)
            if not_done:
                logger.warning("MCP server %r: %d session(s) still shutting down after %g s", self.config.label,
                               len(not_done), _CLOSE_WAIT_S)

    def _session(self) -> _Connection:
        with self._lock:
            if self._conn is None:  # a call before reset(): open one, closed at the episode's end or close()
                self._conn = _acquire_shared(self.config, None) if self.config.read_only else _Connection(self.config)
            return self._conn

    async def acall(self, remote: str, offered: str, arguments: dict[str, Any]) -> _Outcome:
        """Call ``remote`` in the current session from any event loop; every failure is an outcome."""
        conn = self._session()
        if conn.lost is not None:
            return _Outcome(self._crashed_text(offered, conn.lost), "mcp_server_crashed")
        budget = self.config.connect_timeout_s + self.config.timeout_s + _CALL_GRACE_S
        future = _LOOP.submit(self._call_on_loop(conn, remote, offered, arguments))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=budget)
        except asyncio.TimeoutError:
            return _Outcome(f"Error: tool {offered!r} timed out after {self.config.timeout_s:g} s", "mcp_timeout")

    async def _call_on_loop(self, conn: _Connection, remote: str, offered: str, arguments: dict[str, Any]) -> _Outcome:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        try:
            result = await conn.call(remote, arguments)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return _Outcome(f"Error: tool {offered!r} timed out after {self.config.timeout_s:g} s", "mcp_timeout")
            if exc.code == CONNECTION_CLOSED:
                conn.lost = conn.lost or f"the connection closed during a call of {remote!r}"
                return _Outcome(self._crashed_text(offered, conn.lost), "mcp_server_crashed")
            return _Outcome(f"Error: tool {offered!r} failed: {exc.message}", "mcp_error")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - start failures and transport errors: the server is unusable
            if not conn.ready.done() or conn.ready.exception() is None:
                conn.lost = conn.lost or _describe(exc)
                return _Outcome(self._crashed_text(offered, conn.lost), "mcp_server_crashed")
            return _Outcome(
                f"Error: tool {offered!r} is unavailable: MCP server {self.config.label!r} could not be started "
                f"({_describe(exc)})",
                "mcp_server_crashed",
            )
        text = _render_result(result)
        if getattr(result, "is_error", False):
            return _Outcome(f"Error: {text or f'tool {offered!r} failed'}", "mcp_error")
        return _Outcome(text)

    def _crashed_text(self, offered: str, why: str) -> str:
        again = "its shared session is started again at the next reset" if self.config.read_only else \
            "it is started again for the next episode"
        return f"Error: tool {offered!r} is unavailable: MCP server {self.config.label!r} stopped ({why}); {again}"


# ------------------------------------------------------------------------------------ what envs use


class MCPToolset:
    """The MCP tools of one env and the lifecycle of their sessions: a
    :class:`~agent_gym.tools.source.ToolSource`, which ``mcp_servers=[...]`` gives any env.

    Args:
        servers: server configs (mappings or :class:`MCPServerConfig`).
        tool_format: the env's tool-call format (a name or a parser); every tool must be expressible in
            it (:func:`check_tool_format`), else ``ValueError`` here, when the env is made.

    Raises:
        ImportError: the MCP SDK is not installed (the message names ``pip install "agent-r1-gym[mcp]"``).
        MCPServerError: a server did not start or list its tools, or a tool cannot be offered.
        ValueError: a bad config, two tools with one name, or a tool the format cannot express.
    """

    def __init__(self, servers: Sequence[MCPServerConfig | Mapping[str, Any]], tool_format: str | ToolCallParser = "hermes"):
        _sdk()
        if isinstance(servers, Mapping):
            raise TypeError("mcp_servers is a list of servers: wrap the one server in [...]")
        configs = [MCPServerConfig.coerce(s) for s in servers]
        self.servers: list[_Server] = []
        try:
            for config in configs:
                self.servers.append(_Server(config))
            self.tools: list[MCPTool] = [t for s in self.servers for t in s.tools]
            _check_unique(self.tools)
            check_tool_format(self.tools, tool_format)
        except BaseException:
            self.close()
            raise

    def start_episode(self) -> None:
        """Open the episode's sessions (without waiting for them: the first call does)."""
        for server in self.servers:
            server.start_episode()

    def end_episode(self) -> None:
        """Close the episode's sessions (without waiting); shared read-only sessions stay open."""
        for server in self.servers:
            server.end_episode()

    def fork_blocker(self) -> str | None:
        """Servers that keep state in their sessions, which a snapshot cannot copy (``None``: all read-only)."""
        stateful = [s.config.label for s in self.servers if not s.config.read_only]
        if stateful:
            return (f"the MCP server(s) {', '.join(stateful)} keep state in their sessions, which a snapshot cannot "
                    "copy; declare a server read_only=True if it keeps none")
        return None

    def close(self) -> None:
        """Close every session this env opened and wait until their server processes are gone."""
        for server in self.servers:
            server.close()



def _check_unique(tools: Sequence[MCPTool]) -> None:
    seen: dict[str, MCPTool] = {}
    for t in tools:
        if t.name in seen:
            first = seen[t.name].server.config.label
            raise ValueError(
                f"two MCP tools are offered as {t.name!r} (servers {first!r} and {t.server.config.label!r}); "
                'give one server a "prefix" (e.g. "prefix": "kv_") or "rename" the tool'
            )
        seen[t.name] = t


def check_tool_format(tools: Sequence[Tool], tool_format: str | ToolCallParser) -> None:
    """Refuse tools that ``tool_format`` cannot express: the format's parser must accept the schemas,
    and a call with every argument must survive ``format_calls`` then ``parse`` (same tool, same
    argument names).

    Raises:
        ValueError: naming the tool, the format and what to change.
    """
    schemas = [t.schema() for t in tools]
    fmt = tool_format if isinstance(tool_format, str) else getattr(tool_format, "name", type(tool_format).__name__)
    try:
        parser = get_parser(tool_format, tools=schemas)
    except ValueError as exc:
        raise ValueError(f"the MCP tools cannot be offered in the {fmt!r} tool-call format: {exc}; "
                         'use "rename" or "prefix" in the server config, or another tool_format') from None
    for schema in schemas:
        function = schema["function"]
        props = function["parameters"].get("properties") or {}
        call = {"name": function["name"], "arguments": {p: "x" for p in props}}
        try:
            parsed = parser.parse(parser.format_calls([call]))
            ok = (len(parsed.calls) == 1 and not parsed.errors and parsed.calls[0].name == call["name"]
                  and set(parsed.calls[0].arguments) == set(props))
            why = "a call does not read back as written"
        except ValueError as exc:
            ok, why = False, str(exc)
        if not ok:
            raise ValueError(
                f"MCP tool {function['name']!r} cannot be written in the {fmt!r} tool-call format ({why}); "
                f'its argument names are {list(props)}: use tool_format="hermes", which writes any JSON'
            )

