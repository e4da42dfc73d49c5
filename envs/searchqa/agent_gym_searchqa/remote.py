"""A client of Search-R1's ``/retrieve`` protocol that batches the searches of every episode in flight.

``SearchQAEnv(retriever=URL)`` sends its searches here. Each search is queued; a background thread sends
what has queued within a short window (``window_s``, or sooner once ``max_batch`` queries wait) as one
``POST {"queries": [...], "topk": k, "return_scores": true}``, and hands each episode its list. So the
episodes of one process that step concurrently (``astep`` in one event loop, or ``step`` in threads)
share one request per window, which is what a retrieval server is fast at (one batched search instead
of many small ones). Searches of different ``topk`` go in separate requests.

Nothing here raises out of a tool: a timeout, a refused connection, an HTTP error status or an answer
that is not the protocol's becomes a :class:`RetrieverError`, a tool error the policy reads and the env
counts by kind (``retriever_timeout``, ``retriever_unreachable``, ``retriever_http_error``,
``retriever_bad_response``); the details (URL, status, body) go to this module's logger and to
:attr:`RetrieverClient.stats`. Only the standard library is used (``http.client``, one keep-alive
connection per sending thread).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from agent_gym.tools import ToolError

from agent_gym_searchqa.corpus import split_contents

__all__ = ["ERROR_KINDS", "RemoteHit", "RetrieverClient", "RetrieverError", "normalize_url", "parse_response", "shared_client"]

logger = logging.getLogger(__name__)

#: The tool error kinds a retriever failure counts under in ``info["tool_error_kinds"]``.
ERROR_KINDS = ("retriever_timeout", "retriever_unreachable", "retriever_http_error", "retriever_bad_response")
# What the policy reads for each: what happened and what it can do (the URL and details are the logger's).
_MESSAGES = {
    "retriever_timeout": "the search service did not answer in time ({detail}); search again, or answer from what you have read",
    "retriever_unreachable": "the search service cannot be reached ({detail}); search again later, or answer from what you have read",
    "retriever_http_error": "the search service failed ({detail}); search again, or answer from what you have read",
    "retriever_bad_response": "the search service sent an answer that could not be read ({detail}); search again",
}


class RetrieverError(ToolError):
    """A failed search: ``kind`` is one of :data:`ERROR_KINDS`; the message is for the policy."""

    def __init__(self, kind: str, detail: str):
        super().__init__(_MESSAGES[kind].format(detail=detail), kind=kind)
        self.detail = detail


@dataclass(frozen=True)
class RemoteHit:
    """One passage a retriever returned: its id, title, text (from ``contents``) and score (``None``: not sent)."""

    id: str
    title: str
    text: str
    score: float | None


def normalize_url(url: str) -> str:
    """``url`` as a ``/retrieve`` URL: ``http://host:port`` gets the path ``/retrieve``.

    Raises:
        ValueError: not an http(s) URL with a host (the message shows the form).
    """
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"retriever must be an http(s) URL such as http://127.0.0.1:8000/retrieve, got {url!r}")
    if parts.path in ("", "/"):
        return parts._replace(path="/retrieve").geturl()
    return parts.geturl()


def _document_hit(entry: Any) -> RemoteHit:
    score: Any = None
    doc = entry
    if isinstance(entry, dict) and isinstance(entry.get("document"), dict):
        doc, score = entry["document"], entry.get("score")
    if not isinstance(doc, dict):
        raise ValueError(f"a result is {type(doc).__name__}, not a document object")
    contents = doc.get("contents")
    if isinstance(contents, str):
        title, text = split_contents(contents)
        if doc.get("title"):
            title = str(doc["title"]).strip().strip('"')
    elif isinstance(doc.get("text"), str):
        title, text = str(doc.get("title", "")).strip().strip('"'), doc["text"]
    else:
        raise ValueError("a document has no contents (nor title and text)")
    # Search-R1's BM25 server sends no id: the title names the passage then (what `open` takes).
    doc_id = next((str(doc[k]) for k in ("id", "doc_id", "docid", "_id") if doc.get(k) is not None), title)
    try:
        value = None if score is None else float(score)
    except (TypeError, ValueError):
        value = None
    return RemoteHit(doc_id, title, text.strip(), value)


def parse_response(body: Any, queries: int) -> list[list[RemoteHit]]:
    """The hits of each query in a ``/retrieve`` answer (``{"result": [...]}``).

    Raises:
        ValueError: the answer does not have that shape, or has another number of lists than queries.
    """
    if not isinstance(body, dict) or not isinstance(body.get("result"), list):
        raise ValueError('expected {"result": [...]}')
    result = body["result"]
    if len(result) != queries:
        raise ValueError(f"{len(result)} result lists for {queries} queries")
    hits: list[list[RemoteHit]] = []
    for per_query in result:
        if not isinstance(per_query, list):
            raise ValueError(f"a result list is {type(per_query).__name__}")
        hits.append([_document_hit(entry) for entry in per_query])
    return hits


@dataclass
class _Pending:
    query: str
    topk: int
    future: Future
    queued: float


class RetrieverClient:
    """Batched searches against one ``/retrieve`` URL (see the module docstring).

    Args:
        url: the server's ``/retrieve`` URL (:func:`normalize_url`).
        timeout_s: seconds one request may take (connecting and reading) before it is a ``retriever_timeout``.
        window_s: how long the first queued search waits for others to join its request.
        max_batch: the most queries of one request (a full batch is sent at once).
        max_in_flight: requests sent concurrently (a slow one does not hold up the next window).
    """

    def __init__(self, url: str, *, timeout_s: float = 10.0, window_s: float = 0.005, max_batch: int = 64,
                 max_in_flight: int = 4):
        if not timeout_s > 0 or window_s < 0 or int(max_batch) < 1 or int(max_in_flight) < 1:
            raise ValueError("retriever timeout_s must be > 0, window_s >= 0, max_batch and max_in_flight >= 1")
        self.url = normalize_url(url)
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.timeout_s = float(timeout_s)
        self.window_s = float(window_s)
        self.max_batch = int(max_batch)
        #: ``requests``, ``queries``, ``batched_queries`` (queries that shared a request with another), and one
        #: count per error kind (requests that failed so), since this client was made.
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=int(max_in_flight), thread_name_prefix="retriever-request")
        self._local = threading.local()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- searching -------------------------------------------------------------------------------------

    def submit(self, query: str, topk: int) -> Future:
        """Queue one search; the future's result is its ``list[RemoteHit]`` or a :class:`RetrieverError`."""
        future: Future = Future()
        with self._cond:
            if self._closed:
                future.set_exception(RetrieverError("retriever_unreachable", "the client is closed"))
                return future
            self._pending.append(_Pending(query, int(topk), future, time.monotonic()))
            if self._thread is None:
                self._thread = threading.Thread(target=self._collect, name="retriever-batcher", daemon=True)
                self._thread.start()
            self._cond.notify()
        return future

    def search(self, query: str, topk: int) -> list[RemoteHit]:
        """One search, blocking (it still shares a request with those queued alongside)."""
        return self.submit(query, topk).result()

    async def asearch(self, query: str, topk: int) -> list[RemoteHit]:
        """One search, awaited without a thread of its own."""
        import asyncio

        return await asyncio.wrap_future(self.submit(query, topk))

    def close(self) -> None:
        """Fail what is queued, stop the batcher thread and the request pool."""
        with self._cond:
            self._closed = True
            pending, self._pending = self._pending, []
            self._cond.notify_all()
        for p in pending:
            p.future.set_exception(RetrieverError("retriever_unreachable", "the client is closed"))
        self._pool.shutdown(wait=False)

    # -- the batcher -----------------------------------------------------------------------------------

    def _collect(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                deadline = self._pending[0].queued + self.window_s
                while len(self._pending) < self.max_batch and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            by_topk: dict[int, list[_Pending]] = {}
            for p in batch:
                by_topk.setdefault(p.topk, []).append(p)
            for topk, group in by_topk.items():
                try:
                    self._pool.submit(self._send, topk, group)
                except RuntimeError:  # the pool is shut down: close() fails what it still holds
                    for p in group:
                        p.future.set_exception(RetrieverError("retriever_unreachable", "the client is closed"))

    def _send(self, topk: int, group: list[_Pending]) -> None:
        try:
            hits = self._request([p.query for p in group], topk)
        except RetrieverError as exc:
            for p in group:
                p.future.set_exception(exc)
            return
        except BaseException as exc:  # noqa: BLE001 - never leave a search waiting forever
            error = RetrieverError("retriever_bad_response", f"{type(exc).__name__}: {exc}")
            logger.warning("retriever %s: %s", self.url, error.detail)
            for p in group:
                p.future.set_exception(error)
            return
        for p, found in zip(group, hits):
            p.future.set_result(found)

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = kind(self._host, self._port, timeout=self.timeout_s)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _count(self, **counts: int) -> None:
        with self._stats_lock:  # requests are sent from several threads
            self.stats.update(counts)

    def _fail(self, kind: str, detail: str, log: str) -> RetrieverError:
        self._count(**{kind: 1})
        logger.warning("retriever %s: %s", self.url, log)
        return RetrieverError(kind, detail)

    def _request(self, queries: list[str], topk: int) -> list[list[RemoteHit]]:
        payload = json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self._count(requests=1, queries=len(queries), batched_queries=len(queries) if len(queries) > 1 else 0)
        for attempt in (0, 1):
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            try:
                conn.request("POST", self._path, body=payload, headers=headers)
                response = conn.getresponse()
                status, reason, raw = response.status, response.reason, response.read()
                break
            except (socket.timeout, TimeoutError):
                self._drop_connection()
                raise self._fail("retriever_timeout", f"no answer within {self.timeout_s:g} s",
                                 f"no answer within {self.timeout_s:g} s") from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self._drop_connection()
                if reused and attempt == 0:
                    continue  # the server closed an idle keep-alive connection: one fresh try
                raise self._fail("retriever_unreachable", type(exc).__name__, f"{type(exc).__name__}: {exc}") from None
            except OSError as exc:  # refused, no route, unknown host
                self._drop_connection()
                what = exc.strerror or type(exc).__name__
                raise self._fail("retriever_unreachable", what, f"{type(exc).__name__}: {exc}") from None
            except http.client.HTTPException as exc:
                self._drop_connection()
                raise self._fail("retriever_bad_response", type(exc).__name__, f"{type(exc).__name__}: {exc}") from None
        if status != 200:
            raise self._fail("retriever_http_error", f"HTTP {status} {reason}",
                             f"HTTP {status} {reason}: {raw[:300].decode(errors='replace')}")
        try:
            return parse_response(json.loads(raw), len(queries))
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._fail("retriever_bad_response", "not Search-R1's /retrieve format",
                             f"{exc}; body: {raw[:300].decode(errors='replace')}") from None


_SHARED: dict[tuple[Any, ...], RetrieverClient] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(url: str, *, timeout_s: float = 10.0, window_s: float = 0.005, max_batch: int = 64) -> RetrieverClient:
    """The process's client for these settings: every env of a process with the same ``retriever=`` shares
    one, so their searches share requests."""
    key = (normalize_url(url), float(timeout_s), float(window_s), int(max_batch))
    with _SHARED_LOCK:
        client = _SHARED.get(key)
        if client is None:
            client = _SHARED[key] = RetrieverClient(key[0], timeout_s=key[1], window_s=key[2], max_batch=key[3])
        return client


def _forget_after_fork() -> None:
    # A forked child has none of the parent's threads: its envs start clients of their own.
    global _SHARED_LOCK
    _SHARED.clear()
    _SHARED_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
