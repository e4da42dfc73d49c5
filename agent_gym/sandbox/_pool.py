"""The sandbox server's worker processes as it sees them: forking, reading, killing, reaping.

A :class:`Slot` is one worker: its pid, its uid and throwaway work directory, and the three pipes
to it (jobs in, output and results out). :class:`Pool` forks workers (a few ahead of time, kept in
``idle``), reads their pipes without blocking, kills and reaps them and gives their uid and
directory back. It knows nothing of sessions or queues: which call runs where, and what a worker's
end means for a session, is the scheduler's (``_scheduler.py``). Separate so that everything about
processes, descriptors and the selector lives in one place.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import time

from ._isolation import Isolation
from ._wire import MAX_RESULT_FRAME, split_frames, write_all
from ._worker import Worker


class Slot:
    """A worker process as the server sees it."""

    __slots__ = (
        "pid", "uid", "uid_index", "workdir", "job_w", "out_r", "res_r", "res_buf", "session", "job",
        "killed", "last_used", "out_open", "res_open", "initialised",
    )

    def __init__(self):
        self.pid = 0
        self.uid = None
        self.uid_index = None
        self.workdir = ""
        self.job_w = self.out_r = self.res_r = -1
        self.res_buf = bytearray()
        self.session = None  # the id of the session it serves, if any
        self.job = None  # the call it runs now: the scheduler's job (its ``out`` buffer is filled here)
        self.killed = None  # why the server killed it, once it has
        self.last_used = time.monotonic()
        self.out_open = self.res_open = True
        self.initialised = False


class Pool:
    """Every worker of one server, by pid; ``idle`` holds the pre-forked ones no call has taken."""

    def __init__(self, host: Isolation, sel: selectors.BaseSelector):
        self.host = host
        self.cfg = host.cfg
        self.sel = sel
        self.slots: dict[int, Slot] = {}
        self.idle: list[Slot] = []
        self.free_uids: list[int] = []  # filled from ``host.uids`` once start-up has claimed them
        self.counter = 0  # workers forked so far (names their work directories)

    @property
    def processes_possible(self) -> bool:
        """Whether a worker may have started processes that outlive it (no seccomp, or processes allowed)."""
        return not self.host.iso["seccomp"] or bool(self.cfg.get("allow_processes"))

    # -- starting and stopping -------------------------------------------------------------------------

    def spawn(self) -> Slot | None:
        if not self.free_uids:
            return None
        slot = Slot()
        slot.uid_index = self.free_uids.pop()
        slot.uid = slot.uid_index if self.host.iso["setuid"] else None
        self.counter += 1
        slot.workdir = os.path.join(self.host.base, f"w{self.counter}")
        os.mkdir(slot.workdir, 0o700)
        if slot.uid is not None:
            os.chown(slot.workdir, slot.uid, slot.uid)
        job_r, job_w = os.pipe()
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                Worker(self.host, slot.uid, slot.workdir, job_r, out_w, res_w).serve()
            finally:
                os._exit(71)
        os.close(job_r)
        os.close(out_w)
        os.close(res_w)
        slot.pid, slot.job_w, slot.out_r, slot.res_r = pid, job_w, out_r, res_r
        os.set_blocking(out_r, False)
        os.set_blocking(res_r, False)
        self.sel.register(out_r, selectors.EVENT_READ, ("out", slot))
        self.sel.register(res_r, selectors.EVENT_READ, ("res", slot))
        self.slots[pid] = slot
        return slot

    def take(self, session_id: str | None) -> Slot | None:
        """A worker for a call: a pre-forked one if there is one, else a new one (None when every
        uid is taken)."""
        slot = self.idle.pop() if self.idle else self.spawn()
        if slot is not None and session_id is not None:
            slot.session = session_id
        return slot

    def send_job(self, slot: Slot, data: bytes) -> None:
        try:
            write_all(slot.job_w, data)
        except OSError:
            self.kill(slot, "crashed")

    def kill(self, slot: Slot, reason: str) -> None:
        if slot.killed is None:
            slot.killed = reason
        try:
            os.kill(slot.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def reaped(self):
        """Yield ``(slot, status, usage)`` for each worker that has exited, as ``wait4`` reaps it."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.slots.pop(pid, None)
            if slot is not None:
                yield slot, status, usage

    def close(self, slot: Slot) -> None:
        """Close a reaped worker's pipes (read them out first) and forget it as idle."""
        for fd in (slot.out_r, slot.res_r):
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)
        os.close(slot.job_w)
        if slot in self.idle:
            self.idle.remove(slot)

    def release(self, slot: Slot) -> None:
        """Give a reaped worker's uid back, once nothing of it is left: its processes, its directory."""
        if slot.uid is not None and self.processes_possible:
            self.kill_uid(slot.uid)
        shutil.rmtree(slot.workdir, ignore_errors=True)
        self.free_uids.append(slot.uid_index)

    def kill_uid(self, uid: int) -> None:
        """Kill every process of ``uid`` (only needed where the code can start processes)."""
        pid = os.fork()
        if pid == 0:
            try:
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            except BaseException:  # noqa: BLE001
                pass
            os._exit(0)
        os.waitpid(pid, 0)

    def stop_all(self) -> None:
        """Kill and wait for every worker (the server is exiting)."""
        for slot in list(self.slots.values()):
            try:
                os.kill(slot.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for slot in list(self.slots.values()):
            try:
                os.waitpid(slot.pid, 0)
            except ChildProcessError:
                pass
            if slot.uid is not None and self.processes_possible:
                self.kill_uid(slot.uid)

    # -- reading the pipes -----------------------------------------------------------------------------

    def _read_chunks(self, fd: int):
        """Yield what a non-blocking pipe holds now; a final ``b""`` means end of file (the fd is
        then unregistered from the selector)."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                try:
                    self.sel.unregister(fd)
                except (KeyError, ValueError):
                    pass
                yield b""
                return
            yield chunk

    def drain_out(self, slot: Slot) -> None:
        """Read all the output the worker's pipe holds now into its call's buffer."""
        if not slot.out_open:
            return
        for chunk in self._read_chunks(slot.out_r):
            if not chunk:
                slot.out_open = False
            else:
                self._keep_output(slot, chunk)

    def read_out(self, slot: Slot) -> None:
        """Read one chunk of output (the selector said the pipe is readable, and says so again while
        more is left)."""
        try:
            chunk = os.read(slot.out_r, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            slot.out_open = False
            try:
                self.sel.unregister(slot.out_r)
            except (KeyError, ValueError):
                pass
            return
        self._keep_output(slot, chunk)

    def _keep_output(self, slot: Slot, chunk: bytes) -> None:
        job = slot.job
        if job is None:
            return
        room = self.cfg["output_bytes"] - len(job.out)
        if room > 0:
            job.out += chunk[:room]
        job.out_dropped += max(0, len(chunk) - max(room, 0))

    def read_results(self, slot: Slot) -> list[dict]:
        """The complete result frames the worker has written; a malformed or oversized frame kills it."""
        if not slot.res_open:
            return []
        for chunk in self._read_chunks(slot.res_r):
            if not chunk:
                slot.res_open = False
            else:
                slot.res_buf += chunk
        try:
            return split_frames(slot.res_buf, MAX_RESULT_FRAME)
        except ValueError:
            slot.res_buf.clear()
            self.kill(slot, "protocol")
            return []
