"""An OpenAI-compatible HTTP endpoint on localhost whose completions come from whoever holds the session.

``POST /v1/chat/completions`` and ``GET /v1/models``, served by the standard library's threading HTTP
server (HTTP/1.1 keep-alive, one thread per connection: an agent program blocked on its completion
holds one thread, and nothing is imported beyond the standard library). Each program gets a
:class:`Session` and its own API key; the key routes its requests to the session
(``Authorization: Bearer KEY``, what every OpenAI client sends), so one server in a process serves
every env of that process, each episode with its own key.

A request is parsed (:func:`agent_gym.endpoint.wire.parse_request`; a bad one is answered 400 at once)
and handed to its session as a :class:`Request` event; the HTTP thread waits until the session's owner
answers it (:meth:`Request.reply`) or refuses it (:meth:`Request.fail`). The owner takes events with
:meth:`Session.next_event`, a :class:`concurrent.futures.Future` it can block on (``result(timeout)``)
or await (``asyncio.wrap_future``) without a thread of its own. When the owner closes the session
(the episode is over), every waiting request and every later one is answered 410 with the reason.
"""

from __future__ import annotations

import atexit
import collections
import json
import secrets
import threading
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

from agent_gym.endpoint.wire import APIError, ChatRequest, model_list, parse_request

__all__ = ["ChatCompletionsServer", "ProgramEnd", "Request", "Session", "shared_server"]

#: Requests larger than this are refused (413): a chat request is text, never this big.
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(eq=False)  # compared (and hashed) by identity: each is one HTTP request
class Request:
    """A chat-completions request waiting for its answer."""

    request: ChatRequest
    answer: Future = field(default_factory=Future)
    #: a unique id for the completion (``chatcmpl-...``)
    completion_id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")

    def reply(self, body: dict[str, Any]) -> None:
        """Answer with a ``chat.completion`` body (:func:`agent_gym.endpoint.wire.completion`)."""
        if not self.answer.done():
            self.answer.set_result(body)

    def fail(self, error: APIError) -> None:
        """Answer with an error."""
        if not self.answer.done():
            self.answer.set_exception(error)


@dataclass
class ProgramEnd:
    """The program returned (``value``) or failed (``error``, what went wrong in a line or a few)."""

    value: Any = None
    error: str | None = None


Event = Request | ProgramEnd


class Session:
    """The events of one program: its requests, then its end. Thread-safe."""

    def __init__(self, key: str):
        self.key = key
        self._lock = threading.Lock()
        self._events: collections.deque[Event] = collections.deque()
        self._waiter: Future | None = None
        self._closed: str | None = None
        self._open_requests: set[Request] = set()  # submitted and not yet answered
        self.requests = 0  # requests submitted

    @property
    def closed(self) -> str | None:
        """Why the session was closed, or ``None`` while it is open."""
        return self._closed

    def submit(self, request: ChatRequest) -> dict[str, Any]:
        """Hand ``request`` to the owner and wait for its answer (called by the HTTP thread).

        Raises:
            APIError: the owner refused the request, or the session is closed.
        """
        event = Request(request)
        with self._lock:
            if self._closed is not None:
                raise _over(self._closed)
            self.requests += 1
            self._open_requests.add(event)
        self._push(event)
        try:
            return event.answer.result()
        finally:
            with self._lock:
                self._open_requests.discard(event)

    def finish(self, value: Any = None, error: str | None = None) -> None:
        """The program ended (called by whatever runs it)."""
        self._push(ProgramEnd(value, error))

    def next_event(self) -> Future:
        """A future of the next event (an already-done one when an event is waiting)."""
        future: Future = Future()
        with self._lock:
            if self._events:
                future.set_result(self._events.popleft())
            else:
                self._waiter = future
        return future

    def close(self, reason: str) -> None:
        """End the session: waiting and later requests are answered 410 with ``reason``."""
        with self._lock:
            if self._closed is None:
                self._closed = reason
            waiting = list(self._open_requests)
            self._events.clear()
            self._waiter = None
        error = _over(self._closed or reason)
        for event in waiting:
            event.fail(error)

    def _push(self, event: Event) -> None:
        with self._lock:
            closed = self._closed
            if closed is None:
                waiter, self._waiter = self._waiter, None
                # a waiter the owner gave up on (its wait timed out and was cancelled) takes nothing
                if waiter is not None and waiter.set_running_or_notify_cancel():
                    waiter.set_result(event)
                else:
                    self._events.append(event)
        if closed is not None and isinstance(event, Request):
            event.fail(_over(closed))


