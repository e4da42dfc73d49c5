"""A worker process: everything it does after the server forks it, until it exits.

Before it reads any code, the worker puts itself in a new session, closes every inherited
descriptor, applies rlimits (CPU, address space, file size, open files, core; processes per uid),
switches to its own unprivileged uid when root, enters its throwaway work directory, installs the
seccomp filter and the audit hook. Then it runs the calls it is sent: one (a stateless call) or
many with the same globals (a session). Separate because this code runs in another process, under
limits and a filter, and sees of the server only what start-up established (:class:`Isolation`).
"""

from __future__ import annotations

import ast
import builtins
import fcntl
import io
import json
import linecache
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
import types

from ._guard import ALWAYS_READABLE, Guard, SandboxViolation
from ._isolation import Isolation
from ._libc import PR_SET_CHILD_SUBREAPER, PR_SET_PDEATHSIG, get_libc
from ._wire import HEADER, frame, read_exact, write_all

# The server imports only what it uses, and not typing: its names are for the type checker alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Tracebacks of the code start below the frames of this file (see Worker._tb).
_WORKER_FILE = os.path.abspath(__file__)

# Fixed descriptor numbers inside a worker.
FD_JOB, FD_RES = 3, 4


class _CpuTimeout(BaseException):
    __module__ = "__main__"  # (see SandboxViolation)


class _WallTimeout(BaseException):
    __module__ = "__main__"


INTERRUPTS = {signal.SIGXCPU, signal.SIGUSR1}


class _Output(io.TextIOBase):
    """sys.stdout/sys.stderr of a worker: writes through to fd 1, keeps at most ``cap`` bytes per call."""

    __module__ = "__main__"  # what ``type(sys.stdout)`` shows the code (see SandboxViolation)

    def __init__(self, fd: int, cap: int):
        self._fd = fd
        self.cap = cap
        self.reset()

    def reset(self) -> None:
        self.written = 0
        self.truncated = False

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        pass

    def write(self, s) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if self.written < self.cap:
            data = s.encode("utf-8", "replace")
            room = self.cap - self.written
            if len(data) > room:
                data = data[:room]
                self.truncated = True
            try:
                write_all(self._fd, data)
            except OSError:
                self.truncated = True
            self.written += len(data)
        elif s:
            self.truncated = True
        return len(s)


