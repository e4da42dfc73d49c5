"""An OpenEnv server for any registered env: ``agent-gym serve ID`` (or :func:`create_app` / :func:`serve`).

Built on openenv-core's own server: :class:`openenv.core.env_server.http_server.HTTPEnvServer` gives the
routes and the session model, this module gives it an :class:`~openenv.core.env_server.interfaces.Environment`
(:class:`AgentGymEnvironment`) around ``gym.make(ID, ...)``.

Sessions. One OpenEnv session is one websocket connection to ``/ws``; openenv-core makes one env instance
per session (through the factory here) and closes it when the connection ends, however it ends (a
``close`` message, a dropped connection, a killed client). Episodes of different sessions share nothing
but the tokenizer, which is loaded once per server. At most ``max_sessions`` sessions are open at a time;
one more is refused with OpenEnv's ``CAPACITY_REACHED`` error.

Stepping. Steps run through the env's ``astep`` on the server's event loop, so a tool that waits (a
sandbox, a search call) does not hold up the other sessions; resets and env construction run in the
session's own worker thread, as openenv-core does for every environment.

Routes (openenv-core's, plus three of this server's):

- ``/ws``: the OpenEnv websocket protocol (``reset``, ``step``, ``state``, ``close``): episodes.
- ``POST /reset``, ``POST /step``, ``GET /state``: OpenEnv's stateless HTTP routes: each request gets a
  fresh env that is closed after it, so ``/reset`` shows a first observation and ``/step`` can only
  answer that there is no episode (409). Play episodes over ``/ws``.
- ``GET /health``, ``/metadata``, ``/schema``, ``POST /mcp``: as openenv-core defines them.
- ``GET /env_info``: the env id, its constructor arguments, the tokenizer, vocabulary size, end-of-turn
  ids and limits (what a trainer needs to generate for it).
- ``GET /sessions``: open sessions and env instances (``open_envs`` returns to 0 once every client is
  gone: a dropped client leaks nothing).
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import uuid
from typing import Any, Callable, Mapping

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import ConcurrencyConfig, EnvironmentMetadata

from agent_gym_openenv.models import ChatObservation, EpisodeState, TokenAction

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "AgentGymEnvironment",
    "ServedEnv",
    "RequestError",
    "EpisodeStateError",
    "create_app",
    "serve",
]

#: Sessions (episodes in flight) a server accepts at a time unless told otherwise: a GRPO batch of a
#: few hundred episodes fits, and an idle session costs only its env (a few hundred kB for GSM8KTool).
DEFAULT_MAX_SESSIONS = 256


class RequestError(ValueError):
    """A client's mistake (an unknown reset argument or task, a malformed option): reported to that
    client with this message (OpenEnv's ``EXECUTION_ERROR`` over the websocket, HTTP 400 on the
    stateless routes); the session and the server carry on."""

    status_code = 400


class EpisodeStateError(RequestError):
    """A request the episode's state does not allow: a step before any reset, or after the episode
    ended (HTTP 409)."""

    status_code = 409


class ServedEnv:
    """The env a server serves: its id, constructor arguments and tokenizer (loaded once, shared by
    every session), and a count of the env instances made and closed.

    Building one makes and closes a probe env, so a bad id or constructor argument fails here, at
    start-up, and not in the first client's session.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None, tokenizer: Any = None):
        import agent_gym  # noqa: F401  - registers the installed env packages
        from agent_gym.core.make import make_env
        from agent_gym.models import load_tokenizer

        self._make_env = make_env
        self.env_id = str(env_id)
        self.env_kwargs = dict(env_kwargs or {})
        if "tokenizer" in self.env_kwargs:
            raise ValueError("give the tokenizer as tokenizer=..., not among the env kwargs")
        if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
            self.tokenizer_name = None if tokenizer is None else str(tokenizer)
        else:
            self.tokenizer_name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        self.tokenizer = load_tokenizer(tokenizer)
        self._lock = threading.Lock()
        self.created = 0
        self.closed = 0
        probe = self.make()  # a bad id or argument raises make_env's error here, at start-up
        try:
            self.info = self._describe(probe)
        finally:
            self.release(probe)

    def make(self) -> Any:
        """A new env instance (what ``gym.make`` returns). Construction is serialised: sessions are
        created in worker threads and all of them share one tokenizer."""
        with self._lock:
            env = self._make_env(self.env_id, tokenizer=self.tokenizer, **self.env_kwargs)
            self.created += 1
        return env

    def release(self, env: Any) -> None:
        """Close an env made by :meth:`make` (once per env)."""
        try:
            env.close()
        finally:
            with self._lock:
                self.closed += 1

    @property
    def open_envs(self) -> int:
        """Env instances made and not yet closed."""
        with self._lock:
            return self.created - self.closed

    def _describe(self, env: Any) -> dict[str, Any]:
        import agent_gym
        from agent_gym import list_envs
        from agent_gym.trajectory import to_jsonable

        base = env.unwrapped
        template = base.template
        card = next((c for c in list_envs() if c.id == self.env_id), None)
        return {
            "env_id": self.env_id,
            "description": card.description if card is not None else "",
            "env_kwargs": {k: to_jsonable(v) if _is_json(v) else repr(v) for k, v in self.env_kwargs.items()},
            "tokenizer": self.tokenizer_name or getattr(self.tokenizer, "name_or_path", None),
            "vocab_size": int(template.vocab_size),
            "end_of_turn_ids": [int(i) for i in template.end_of_turn_ids],
            "max_turns": int(base.max_turns),
            "max_action_tokens": int(base.max_action_tokens),
            "max_context_tokens": int(base.max_context_tokens),
            "tool_format": getattr(base, "tool_format", None),
            "tools": [t.schema() for t in getattr(base, "tools", [])],
            "agent_gym_version": agent_gym.__version__,
        }


