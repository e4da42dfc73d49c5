"""Search-R1's retrieval protocol over HTTP, served from a :class:`~agent_gym_searchqa.retrieval.RetrievalIndex`.

``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}`` answers
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}``: one list per query, best first,
``contents`` as Search-R1's corpus writes it (``"Title"\\nText``). With ``return_scores`` false each list holds
the documents themselves. ``topk`` left out (or null) is the server's ``--topk``. This is the request and the
answer of Search-R1's ``retrieval_server.py``, which verl's search tool and verl-tool call, so either side
can be swapped for the other. ``GET /health`` says what is served (``{"status": "ok", "passages", "method",
...}``). A bad request is answered 400 with ``{"error": "..."}`` naming what is wrong.

The server is the standard library's threading HTTP server (HTTP/1.1 keep-alive), nothing beyond the
index's own packages. :func:`serve` with ``workers > 1`` binds the socket once and forks that many
processes that accept on it; each opens the index memory-mapped, so they share one copy of it in memory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from agent_gym_searchqa.retrieval import IndexInfo, RetrievalIndex, read_info

__all__ = ["MAX_QUERIES", "MAX_TOPK", "RetrieverServer", "RequestError", "answer", "serve"]

#: Queries one request may carry, and passages one query may ask for: beyond them, a 400.
MAX_QUERIES = 4096
MAX_TOPK = 1000
_MAX_BODY_BYTES = 64 * 1024 * 1024


class RequestError(ValueError):
    """A request that does not follow the protocol: answered 400 with this message."""


def answer(index: RetrievalIndex, body: Any, default_topk: int) -> dict[str, Any]:
    """The ``/retrieve`` answer to a decoded request body (``RequestError`` for a bad one)."""
    if not isinstance(body, dict):
        raise RequestError('the body must be a JSON object: {"queries": [...], "topk": 3, "return_scores": true}')
    unknown = sorted(set(body) - {"queries", "topk", "return_scores"})
    if unknown:
        raise RequestError(f"unknown field(s) {unknown}; the fields are queries, topk, return_scores")
    queries = body.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError('"queries" must be a list of strings')
    if len(queries) > MAX_QUERIES:
        raise RequestError(f"{len(queries)} queries in one request; send at most {MAX_QUERIES}")
    topk = body.get("topk")
    topk = default_topk if topk is None else topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise RequestError(f'"topk" must be an integer from 1 to {MAX_TOPK} (or null for the default, {default_topk})')
    scores = body.get("return_scores", False)
    if not isinstance(scores, bool):
        raise RequestError('"return_scores" must be true or false')
    result: list[list[Any]] = []
    for hits in index.search(queries, topk):
        documents = [(index.document(row), score) for row, score in hits]
        result.append([{"document": d, "score": s} for d, s in documents] if scores else [d for d, _ in documents])
    return {"result": result}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client's batches reuse one connection
    # The headers and the body go out in two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (40 ms a request on Linux).
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # one line per request would drown the output of a busy server; /health counts them

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.split("?")[0] != "/health":
            self._send(404, {"error": f"no such path {self.path!r}: POST /retrieve, GET /health"})
            return
        self._send(200, self.server.owner.health())

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        owner = self.server.owner
        if self.path.split("?")[0] != "/retrieve":
            self._send(404, {"error": f"no such path {self.path!r}: POST /retrieve, GET /health"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(411, {"error": "a request needs a Content-Length"})
            return
        if length > _MAX_BODY_BYTES:
            self._send(413, {"error": f"the body is over {_MAX_BODY_BYTES} bytes"})
            self.close_connection = True
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
            result = answer(owner.index, body, owner.default_topk)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            owner.count("bad_requests")
            self._send(400, {"error": f"the body is not JSON: {exc}"})
            return
        except RequestError as exc:
            owner.count("bad_requests")
            self._send(400, {"error": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - a failing search is a 500 with its reason, never a dead server
            owner.count("errors")
            self._send(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        owner.count("requests")
        owner.count("queries", len(body["queries"]))
        self._send(200, result)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: RetrieverServer


class RetrieverServer:
    """The HTTP server of one index, on a socket it binds or one it is given (a forked worker's).

    Args:
        index: the index to serve.
        host, port: where to listen (port 0: a free one; :attr:`url` says which).
        default_topk: the passages per query when a request leaves ``topk`` out.
        sock: a bound, listening socket to accept on instead (``host`` and ``port`` are then unused).
    """

    def __init__(self, index: RetrievalIndex, host: str = "127.0.0.1", port: int = 8000, *, default_topk: int = 3,
                 sock: socket.socket | None = None):
        self.index = index
        self.default_topk = int(default_topk)
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.workers = 1
        if sock is None:
            self.http = _HTTPServer((host, port), _Handler)
        else:
            self.http = _HTTPServer(sock.getsockname()[:2], _Handler, bind_and_activate=False)
            self.http.socket.close()
            self.http.socket = sock
        self.http.owner = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT/retrieve``."""
        host, port = self.http.server_address[:2]
        return f"http://{host!s}:{port}/retrieve"

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.stats[what] += n

    def health(self) -> dict[str, Any]:
        with self._lock:
            stats = dict(self.stats)
        info = self.index.info
        return {"status": "ok", "passages": info.passages, "method": info.method, "source": info.source,
                "model": info.model, "default_topk": self.default_topk, "pid": os.getpid(), **stats}

    def serve_forever(self) -> None:
        self.http.serve_forever(poll_interval=0.2)

    def start(self) -> RetrieverServer:
        """Serve from a daemon thread of this process (tests, notebooks); :meth:`close` stops it."""
        self._thread = threading.Thread(target=self.serve_forever, name="retriever-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.http.shutdown()
            self._thread.join()
            self._thread = None
        self.http.server_close()

    def __enter__(self) -> RetrieverServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Stop(BaseException):
    """Raised by the SIGTERM handler in the main thread, which unwinds ``serve_forever`` (the request threads
    are daemons). Why not an Event or a shutdown thread: a handler that takes a lock can deadlock on a lock
    the interrupted main thread holds."""


def _raise_stop(*_: Any) -> None:
    raise _Stop


def serve(
    folder: str,
    host: str,
    port: int,
    *,
    workers: int = 1,
    default_topk: int = 3,
    device: str | None = None,
    ready: Callable[[str, IndexInfo], None] | None = None,
) -> int:
    """Serve the index ``folder`` until SIGINT or SIGTERM, with ``workers`` processes accepting on one socket.

    ``ready(url, info)`` is called once the socket listens (and, with one worker, the index is open).
    Returns the exit status: 0 when stopped, 1 when every worker died on its own (each says why on stderr).
    """
    info = read_info(folder)
    sock = socket.create_server((host, port), backlog=1024)
    url = f"http://{host}:{sock.getsockname()[1]}/retrieve"
    if workers <= 1:
        server = RetrieverServer(RetrievalIndex(folder, device=device), default_topk=default_topk, sock=sock)
        if ready is not None:
            ready(url, info)
        signal.signal(signal.SIGTERM, _raise_stop)
        try:
            server.serve_forever()
        except (KeyboardInterrupt, _Stop):
            pass
        finally:
            server.http.server_close()
        return 0
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # a worker: its own map of the index files (the page cache holds them once), then serve
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C and passes on a SIGTERM
                signal.signal(signal.SIGTERM, _raise_stop)
                worker = RetrieverServer(RetrievalIndex(folder, device=device), default_topk=default_topk, sock=sock)
                worker.serve_forever()
            except _Stop:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported, then the worker exits non-zero
                print(f"retriever worker {os.getpid()}: {type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
            finally:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the parent's second SIGTERM must not interrupt the exit
                os._exit(code)
        children.append(pid)
    if ready is not None:
        ready(url, info)
    signal.signal(signal.SIGTERM, _raise_stop)
    stopped = False
    try:
        while children:
            pid, _status = os.waitpid(-1, 0)  # a signal interrupts the wait
            children.remove(pid)
            print(f"retriever worker {pid} exited; {len(children)} left", file=sys.stderr)
    except (KeyboardInterrupt, _Stop):
        stopped = True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        sock.close()
    return 0 if stopped else 1