class Worker:
    """Everything a worker process does after fork (never returns)."""

    def __init__(self, host: Isolation, uid: int | None, workdir: str, job_r: int, out_w: int, res_w: int):
        self.host, self.uid, self.workdir = host, uid, workdir
        self.cfg = host.cfg
        self.job_r, self.out_w, self.res_w = job_r, out_w, res_w
        self.cells = 0
        self.globals: dict | None = None

    def setup(self) -> None:
        cfg, iso = self.cfg, self.host.iso
        self.t_setup = time.monotonic()
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        signal.signal(signal.SIGXCPU, self._on_xcpu)
        signal.signal(signal.SIGUSR1, self._on_wall)
        # descriptors: 0 = /dev/null, 1 = 2 = output pipe, 3 = jobs, 4 = results; nothing else
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (self.job_r, self.out_w, self.res_w)]
        devnull = fcntl.fcntl(os.open(os.devnull, os.O_RDONLY), fcntl.F_DUPFD, 10)
        os.dup2(devnull, 0)
        os.dup2(high[1], 1)
        os.dup2(high[1], 2)
        os.dup2(high[0], FD_JOB)
        os.dup2(high[2], FD_RES)
        os.closerange(FD_RES + 1, 1 << 20)
        # limits
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["max_open_files"], cfg["max_open_files"]))
        fsize = int(cfg["max_file_mb"] * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        base = self.host.baseline
        mem = base + int(cfg["memory_mb"] * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = max(1, int(-(-cfg["cpu_s"] // 1)))
        hard = cpu * 50  # a session raises its soft limit per call (see _arm_cpu_limit)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
        _, libc = get_libc()
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, None, 0, 0)
        if iso["setuid"]:
            uid = self.uid
            assert uid is not None  # every worker has a uid of its own when setuid is in force
            resource.setrlimit(resource.RLIMIT_NPROC, (cfg["max_threads"], cfg["max_threads"]))
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, None, 0, 0)
        if os.getppid() != self.host.pid:
            os._exit(1)  # the server died between fork and prctl
        os.chdir(self.workdir)
        tempfile.tempdir = self.workdir  # (HOME, USER, TMPDIR were set once by the server)
        if self.host.seccomp is not None:  # (compiled exactly when iso["seccomp"])
            self.host.seccomp.install()
        self.out = _Output(1, cfg["output_bytes"])
        sys.stdout = sys.stderr = self.out
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - /dev/null
        readable = None if iso["chroot"] else self.host.read_roots + list(ALWAYS_READABLE)
        self.guard = Guard(self.workdir, readable, cfg["allow_processes"])
        if cfg["audit_hook"]:
            sys.addaudithook(self.guard)
        self.t_setup = time.monotonic() - self.t_setup
        self.setup_cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])

    def _on_xcpu(self, signum, frame):
        raise _CpuTimeout()

    def _on_wall(self, signum, frame):
        raise _WallTimeout()

    def serve(self) -> None:
        try:
            self.setup()
        except BaseException as exc:  # noqa: BLE001
            try:
                os.write(2, f"sandbox worker setup failed: {type(exc).__name__}: {exc}\n".encode())
            finally:
                os._exit(70)
        signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
        while True:
            try:
                (n,) = HEADER.unpack(read_exact(FD_JOB, 4))
                job = json.loads(read_exact(FD_JOB, n))
            except (EOFError, OSError):
                os._exit(0)
            reply = self.run_job(job)
            try:
                write_all(FD_RES, reply)
            except OSError:
                os._exit(0)
            if not job.get("keep"):
                os._exit(0)

    # -- one call ------------------------------------------------------------------------------------

    def run_job(self, job: dict) -> bytes:
        pid = os.getpid()
        self.out.reset()
        result: dict[str, Any] = {"kind": "ok", "error": None, "traceback": None, "detail": None}
        g = self.globals
        if g is None:
            g, error = self._start_globals(job)
            if error is not None:
                result.update(kind="error", error=error)
                return self._finish(result, 0.0, 0.0, 0.0)
        self.guard.active = True
        cpu_limit = job.get("cpu_s") or self.cfg["cpu_s"]
        used = self._arm_cpu_limit(cpu_limit)
        self.cells += 1
        filename = f"<cell {self.cells}>" if job.get("keep") else "<python>"
        code = job.get("code", "")
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.guard.violations.clear()
        t0 = time.monotonic()
        c0 = used
        while signal.sigpending() & INTERRUPTS:  # stale interrupts aimed at an earlier call
            signal.sigtimedwait(INTERRUPTS, 0)
        self._execute(job, g, code, filename, cpu_limit, result)
        if os.getpid() != pid:
            os._exit(0)  # a forked copy (only possible when processes are allowed): never report twice
        t1 = time.monotonic()
        cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - c0
        if result["kind"] == "ok" and self.guard.violations:
            result["violations"] = [c for c, _ in self.guard.violations]
        return self._finish(result, t0, t1, cpu)

    def _start_globals(self, job: dict) -> tuple[dict, str | None]:
        """The worker's first call: a fresh ``__main__``, the job's files written to the work directory
        and its prelude run (its output discarded). Returns the globals, which stay even if that failed
        (a session's later calls run in them), and the error if it did."""
        module = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = builtins
        g = self.globals = module.__dict__
        sys.modules["__main__"] = module
        self.guard.active = True
        try:
            for name, content in (job.get("files") or {}).items():
                if "/" in name or name in (".", "..") or not name:
                    raise ValueError(f"bad file name {name!r}")
                with open(name, "wb") as f:
                    f.write(content.encode("utf-8") if isinstance(content, str) else bytes(content))
            if job.get("prelude"):
                sys.stdout = sys.stderr = _Output(1, 0)  # prelude output is discarded
                try:
                    exec(compile(job["prelude"], "<prelude>", "exec"), g)
                finally:
                    sys.stdout = sys.stderr = self.out
        except BaseException as exc:  # noqa: BLE001
            return g, f"sandbox setup failed: {type(exc).__name__}: {exc}"
        return g, None

    @staticmethod
    def _arm_cpu_limit(cpu_limit: float) -> float:
        """Set RLIMIT_CPU's soft limit ``cpu_limit`` seconds past the CPU time used so far (a session's
        calls add up in one process); returns that use."""
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(-(-(used + cpu_limit) // 1))
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        return used

    def _execute(self, job: dict, g: dict, code: str, filename: str, cpu_limit: float, result: dict) -> None:
        """Run the code in the worker's globals ``g`` with the timeout signals unblocked; how it ended
        goes into ``result``."""
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)
            try:
                body, last = self._compile(code, filename, job.get("echo", True))
                exec(body, g)
                if last is not None:
                    value = eval(last, g)
                    if value is not None:
                        print(repr(value))
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    result.update(kind="error", error=f"SystemExit: {exc.code}")
        except _CpuTimeout:
            result.update(kind="timeout", detail="cpu", error=f"TimeoutError: the code used more than {cpu_limit:g} s of CPU time")
        except _WallTimeout:
            result.update(kind="timeout", detail="wall", error=f"TimeoutError: the code ran longer than {job.get('timeout_s', self.cfg['timeout_s']):g} s")
        except MemoryError:
            if not job.get("keep"):
                g.clear()
            result.update(kind="memory", error=f"MemoryError: the code exceeded the {self.cfg['memory_mb']:g} MB memory limit")
        except SandboxViolation as exc:
            result.update(kind="forbidden", detail=exc.category, error=f"PermissionError: {exc}")
        except BaseException as exc:  # noqa: BLE001 - the code's own error, reported to the policy
            tb = self._tb(exc)
            result.update(kind="error", error=tb.rstrip().splitlines()[-1] if tb.strip() else type(exc).__name__, traceback=tb)
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
            self.guard.active = False

    def _finish(self, result: dict, t0: float, t1: float, cpu: float) -> bytes:
        if self.out.truncated and result["kind"] == "ok":
            result["kind"] = "output_truncated"
        result.update(truncated=self.out.truncated, t0=t0, t1=t1, exec_s=max(0.0, t1 - t0), cpu_s=cpu)
        if self.cells <= 1:
            result.update(setup_s=self.t_setup, setup_cpu_s=self.setup_cpu)
        try:
            return frame(result)
        except BaseException:  # noqa: BLE001 - e.g. still out of memory
            return frame({"kind": result.get("kind", "error"), "error": str(result.get("error"))[:200], "t0": t0, "t1": t1})

    @staticmethod
    def _compile(code: str, filename: str, echo: bool):
        tree = ast.parse(code, filename, "exec")
        last = None
        if echo and tree.body and isinstance(expr := tree.body[-1], ast.Expr):
            tree.body.pop()
            last = compile(ast.Expression(expr.value), filename, "eval")
        return compile(tree, filename, "exec"), last

    @staticmethod
    def _tb(exc: BaseException) -> str:
        if isinstance(exc, SyntaxError) and str(exc.filename).startswith("<"):
            return "".join(traceback.format_exception_only(type(exc), exc))
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == _WORKER_FILE:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        if len(text) > 3000:
            text = "...\n" + text[-3000:]
        return text