def _over(reason: str) -> APIError:
    return APIError(410, f"this program's episode is over ({reason}); no more completions for its key",
                    type="episode_over", code="episode_over")


class ChatCompletionsServer:
    """``/v1/chat/completions`` and ``/v1/models`` on ``host:port`` (0: a free port), in a daemon thread.

    Args:
        host: the address to listen on (``127.0.0.1``: only this machine's programs).
        port: the port; 0 picks a free one (:attr:`port` says which).
        models: the names ``/v1/models`` lists (a request may name any model: the session's owner answers).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, models: Sequence[str] = ("agent-gym-policy",)):
        self.models = list(models)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._httpd = _HTTPServer((host, port), _handler_class(self))
        address = self._httpd.server_address
        self.host, self.port = str(address[0]), int(address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="agent-gym-endpoint", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """What a program's client takes as its base URL (``OPENAI_BASE_URL``): ``http://host:port/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    def open_session(self) -> Session:
        """A new session with a fresh API key (``session.key``)."""
        session = Session(f"agp-{secrets.token_hex(16)}")
        with self._lock:
            self._sessions[session.key] = session
        return session

    def close_session(self, session: Session, reason: str) -> None:
        """Close ``session`` (see :meth:`Session.close`) and forget its key."""
        session.close(reason)
        with self._lock:
            self._sessions.pop(session.key, None)

    def session(self, key: str) -> Session | None:
        with self._lock:
            return self._sessions.get(key)

    def close(self) -> None:
        """Stop serving; open sessions are closed."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            s.close("the endpoint was shut down")
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _HTTPServer(ThreadingHTTPServer):
    # Hundreds of programs may connect at once (an RL batch starting): the stdlib's backlog of 5 would
    # drop their connections (a reset, or a SYN retried a second later).
    request_queue_size = 1024
    daemon_threads = True


def _handler_class(server: ChatCompletionsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: OpenAI clients reuse one connection per program
        disable_nagle_algorithm = True  # small replies go out at once, not after the client's delayed ACK

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass  # one line per request on stderr would drown a training log

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = self.path.split("?", 1)[0].rstrip("/")
            if path in ("/v1/models", "/models"):
                self._send(200, model_list(server.models))
            else:
                self._send_error(APIError(404, f"no such path {path!r}: GET /v1/models, POST /v1/chat/completions",
                                          code="unknown_url"))

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                body = self._body()
                if path not in ("/v1/chat/completions", "/chat/completions"):
                    raise APIError(404, f"no such path {path!r}: POST /v1/chat/completions", code="unknown_url")
                session = server.session(self._key())
                if session is None:
                    raise APIError(401, "unknown API key: each program gets its own key from its env "
                                        "(OPENAI_API_KEY, or the api_key argument of the program)",
                                   type="authentication_error", code="invalid_api_key")
                self._send(200, session.submit(parse_request(body)))
            except APIError as error:
                self._send_error(error)
            except Exception as exc:  # noqa: BLE001 - the program gets a 500 saying what failed, the server lives on
                self._send_error(APIError(500, f"the endpoint failed: {type(exc).__name__}: {exc}", type="server_error"))

        def _key(self) -> str:
            auth = self.headers.get("Authorization", "")
            scheme, _, token = auth.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""

        def _body(self) -> bytes:
            length = self.headers.get("Content-Length")
            if length is None:
                self.close_connection = True  # the body was not read: the connection cannot carry another request
                raise APIError(411, "send the body with a Content-Length header")
            size = int(length)
            if size > MAX_BODY_BYTES:
                self.close_connection = True
                raise APIError(413, f"request body of {size} bytes; the limit is {MAX_BODY_BYTES}")
            return self.rfile.read(size)

        def _send_error(self, error: APIError) -> None:
            self._send(error.status, error.body())

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode("latin-1")
            self.wfile.write(head + data)  # one write: headers and body in one segment
            self.wfile.flush()

    return Handler


_SHARED: ChatCompletionsServer | None = None
_SHARED_LOCK = threading.Lock()


def shared_server() -> ChatCompletionsServer:
    """The process's endpoint on ``127.0.0.1`` (a free port), started on first use, stopped at exit:
    every env of the process opens its sessions on it."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = ChatCompletionsServer()
            atexit.register(_SHARED.close)
        return _SHARED
