"""The sandbox server's scheduler: requests in, calls onto workers, results out, one event loop.

:class:`Server` reads the client's requests (``run``, ``open``, ``close``, ``stats``, ``shutdown``),
gives each call a worker from the pool (``_pool.py``), queues what cannot run yet (a session's next
call while its worker is busy; any call while every uid is taken, evicting the least recently used
idle session worker), enforces wall-clock limits with a timer heap (a session's worker is first
interrupted, so that its state survives), stops idle sessions, refills the pre-forked pool and sends
each result back. Separate from the pool so that this module is only about which call runs when.
"""

from __future__ import annotations

import heapq
import os
import selectors
import shutil
import signal
import socket
import time

from ._isolation import Isolation
from ._pool import Pool, Slot
from ._wire import closed_reply, exit_result, frame, result_reply, split_frames

_QUIET_S = 0.05  # "quiet" pool refills wait this long after the last running call ended


class Job:
    """One ``run`` request, from when the server reads it to when its result is sent."""

    __slots__ = ("id", "msg", "deadline", "out", "out_dropped", "t_recv", "t_dispatch", "state_reset", "interrupted")

    def __init__(self, msg: dict, t_recv: float):
        self.id = msg["id"]
        self.msg = msg
        self.deadline = 0.0
        self.out = bytearray()
        self.out_dropped = 0
        self.t_recv = t_recv
        self.t_dispatch = 0.0
        self.state_reset = False
        self.interrupted = 0.0


class Session:
    """A stateful session: its set-up, the worker that holds its globals, its queued calls."""

    __slots__ = ("sid", "files", "prelude", "slot", "queue", "lost", "used")

    def __init__(self, sid: str, files, prelude):
        self.sid, self.files, self.prelude = sid, files, prelude
        self.slot: Slot | None = None
        self.queue: list[Job] = []
        self.lost = False
        self.used = False


