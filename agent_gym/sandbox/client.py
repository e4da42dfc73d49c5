"""The client side of the sandbox: starts the warm server, sends calls, hands back results.

One :class:`Sandbox` owns one server process (see ``_server.py``) and two threads: a reader that
turns result frames into resolved futures, and a writer used only when the socket is momentarily
full. ``submit`` never blocks: it returns a :class:`concurrent.futures.Future`, so the same object
serves synchronous code (``run``), any number of event loops (``arun`` wraps the future) and threads.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Mapping

from agent_gym.sandbox.config import SandboxConfig, SandboxResult

__all__ = ["Sandbox", "SandboxError", "SandboxSession", "shared_sandbox"]

_SERVER = str(Path(__file__).with_name("_server.py"))
_HEADER = struct.Struct(">I")
# The server gets a scrubbed environment: the host's variables (API keys, tokens) never reach code.
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
_ENV_SET = {
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1",
    "MALLOC_ARENA_MAX": "2", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
}


class SandboxError(RuntimeError):
    """The sandbox server could not be started (never raised for what the code does)."""


def _frame(obj: Any) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(data)) + data


_STAGE_MARKS = ("t_recv", "t_dispatch", "t_exec0", "t_exec1", "t_done")


def _stages(msg: dict[str, Any], t_submit: float, t_delivered: float) -> dict[str, float] | None:
    """``SandboxResult.stages`` from the server's timestamps (the same monotonic clock as ours)."""
    marks: list[float] = [m for k in _STAGE_MARKS if isinstance(m := msg.get(k), (int, float)) and m > 0]
    if len(marks) != len(_STAGE_MARKS):
        return None
    recv, dispatch, exec0, exec1, done = marks
    return {"to_server": recv - t_submit, "queued": dispatch - recv, "to_worker": exec0 - dispatch,
            "from_worker": done - exec1, "to_client": t_delivered - done}


