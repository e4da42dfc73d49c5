"""What travels between the sandbox client, the warm server and its workers.

Every message is a length-prefixed JSON frame: requests and results on the client's socket, jobs and
results on each worker's pipes. This module holds the framing and the result messages the server
builds, so that the scheduler reads as scheduling and the worker as running code. It imports only the
standard library and nothing of the sandbox, because every other server module uses it. (The client
keeps its own encoder: it refuses what JSON cannot carry, where the server stringifies it.)
"""

from __future__ import annotations

import json
import os
import signal
import struct
import time

HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024
MAX_RESULT_FRAME = 1024 * 1024
SESSION_CLOSED = "the sandbox session was closed"


# ---------------------------------------------------------------------------------------------------
# framing


def frame(obj) -> bytes:
    data = json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8")
    return HEADER.pack(len(data)) + data


def split_frames(buf: bytearray, limit: int = MAX_FRAME):
    """Pop every complete frame off ``buf``; raises ValueError on an oversized frame."""
    out = []
    while len(buf) >= 4:
        (n,) = HEADER.unpack_from(buf, 0)
        if n > limit:
            raise ValueError(f"frame of {n} bytes exceeds {limit}")
        if len(buf) < 4 + n:
            break
        out.append(json.loads(bytes(buf[4 : 4 + n])))
        del buf[: 4 + n]
    return out


def read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# ---------------------------------------------------------------------------------------------------
# result messages


def result_reply(job, result: dict, state_kept: bool) -> dict:
    """The ``result`` message for ``job`` (a scheduler job: its id, the output read from the worker's
    pipe, its timestamps) from what the worker reported, or what the server concluded when it died."""
    out = bytes(job.out)
    truncated = bool(result.get("truncated")) or job.out_dropped > 0
    kind = result.get("kind", "error")
    if truncated and kind == "ok":
        kind = "output_truncated"
    reply = {
        "op": "result", "id": job.id, "kind": kind, "output": out.decode("utf-8", "replace"),
        "error": result.get("error"), "traceback": result.get("traceback"), "detail": result.get("detail"),
        "truncated": truncated, "exec_s": result.get("exec_s"), "cpu_s": result.get("cpu_s"),
        "state_reset": job.state_reset, "violations": result.get("violations"),
        "t_recv": job.t_recv, "t_dispatch": job.t_dispatch, "t_exec0": result.get("t0"),
        "t_exec1": result.get("t1"), "t_done": time.monotonic(),
        "setup_s": result.get("setup_s"), "setup_cpu_s": result.get("setup_cpu_s"),
    }
    if state_kept:
        reply["state_kept"] = True
    return reply


def closed_reply(job_id) -> dict:
    """The ``result`` message for a call still queued when its session was closed."""
    return {"op": "result", "id": job_id, "kind": "error", "detail": "closed", "error": SESSION_CLOSED, "output": ""}


def exit_result(killed: str | None, status: int, usage, timeout: float, cpu_limit: float) -> dict:
    """What a worker that died during a call reports, read from how it ended: ``killed`` is why the
    server killed it (None if it did not), ``status`` and ``usage`` come from ``wait4``."""
    cpu = usage.ru_utime + usage.ru_stime
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if killed == "timeout":
        return {"kind": "timeout", "detail": "wall", "error": f"TimeoutError: the code ran longer than {timeout:g} s"}
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and killed is None and cpu >= cpu_limit - 0.05):
        return {"kind": "timeout", "detail": "cpu", "error": f"TimeoutError: the code used more than {cpu_limit:g} s of CPU time"}
    if killed == "closed":
        return {"kind": "error", "detail": "closed", "error": SESSION_CLOSED}
    if killed == "output":
        return {"kind": "output_truncated", "detail": "killed", "error": "the code wrote too much output and was stopped"}
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return {"kind": "error", "detail": "crash", "error": f"the Python process was killed by signal {name}"}
    code = os.WEXITSTATUS(status)
    return {"kind": "error", "detail": "exit", "error": f"the Python process exited with status {code} before finishing"}
