"""Clients of an ``agent-gym serve`` server.

- :class:`AgentGymClient`: openenv-core's ``EnvClient`` (async, one websocket = one session) typed with
  this package's action and observation: ``await client.reset(task_id=...)`` and
  ``await client.step(ids)`` return OpenEnv ``StepResult`` objects whose ``observation`` is a
  :class:`~agent_gym_openenv.models.ChatObservation`. For code written against OpenEnv.
- :class:`RemoteEnv`: the same session as a ``gymnasium.Env``: ``reset`` / ``step`` (and ``await
  areset`` / ``await astep``) return exactly what the env returns in process, ``(obs, info)`` and
  ``(obs, reward, terminated, truncated, info)`` with ``obs = {"messages", "tools", "prompt_ids"}``
  (``prompt_ids`` an int64 array). For code written against this project's envs: the episode engine,
  a trainer adapter, a user's own loop.
- :func:`remote_env_factory`: new ``RemoteEnv`` sessions spread round-robin over several servers.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from openenv.core.client_types import StepResult

from agent_gym_openenv import private
from agent_gym_openenv.models import ChatObservation, EpisodeState, TokenAction

__all__ = ["ServerError", "AgentGymClient", "RemoteEnv", "remote_env_factory", "fetch_env_info", "wait_for_server"]


class ServerError(RuntimeError):
    """An error the server answered a request with (OpenEnv's ``error`` message), or a connection the
    server closed. ``code`` is OpenEnv's error code (``VALIDATION_ERROR``, ``EXECUTION_ERROR``,
    ``CAPACITY_REACHED``, ...); ``errors`` the validation errors, when there are any."""

    def __init__(self, message: str, *, code: str | None = None, errors: Sequence[Mapping[str, Any]] = ()):
        self.message = message
        self.code = code
        self.errors = [dict(e) for e in errors]
        text = message
        if self.errors:
            text += ": " + "; ".join(_error_line(e) for e in self.errors)
        super().__init__(f"{text} (code {code})" if code else text)

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> "ServerError":
        return cls(str(data.get("message", "unknown error")), code=data.get("code"), errors=data.get("errors") or ())


def _error_line(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()) if part != "data")
    return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", ""))


def _http_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if url.startswith(ws):
            return http + url[len(ws):]
    return url if "://" in url else f"http://{url}"


def _get_json(url: str, timeout: float) -> Any:
    host = urllib.parse.urlsplit(url).hostname or ""
    # A local server is reached directly even where an HTTP proxy is configured.
    handlers = [urllib.request.ProxyHandler({})] if host in ("localhost", "127.0.0.1", "::1") else []
    with urllib.request.build_opener(*handlers).open(url, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def fetch_env_info(base_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """The server's ``/env_info``: env id, constructor arguments, tokenizer, ``vocab_size``,
    ``end_of_turn_ids`` (a generator's stop ids), ``max_action_tokens``, ``max_context_tokens``, tools."""
    url = _http_url(base_url) + "/env_info"
    try:
        return dict(_get_json(url, timeout))
    except urllib.error.HTTPError as exc:
        raise ConnectionError(f"{url} answered {exc.code}: is this an agent-gym serve server?") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ConnectionError(f"no agent-gym server at {_http_url(base_url)}: {exc}") from None


def wait_for_server(base_url: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Wait until the server at ``base_url`` answers ``/env_info``; returns it (``TimeoutError`` after
    ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fetch_env_info(base_url, timeout=min(5.0, timeout_s))
        except ConnectionError as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no agent-gym server answered at {base_url} within {timeout_s} s ({exc})") from None
            time.sleep(0.2)


class AgentGymClient(private.EnvClientBridge[Any, ChatObservation, EpisodeState]):
    """openenv-core's async ``EnvClient`` for an ``agent-gym serve`` server (one instance = one session).

    ``step`` takes the generated ids (a list, a numpy array), a ``str`` (the text convenience) or a
    :class:`TokenAction`. ``reset`` takes ``seed``, ``options``, ``task_id`` and ``episode_id``. Errors
    the server answers with raise :class:`ServerError` carrying its code and validation errors.

    openenv-core's hooks are reached through :class:`agent_gym_openenv.private.EnvClientBridge`
    (``encode_action``, ``decode_result``, ``decode_state``, ``exchange``).
    """

    def encode_action(self, action: Any) -> dict[str, Any]:
        from agent_gym.trajectory import to_jsonable

        if isinstance(action, TokenAction):
            return action.model_dump(exclude_none=True)
        if isinstance(action, str):
            return {"text": action}
        if isinstance(action, Mapping):
            return dict(action)
        # Sent as given (numpy values made plain): the server, not the client, says what is wrong with
        # a malformed action.
        return {"token_ids": to_jsonable(action.tolist() if isinstance(action, np.ndarray) else list(action))}

    def decode_result(self, payload: Mapping[str, Any]) -> StepResult[ChatObservation]:
        reward = payload.get("reward")
        done = bool(payload.get("done", False))
        observation = ChatObservation.model_validate({**dict(payload.get("observation") or {}), "reward": reward, "done": done})
        return StepResult(observation=observation, reward=reward, done=done)

    def decode_state(self, payload: Mapping[str, Any]) -> EpisodeState:
        return EpisodeState.model_validate(dict(payload))

    async def exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            await private.send(self, message)
            response = await private.receive(self)
        except ConnectionClosed as exc:
            # A server that refuses a session (CAPACITY_REACHED) says why in one message and closes
            # the connection, which a send may find already closed: that message is the error.
            last = await self._last_message()
            private.forget_websocket(self)
            if last is not None and last.get("type") == "error":
                raise ServerError.from_payload(last.get("data") or {}) from None
            raise ServerError(f"the server closed the connection ({exc})", code="CONNECTION_CLOSED") from None
        if response.get("type") == "error":
            raise ServerError.from_payload(response.get("data") or {})
        return response

    async def _last_message(self) -> dict[str, Any] | None:
        """A message the server sent before it closed the connection, if one is still unread."""
        ws = private.websocket(self)
        if ws is None:
            return None
        try:
            raw = await asyncio.wait_for(ws.recv(), timeout=1.0)
            return json.loads(raw)
        except Exception:  # noqa: BLE001 - nothing left to read: the caller reports the closed connection
            return None


# -- RemoteEnv -----------------------------------------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _client_loop() -> asyncio.AbstractEventLoop:
    """The event loop every RemoteEnv's connection lives on (one daemon thread per process).

    A websocket belongs to the loop that opened it; keeping all of them on one loop of their own lets a
    RemoteEnv be stepped from plain code (``step``) and from any caller's event loop (``await astep``).
    """
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agent-gym-openenv-client", daemon=True).start()
            _loop = loop
        return _loop


class RemoteEnv(gym.Env):
    """One session of an ``agent-gym serve`` server as a ``gymnasium.Env``.

    ``reset`` / ``step`` return the env's own ``(obs, info)`` / ``(obs, reward, terminated, truncated,
    info)``, as ``gym.make(ID)`` does in process: ``obs`` holds ``messages``, ``tools`` and
    ``prompt_ids`` (int64 array), ``info`` is the env's (JSON types: tuples come back as lists).
    ``areset`` / ``astep`` are the same for event loops. ``action_space`` / ``observation_space`` are the
    served env's (from ``/env_info``, read once at construction; ``env_info`` keeps it), and
    ``spec.id`` is the served env's id.

    The connection opens on the first reset and closes with :meth:`close` (the server then closes the
    session's env); a RemoteEnv plays any number of episodes, one at a time.

    Args:
        base_url: ``http://host:port`` (or ``ws://...``) of the server.
        connect_timeout_s: for the connection and ``/env_info``.
        message_timeout_s: longest wait for one reply (a step with slow tools takes its tools' time).
    """

    metadata = {"render_modes": []}

    def __init__(self, base_url: str, *, connect_timeout_s: float = 10.0, message_timeout_s: float = 600.0):
        from gymnasium.envs.registration import EnvSpec

        from agent_gym.core.spaces import ChatContextSpace, TokenSequence

        self.base_url = _http_url(base_url)
        self.env_info = fetch_env_info(self.base_url, timeout=connect_timeout_s)
        vocab = int(self.env_info["vocab_size"])
        max_action = int(self.env_info["max_action_tokens"])
        self.action_space = TokenSequence(vocab, max_action)
        self.observation_space = ChatContextSpace(vocab, int(self.env_info["max_context_tokens"]) + max_action)
        self.spec = EnvSpec(
            id=str(self.env_info["env_id"]),
            entry_point="agent_gym_openenv.client:RemoteEnv",
            kwargs={"base_url": self.base_url},
        )
        self.client = AgentGymClient(
            self.base_url, connect_timeout_s=connect_timeout_s, message_timeout_s=message_timeout_s
        )
        self._closed = False

    # -- gymnasium API ------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        return self._run(self._reset(seed, options))

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self._run(self._step(action))

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        return await self._arun(self._reset(seed, options))

    async def astep(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return await self._arun(self._step(action))

    def close(self) -> None:
        """Close the session (the server closes its env). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._run(self.client.close())

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._arun(self.client.close())

    def __del__(self) -> None:
        # A RemoteEnv dropped without close() would keep its session (and the server's env) open as
        # long as this process lives: close it in the background (best effort, never blocking).
        if getattr(self, "_closed", True) or private.websocket(self.client) is None:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self.client.close(), _client_loop())
        except Exception:  # noqa: BLE001 - interpreter shutdown: the connection dies with the process
            pass

    # -- internals ------------------------------------------------------------------------------------

    async def _reset(self, seed: int | None, options: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._closed:
            raise RuntimeError("this RemoteEnv is closed")
        data: dict[str, Any] = {}
        if seed is not None:
            data["seed"] = int(seed)
        if options:
            data["options"] = dict(options)
        result = await self.client.reset(**data)
        return _obs(result.observation), result.observation.info

    async def _step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._closed:
            raise RuntimeError("this RemoteEnv is closed")
        result = await self.client.step(action)
        o = result.observation
        return _obs(o), float(result.reward or 0.0), o.terminated, o.truncated, o.info

    def _run(self, coro: Any) -> Any:
        loop = _client_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("a blocking RemoteEnv call from the client loop itself; use await env.astep(...)")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def _arun(self, coro: Any) -> Any:
        loop = _client_loop()
        if asyncio.get_running_loop() is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def _obs(o: ChatObservation) -> dict[str, Any]:
    return {"messages": o.messages, "tools": o.tools, "prompt_ids": np.asarray(o.prompt_ids, dtype=np.int64)}


def remote_env_factory(urls: Sequence[str], **kwargs: Any) -> Callable[[], RemoteEnv]:
    """A function that returns a new :class:`RemoteEnv` on each call, on the servers of ``urls`` in
    turn (round-robin): the ``make_env`` of a rollout that spreads its episodes over several servers.
    ``kwargs`` go to every ``RemoteEnv``."""
    if not urls:
        raise ValueError("remote_env_factory needs at least one server URL")
    order = itertools.cycle([str(u) for u in urls])
    lock = threading.Lock()

    def make() -> RemoteEnv:
        with lock:
            url = next(order)
        return RemoteEnv(url, **kwargs)

    return make