def _is_json(value: Any) -> bool:
    import json

    from agent_gym.trajectory import to_jsonable

    try:
        json.dumps(to_jsonable(value))
    except (TypeError, ValueError):
        return False
    return True


class AgentGymEnvironment(Environment[TokenAction, ChatObservation, EpisodeState]):
    """One session's env, as an OpenEnv ``Environment``: ``reset`` / ``step`` return what
    ``env.reset`` / ``env.step`` return in process, as a :class:`ChatObservation`.

    ``reset`` takes ``seed``, ``options`` (``{"task_id": ...}`` or ``{"task": {...}}``, as in process),
    ``task_id`` (a shorthand for that option) and OpenEnv's ``episode_id``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # one env instance per session; nothing shared but the tokenizer

    def __init__(self, served: ServedEnv):
        super().__init__()
        self._served = served
        self._env = served.make()
        self._closed = False
        self._in_episode = False
        self._episode_id: str | None = None
        self._task_id: str | None = None
        self._steps = 0

    # -- OpenEnv's Environment API ------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        **unknown: Any,
    ) -> ChatObservation:
        self._check_open()
        if unknown:
            raise RequestError(
                f"unknown reset argument(s) {sorted(unknown)}; known: seed, options, task_id, episode_id"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise RequestError(f"seed must be a non-negative integer, got {seed!r}")
        if options is not None and not isinstance(options, Mapping):
            raise RequestError(f"options must be an object, got {type(options).__name__}")
        reset_options = dict(options or {})
        if task_id is not None:
            reset_options["task_id"] = str(task_id)
        self._in_episode = False
        try:
            obs, info = self._env.reset(seed=seed, options=reset_options or None)
        except KeyError as exc:  # an unknown task id: the env's message is the KeyError's argument
            raise RequestError(str(exc.args[0]) if exc.args else "unknown task") from None
        except (ValueError, TypeError) as exc:  # unknown options, a malformed task
            raise RequestError(str(exc)) from None
        self._in_episode = True
        self._episode_id = str(episode_id) if episode_id is not None else uuid.uuid4().hex
        self._task_id = info.get("task_id")
        self._steps = 0
        return _observation(obs, None, False, False, info)

    def step(self, action: TokenAction, timeout_s: float | None = None, **kwargs: Any) -> ChatObservation:
        payload = self._begin_step(action)
        return self._end_step(lambda: self._env.step(payload))

    async def step_async(self, action: TokenAction, timeout_s: float | None = None, **kwargs: Any) -> ChatObservation:
        from agent_gym.core.async_step import astep

        payload = self._begin_step(action)
        try:
            result = await astep(self._env, payload)
        except BaseException:
            self._in_episode = False
            raise
        return self._end_step(lambda: result)

    @property
    def state(self) -> EpisodeState:
        return EpisodeState(
            env_id=self._served.env_id,
            task_id=self._task_id,
            in_episode=self._in_episode,
            episode_id=self._episode_id,
            step_count=self._steps,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        import agent_gym

        description = self._served.info["description"] or f"{self._served.env_id} (agent-r1-gym)"
        return EnvironmentMetadata(name=self._served.env_id, description=description, version=agent_gym.__version__)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._in_episode = False
        self._served.release(self._env)

    # -- internals ------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EpisodeStateError("this session's env has been closed; open a new connection")

    def _begin_step(self, action: TokenAction) -> Any:
        self._check_open()
        if not self._in_episode:
            if self._episode_id is None:
                raise EpisodeStateError("step before reset: this session has no episode yet; send a reset first")
            raise EpisodeStateError("the episode is over (done was true); send a reset to start a new one")
        # Ids go to the env exactly as received (the env checks the vocabulary and the length, and ends
        # the episode on a bad action as it does in process); text is the env's own convenience.
        return action.token_ids if action.token_ids is not None else action.text

    def _end_step(self, run: Callable[[], tuple[Any, Any, bool, bool, dict[str, Any]]]) -> ChatObservation:
        try:
            obs, reward, terminated, truncated, info = run()
        except BaseException:
            self._in_episode = False  # an env that raised is in no known state: the episode is over
            raise
        self._steps += 1
        terminated, truncated = bool(terminated), bool(truncated)
        if terminated or truncated:
            self._in_episode = False
        return _observation(obs, float(reward), terminated, truncated, info)


def _observation(obs: Mapping[str, Any], reward: float | None, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> ChatObservation:
    from agent_gym.trajectory import to_jsonable

    # model_construct: every value is built here from the env's own output (no need to validate what
    # the server made itself; the client validates what it receives).
    return ChatObservation.model_construct(
        prompt_ids=np.asarray(obs["prompt_ids"]).tolist(),
        messages=to_jsonable(obs["messages"]),
        tools=to_jsonable(obs["tools"]),
        terminated=terminated,
        truncated=truncated,
        info=to_jsonable(dict(info)),
        reward=reward,
        done=terminated or truncated,
        metadata={},
    )


def create_app(
    env_id: str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    tokenizer: Any = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout_s: float | None = None,
) -> FastAPI:
    """The FastAPI app of an OpenEnv server for ``env_id`` (run it with any ASGI server).

    Args:
        env_id: a registered id (``AgentR1/GSM8KTool-v0``).
        env_kwargs: constructor arguments of every session's env (``split``, ``max_turns``, ...).
        tokenizer: a Hugging Face tokenizer, a path or name, or ``None`` for the default model's.
        max_sessions: sessions open at a time (one more is refused with ``CAPACITY_REACHED``).
        session_timeout_s: close sessions idle this long (openenv-core's reaper); ``None``: never.
            Dropped connections are closed without it; this is for clients that hang while connected.

    The app's ``state.served`` is the :class:`ServedEnv`, ``state.openenv`` openenv-core's
    ``HTTPEnvServer``.
    """
    import agent_gym

    served = ServedEnv(env_id, env_kwargs, tokenizer)
    server = HTTPEnvServer(
        functools.partial(AgentGymEnvironment, served),
        TokenAction,
        ChatObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=int(max_sessions), session_timeout=session_timeout_s),
    )
    app = FastAPI(
        title=f"agent-gym: {served.env_id} over OpenEnv",
        version=agent_gym.__version__,
        description="An agent-r1-gym env served with openenv-core: episodes over the websocket at /ws.",
    )
    server.register_routes(app)
    app.add_middleware(_QuietClientExits)
    app.state.served = served
    app.state.openenv = server

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        detail = str(exc)
        if isinstance(exc, EpisodeStateError) and request.url.path == "/step":
            detail += " (HTTP /step is stateless in OpenEnv: each request gets a fresh env; play episodes over /ws)"
        return JSONResponse(status_code=exc.status_code, content={"detail": detail})

    @app.get("/env_info", tags=["Environment Info"], summary="The served env: id, kwargs, tokenizer, limits")
    async def env_info() -> dict[str, Any]:
        return served.info

    @app.get("/sessions", tags=["Environment Info"], summary="Open sessions and env instances")
    async def sessions() -> dict[str, Any]:
        return {
            "env_id": served.env_id,
            "active_sessions": server.active_sessions,
            "max_sessions": server.max_concurrent_envs,
            "open_envs": served.open_envs,
            "envs_created": served.created,
            "envs_closed": served.closed,
        }

    return app


class _QuietClientExits:
    """ASGI middleware: a websocket whose client left first ends quietly.

    openenv-core's websocket route closes the session (and its env) and then closes the websocket; when
    the client has already gone (every client that sends ``close`` and hangs up, every dropped one),
    that last close raises ``WebSocketDisconnect``, which the server would log as an error with a
    traceback per session. The session is already closed by then: nothing is lost by ending quietly.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one, read back from the socket)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(f"cannot resolve {host!r}")
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        # Listening before the ready line is printed: a client that connects at once waits in the
        # backlog until uvicorn accepts, instead of being refused.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    env_kwargs: Mapping[str, Any] | None = None,
    tokenizer: Any = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout_s: float | None = None,
    log_level: str = "warning",
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve ``env_id`` over OpenEnv until interrupted (SIGINT / SIGTERM close every session).

    Prints one line when the server listens, with its address (``port=0`` picks a free port; the line
    says which): ``agent-gym serve: ID at http://HOST:PORT ...``.
    """
    import uvicorn

    app = create_app(
        env_id, env_kwargs=env_kwargs, tokenizer=tokenizer, max_sessions=max_sessions, session_timeout_s=session_timeout_s
    )
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}"
    line = (
        f"agent-gym serve: {env_id} at {url} (OpenEnv websocket ws://{shown}:{bound}/ws, "
        f"up to {max_sessions} sessions; Ctrl-C stops)"
    )
    if announce is None:
        print(line, flush=True)
    else:
        announce(line)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        # A peer that vanishes without closing its connection (a dead node) is noticed by the
        # websocket ping and its session closed.
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=5,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