class _Connection:
    """One running server: its process, socket and I/O threads."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.owner_pid = os.getpid()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
        env.update(_ENV_SET)
        python = config.python or sys.executable
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-B", _SERVER, str(child.fileno()), json.dumps(config.to_server())],
                pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            child.close()
        self.sock = parent
        self.alive = True
        self.futures: dict[int, tuple[concurrent.futures.Future, float, dict]] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        try:
            self.ready = self._handshake()
        except BaseException:
            self.sock.close()
            raise
        self.isolation: dict[str, Any] = self.ready.get("isolation", {})
        self._backlog: collections.deque[bytes] = collections.deque()
        self._writer_busy = False
        self._writer_wake = threading.Condition(self.lock)
        self._reader = threading.Thread(target=self._read_loop, name="sandbox-reader", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name="sandbox-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    def _handshake(self) -> dict[str, Any]:
        self.sock.settimeout(self.config.startup_timeout_s)
        buf = bytearray()
        try:
            while True:
                frames = self._frames(buf)
                if frames:
                    msg = frames[0]
                    self._leftover = buf
                    break
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise SandboxError(f"the sandbox server exited during start-up (status {self.proc.wait()})")
                buf += chunk
        except socket.timeout:
            self.proc.kill()
            raise SandboxError(f"the sandbox server did not start within {self.config.startup_timeout_s} s") from None
        finally:
            self.sock.settimeout(None)
        if msg.get("fatal"):
            self.proc.kill()
            raise SandboxError(f"the sandbox server failed to start: {msg['fatal']}\n{msg.get('traceback', '')}")
        return msg

    @staticmethod
    def _frames(buf: bytearray) -> list[dict[str, Any]]:
        out = []
        while len(buf) >= 4:
            (n,) = _HEADER.unpack_from(buf, 0)
            if len(buf) < 4 + n:
                break
            out.append(json.loads(bytes(buf[4 : 4 + n])))
            del buf[: 4 + n]
        return out

    # -- sending ----------------------------------------------------------------------------------------

    def send(self, msg: dict[str, Any]) -> None:
        data = _frame(msg)
        with self.lock:
            if not self.alive:
                raise ConnectionError("sandbox server is not running")
            if not self._backlog and not self._writer_busy:
                try:
                    n = self.sock.send(data, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    n = 0
                except OSError:
                    self.alive = False
                    raise
                if n == len(data):
                    return
                data = data[n:]
            self._backlog.append(data)
            self._writer_wake.notify()

    def _write_loop(self) -> None:
        while True:
            with self.lock:
                while not self._backlog and self.alive:
                    self._writer_wake.wait()
                if not self.alive:
                    return
                data = self._backlog.popleft()
                self._writer_busy = True
            try:
                self.sock.sendall(data)
            except OSError:
                self._die("the connection to the sandbox server broke")
                return
            finally:
                with self.lock:
                    self._writer_busy = bool(self._backlog)

    def submit(self, msg: dict[str, Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            call_id = next(self.ids)
            self.futures[call_id] = (future, time.monotonic(), msg)
        msg["id"] = call_id
        try:
            self.send(msg)
        except OSError:
            self._die("the sandbox server is not running")
        return future

    # -- receiving --------------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        buf = getattr(self, "_leftover", bytearray())
        while True:
            for msg in self._frames(buf):
                self._deliver(msg)
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self._die("the sandbox server stopped")
                return
            buf += chunk

    def _deliver(self, msg: dict[str, Any]) -> None:
        with self.lock:
            call_id = msg.get("id")
            entry = self.futures.pop(call_id, None) if call_id is not None else None
        if entry is None:
            return
        future, t_submit, _ = entry
        if msg.get("op") != "result":
            future.set_result(msg)
            return
        delivered = time.monotonic()
        latency = delivered - t_submit
        exec_s = float(msg.get("exec_s") or 0.0)
        result = SandboxResult(
            kind=msg.get("kind", "error"),
            output=msg.get("output") or "",
            error=msg.get("error"),
            traceback=msg.get("traceback"),
            detail=msg.get("detail"),
            truncated=bool(msg.get("truncated")),
            exec_s=exec_s,
            cpu_s=float(msg.get("cpu_s") or 0.0),
            latency_s=latency,
            overhead_s=max(0.0, latency - exec_s),
            state_reset=bool(msg.get("state_reset")),
            violations=tuple(msg.get("violations") or ()),
            worker_setup_s=msg.get("setup_s"),
            stages=_stages(msg, t_submit, delivered),
            output_limit=self.config.output_bytes,
        )
        if not future.done():
            future.set_result(result)

    def _die(self, why: str) -> None:
        with self.lock:
            self.alive = False
            pending = list(self.futures.values())
            self.futures.clear()
            self._writer_wake.notify_all()
        for future, t_submit, msg in pending:
            if future.done():
                continue
            if msg.get("op") == "run":
                future.set_result(SandboxResult(kind="error", detail="server", error=f"SandboxError: {why}", latency_s=time.monotonic() - t_submit))
            else:
                future.set_result({"op": "error", "error": why})

    def close(self) -> None:
        with self.lock:
            was_alive = self.alive
            self.alive = False
            self._writer_wake.notify_all()
        if was_alive:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        self._die("the sandbox was closed")


class Sandbox:
    """A Python code sandbox: every call runs in its own locked-down process forked from a warm server.

    Args:
        config: limits and options (:class:`SandboxConfig`, a dict of its fields, or ``None``).
        **options: fields of :class:`SandboxConfig` (override ``config``).

    Calls::

        sandbox = Sandbox(timeout_s=5)
        result = sandbox.run("print(6 * 7)")               # SandboxResult(kind="ok", output="42\\n")
        result = await sandbox.arun("import time; time.sleep(1)")   # never blocks the event loop
        with sandbox.session() as s:                        # one persistent worker: globals survive
            s.run("x = 41")
            s.run("x + 1").output                           # "42\\n"

    What the code runs under (see :attr:`isolation` for what is in force on this machine, and the
    package documentation for the limits of each layer): its own process; when the server runs as
    root, its own unprivileged uid in a private root of read-only mounts with an empty network
    namespace; a seccomp filter (no fork/exec, no network sockets); rlimits; an audit hook; a
    wall-clock limit; a throwaway working directory.

    The server starts in the constructor (about 0.1 s, or ~1 s with pandas preloaded) and is
    restarted transparently if it dies. ``close()`` (or interpreter exit) stops it.
    """

    def __init__(self, config: SandboxConfig | Mapping[str, Any] | None = None, **options: Any):
        base = SandboxConfig.coerce(dict(config) if isinstance(config, Mapping) else config)
        if options:
            base = SandboxConfig(**{**base.__dict__, **options})
        self.config = base
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._closed = False
        self._connection()
        _LIVE.add(self)

    # -- public API ------------------------------------------------------------------------------------

    @property
    def isolation(self) -> dict[str, Any]:
        """Which isolation layers are in force (``setuid``, ``chroot``, ``netns``, ``seccomp``,
        ``audit_hook``, the uid range, ``errors`` of layers that could not be set up)."""
        conn = self._connection()
        return {**conn.isolation, "errors": list(conn.ready.get("errors", [])), "preloaded": conn.ready.get("preloaded", [])}

    @property
    def server_pid(self) -> int:
        return self._connection().proc.pid

    def submit(
        self,
        code: str,
        *,
        files: Mapping[str, str | bytes] | None = None,
        prelude: str | None = None,
        timeout_s: float | None = None,
        cpu_s: float | None = None,
        session: "SandboxSession | None" = None,
    ) -> concurrent.futures.Future:
        """Start a call and return a future of its :class:`SandboxResult` (never raises for the code).

        Args:
            code: Python source, run as a script (``__name__ == "__main__"``).
            files: written into the working directory before the code runs (name -> content).
            prelude: code run before ``code`` in the same namespace, its output discarded (e.g.
                ``"import pandas as pd"``).
            timeout_s / cpu_s: override the config's limits for this call.
            session: run in this stateful session (its files/prelude apply instead).
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {type(code).__name__}")
        msg: dict[str, Any] = {"op": "run", "code": code}
        if timeout_s is not None:
            msg["timeout_s"] = float(timeout_s)
        if cpu_s is not None:
            msg["cpu_s"] = float(cpu_s)
        conn = self._connection()
        reset = False
        if session is not None:
            if session.closed:
                raise ValueError("this sandbox session is closed")
            msg["session"] = session.id
            if session._conn is not conn:
                msg["files"], msg["prelude"] = _encode_files(session.files), session.prelude
                reset = session._conn is not None  # it lived on a server that has died since
                session._conn = conn
        else:
            msg["files"], msg["prelude"] = _encode_files(files), prelude
        future = conn.submit(msg)
        if reset:
            return _mark_reset(future)
        return future

    def run(self, code: str, **kwargs: Any) -> SandboxResult:
        """Run ``code`` and wait for its result (see :meth:`submit` for the arguments)."""
        return self.submit(code, **kwargs).result()

    async def arun(self, code: str, **kwargs: Any) -> SandboxResult:
        """Run ``code`` without blocking the event loop (see :meth:`submit` for the arguments)."""
        return await asyncio.wrap_future(self.submit(code, **kwargs))

    def session(self, *, files: Mapping[str, str | bytes] | None = None, prelude: str | None = None) -> "SandboxSession":
        """A stateful session: its calls run one after another in one worker whose globals persist."""
        return SandboxSession(self, files=files, prelude=prelude)

    def stats(self) -> dict[str, Any]:
        """Worker counts as the server sees them (``workers``, ``idle``, ``busy``, ``sessions``, ``workdirs``, ...)."""
        return self._connection().submit({"op": "stats"}).result(timeout=30)

    def close(self) -> None:
        """Stop the server and every worker (idempotent)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None and conn.owner_pid == os.getpid():
            conn.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        conn = self._conn
        state = "closed" if self._closed else f"server pid {conn.proc.pid}" if conn else "not started"
        return f"Sandbox({state}, timeout_s={self.config.timeout_s}, memory_mb={self.config.memory_mb})"

    # -- internals --------------------------------------------------------------------------------------

    def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.alive and conn.owner_pid == os.getpid():
            return conn
        with self._lock:
            if self._closed:
                raise SandboxError("this sandbox is closed")
            conn = self._conn
            if conn is None or not conn.alive or conn.owner_pid != os.getpid():
                if conn is not None and conn.owner_pid == os.getpid():
                    conn.close()
                conn = self._conn = _Connection(self.config)
            return conn

    def _close_session(self, session_id: str, conn: _Connection | None) -> None:
        if conn is not None and conn is self._conn and conn.alive:
            try:
                conn.send({"op": "close", "session": session_id})
            except OSError:
                pass


class SandboxSession:
    """A stateful sandbox session: one worker process whose globals persist across calls.

    Calls of one session run one at a time, in order. The worker starts on the first call (with the
    session's ``files`` in its working directory and ``prelude`` run first). If it dies (a timeout
    that could not be interrupted, a crash, the idle limit) the next call starts a fresh worker and
    its result has ``state_reset=True``. ``close()`` (or garbage collection) stops the worker and
    deletes its directory.
    """

    def __init__(self, sandbox: Sandbox, *, files: Mapping[str, str | bytes] | None = None, prelude: str | None = None):
        self.sandbox = sandbox
        self.id = uuid.uuid4().hex
        self.files = dict(files or {})
        self.prelude = prelude
        self._conn: _Connection | None = None
        # (no reference to self in the finalizer's arguments, or it would keep the session alive)
        self._finalizer = weakref.finalize(self, _close_session, weakref.ref(sandbox), self.id)
        self.closed = False

    def submit(self, code: str, **kwargs: Any) -> concurrent.futures.Future:
        return self.sandbox.submit(code, session=self, **kwargs)

    def run(self, code: str, **kwargs: Any) -> SandboxResult:
        return self.submit(code, **kwargs).result()

    async def arun(self, code: str, **kwargs: Any) -> SandboxResult:
        return await asyncio.wrap_future(self.submit(code, **kwargs))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            conn, self._conn = self._conn, None
            self._finalizer.detach()
            if conn is not None:
                self.sandbox._close_session(self.id, conn)

    def __enter__(self) -> "SandboxSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _close_session(sandbox_ref: Any, session_id: str) -> None:
    sandbox = sandbox_ref()
    if sandbox is not None:
        sandbox._close_session(session_id, sandbox._conn)


def _encode_files(files: Mapping[str, str | bytes] | None) -> dict[str, str] | None:
    if not files:
        return None
    out = {}
    for name, content in files.items():
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise ValueError(f"sandbox file names must be plain names, got {name!r}")
        if isinstance(content, bytes):
            content = content.decode("utf-8")
        out[name] = content
    return out


def _mark_reset(future: concurrent.futures.Future) -> concurrent.futures.Future:
    import dataclasses

    marked: concurrent.futures.Future = concurrent.futures.Future()

    def copy(done: concurrent.futures.Future) -> None:
        if done.cancelled():
            marked.cancel()
            return
        result = done.result()
        marked.set_result(dataclasses.replace(result, state_reset=True) if isinstance(result, SandboxResult) else result)

    future.add_done_callback(copy)
    return marked


# -- shared sandboxes -------------------------------------------------------------------------------------

_LIVE: "weakref.WeakSet[Sandbox]" = weakref.WeakSet()
_SHARED: dict[SandboxConfig, Sandbox] = {}
_SHARED_LOCK = threading.Lock()


def shared_sandbox(config: SandboxConfig | Mapping[str, Any] | None = None, **options: Any) -> Sandbox:
    """The process-wide sandbox for this config (created on first use): envs share one server, so
    hundreds of episodes in flight cost hundreds of workers, not hundreds of servers."""
    cfg = SandboxConfig.coerce(dict(config) if isinstance(config, Mapping) else config)
    if options:
        cfg = SandboxConfig(**{**cfg.__dict__, **options})
    with _SHARED_LOCK:
        sandbox = _SHARED.get(cfg)
        if sandbox is None or sandbox._closed:
            sandbox = _SHARED[cfg] = Sandbox(cfg)
        return sandbox


@atexit.register
def _close_all() -> None:
    for sandbox in list(_LIVE):
        try:
            sandbox.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