class Server:
    def __init__(self, ctl_fd: int, cfg: dict):
        self.cfg = cfg
        self.host = Isolation(cfg)
        self.ctl = socket.socket(fileno=ctl_fd)
        self.ctl.setblocking(True)
        self.ctl_buf = bytearray()
        self.sel = selectors.DefaultSelector()
        self.pool = Pool(self.host, self.sel)
        self.sessions: dict[str, Session] = {}
        self.pending: list[Job | Session] = []  # jobs and sessions waiting for a free worker slot
        self.timers: list[tuple[float, int, int]] = []  # (deadline, pid, job id)
        self.busy_count = 0
        self.last_call_end = 0.0  # when busy_count last fell to 0 (the "quiet" refill waits after it)
        self._next_idle_check = 0.0

    def start(self) -> None:
        host = self.host
        host.start()
        self.pool.free_uids = list(host.uids)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        signal.signal(signal.SIGTERM, lambda s, f: self.shutdown())
        self.sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.send({"op": "ready", "pid": host.pid, "isolation": dict(host.iso), "errors": host.errors, "preloaded": host.preloaded, "baseline_mb": host.baseline / 2**20})

    # -- requests ---------------------------------------------------------------------------------------

    def _handle(self, msg: dict) -> None:
        op = msg.get("op")
        if op == "run":
            job = Job(msg, time.monotonic())
            sid = msg.get("session")
            if sid is None:
                self._start_job(job)
            else:
                session = self.sessions.get(sid)
                if session is None:
                    session = self.sessions[sid] = Session(sid, msg.get("files"), msg.get("prelude"))
                if (session.slot is not None and session.slot.job is not None) or session.queue:
                    session.queue.append(job)
                elif session.slot is not None:
                    self._dispatch_session(session, session.slot, job)
                else:
                    self._start_session_job(session, job)
        elif op == "open":
            self.sessions.setdefault(msg["session"], Session(msg["session"], msg.get("files"), msg.get("prelude")))
        elif op == "close":
            session = self.sessions.pop(msg["session"], None)
            if session is not None:
                for job in session.queue:
                    self.send(closed_reply(job.id))
                session.queue.clear()
                if session.slot is not None:
                    self.pool.kill(session.slot, "closed")
        elif op == "stats":
            pool = self.pool
            self.send({"op": "stats", "id": msg.get("id"), "workers": len(pool.slots), "idle": len(pool.idle), "busy": self.busy_count, "sessions": len(self.sessions), "pending": len(self.pending), "spawned": pool.counter, "workdirs": self._workdirs()})
        elif op == "shutdown":
            self.shutdown()

    def _workdirs(self) -> int:
        """Work directories that exist now (one per live worker; what a leak would leave behind)."""
        try:
            return len(os.listdir(self.host.base))
        except OSError:
            return -1

    def _start_job(self, job: Job) -> None:
        slot = self.pool.take(None)
        if slot is None:
            self.pending.append(job)
            self._evict_one()
            return
        self._dispatch(slot, job, None)

    def _evict_one(self) -> None:
        """Every worker slot is taken: stop the least recently used idle session worker (its session's
        next call starts afresh with ``state_reset``), unless one is already being stopped."""
        if any(s.killed is not None for s in self.pool.slots.values()):
            return  # a worker is on its way out; its slot will serve the queue
        idle = [s for s in self.pool.slots.values() if s.session is not None and s.job is None]
        if idle:
            self.pool.kill(min(idle, key=lambda s: s.last_used), "evicted")

    def _start_session_job(self, session: Session, job: Job) -> None:
        slot = self.pool.take(session.sid)
        if slot is None:
            session.queue.insert(0, job)
            if session not in self.pending:
                self.pending.append(session)
            self._evict_one()
            return
        session.slot = slot
        job.state_reset = session.lost
        session.lost = False
        self._dispatch_session(session, slot, job)

    def _dispatch_session(self, session: Session, slot: Slot, job: Job) -> None:
        session.used = True
        self._dispatch(slot, job, session)

    def _run_pending(self) -> None:
        while self.pending and (self.pool.free_uids or self.pool.idle):
            item = self.pending.pop(0)
            if isinstance(item, Job):
                self._start_job(item)
            elif self.sessions.get(item.sid) is item and item.slot is None and item.queue:
                self._start_session_job(item, item.queue.pop(0))

    def send(self, msg: dict) -> None:
        try:
            self.ctl.sendall(frame(msg))
        except OSError:
            self.shutdown()

    # -- calls on workers -------------------------------------------------------------------------------

    def _dispatch(self, slot: Slot, job: Job, session: Session | None) -> None:
        msg = job.msg
        timeout = float(msg.get("timeout_s") or self.cfg["timeout_s"])
        payload = {"code": msg["code"], "keep": session is not None, "echo": self.cfg["echo"], "timeout_s": timeout}
        if msg.get("cpu_s"):
            payload["cpu_s"] = float(msg["cpu_s"])
        if not slot.initialised:
            if session is not None:
                payload["files"], payload["prelude"] = session.files, session.prelude
            else:
                payload["files"], payload["prelude"] = msg.get("files"), msg.get("prelude")
            slot.initialised = True
        job.t_dispatch = time.monotonic()
        job.deadline = job.t_dispatch + timeout
        slot.job = job
        slot.last_used = job.t_dispatch
        self.busy_count += 1
        heapq.heappush(self.timers, (job.deadline, slot.pid, job.id))
        self.pool.send_job(slot, frame(payload))

    def _on_results(self, slot: Slot) -> None:
        for result in self.pool.read_results(slot):
            if slot.job is None:
                continue  # a stray frame (cannot come from our runner)
            self.pool.drain_out(slot)
            self._respond(slot, result)
            if slot.session is None:
                pass  # the worker exits by itself; reaped later
            else:
                session = self.sessions.get(slot.session)
                if session is not None and session.queue:
                    job = session.queue.pop(0)
                    self._dispatch_session(session, slot, job)

    def _respond(self, slot: Slot, result: dict) -> None:
        job = slot.job
        if job is None:
            return
        slot.job = None
        self.busy_count -= 1
        if self.busy_count == 0:
            self.last_call_end = time.monotonic()
        state_kept = result.get("kind") == "timeout" and slot.session is not None and slot.killed is None
        self.send(result_reply(job, result, state_kept))

    def _retire(self, slot: Slot, status: int, usage) -> None:
        """A worker was reaped: answer the call it was running, free its session and its uid, and
        start what was waiting."""
        self.pool.drain_out(slot)
        self._on_results(slot)
        self.pool.close(slot)
        if slot.job is not None:
            self._respond(slot, self._exit_result(slot, status, usage))
        session = self.sessions.get(slot.session) if slot.session else None
        if session is not None and session.slot is slot:
            session.slot = None
            session.lost = session.used
        self.pool.release(slot)
        if session is not None and session.queue and session.slot is None:
            self._start_session_job(session, session.queue.pop(0))
        self._run_pending()

    def _exit_result(self, slot: Slot, status: int, usage) -> dict:
        job = slot.job
        timeout = float(job.msg.get("timeout_s") or self.cfg["timeout_s"]) if job else self.cfg["timeout_s"]
        cpu_limit = float(job.msg.get("cpu_s") or self.cfg["cpu_s"]) if job else self.cfg["cpu_s"]
        return exit_result(slot.killed, status, usage, timeout, cpu_limit)

    # -- main loop --------------------------------------------------------------------------------------

    def _timeouts(self) -> float:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, pid, job_id = heapq.heappop(self.timers)
            slot = self.pool.slots.get(pid)
            if slot is None or slot.job is None or slot.job.id != job_id:
                continue
            if slot.session is not None and not slot.job.interrupted:
                # a session keeps its state if the code can be interrupted: SIGUSR1 first, then kill
                slot.job.interrupted = now
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
                heapq.heappush(self.timers, (now + self.cfg["interrupt_grace_s"], pid, job_id))
            else:
                self.pool.kill(slot, "timeout")
        if now >= self._next_idle_check:
            self._next_idle_check = now + 1.0
            idle_limit = self.cfg["session_idle_s"]
            for session in self.sessions.values():
                slot = session.slot
                if slot is not None and slot.job is None and now - slot.last_used > idle_limit:
                    self.pool.kill(slot, "idle")
        if not self.timers:
            return 1.0
        return max(0.0, min(1.0, self.timers[0][0] - now))

    def _refill_wait(self, timeout: float) -> tuple[bool, float]:
        """Whether to fork a pre-forked worker now, and how long the loop may then wait for events."""
        refill = len(self.pool.idle) < self.cfg["prefork"] and not self.pending and bool(self.pool.free_uids)
        if refill and self.cfg["prefork_refill"] == "quiet":
            # A fork costs the server ~1 ms and the new worker its start-up: inside a burst of calls
            # (a rollout batch) that CPU is taken from the burst, for a worker only a later call
            # needs. So wait until no call has run for _QUIET_S (the burst's own steps between and
            # after its calls are done by then), and look again when that time is up.
            wait = _QUIET_S - (time.monotonic() - self.last_call_end)
            if self.busy_count or wait > 0:
                refill = False
                if not self.busy_count:
                    timeout = min(timeout, wait)  # (a running call's end wakes the loop anyway)
        if refill:
            timeout = 0.0
        return refill, timeout

    def serve(self) -> None:
        while True:
            refill, timeout = self._refill_wait(self._timeouts())
            events = self.sel.select(timeout)
            for key, _ in events:
                tag = key.data
                if tag == "ctl":
                    self._on_ctl()
                elif tag == "wake":
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    for slot, status, usage in self.pool.reaped():
                        self._retire(slot, status, usage)
                else:
                    kind, slot = tag
                    if kind == "out":
                        self.pool.read_out(slot)
                    else:
                        self._on_results(slot)
            if not events and refill:
                slot = self.pool.spawn()
                if slot is not None:
                    self.pool.idle.append(slot)

    def _on_ctl(self) -> None:
        try:
            chunk = self.ctl.recv(1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            self.shutdown()
        self.ctl_buf += chunk
        for msg in split_frames(self.ctl_buf):
            self._handle(msg)

    def shutdown(self) -> None:
        self.pool.stop_all()
        if self.host.base and not self.host.iso["chroot"]:
            shutil.rmtree(self.host.base, ignore_errors=True)
        os._exit(0)
