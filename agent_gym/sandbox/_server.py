"""The sandbox's warm server: a fork server that runs every sandboxed call in its own process.

Run by :class:`agent_gym.sandbox.Sandbox` as ``python -I _server.py FD CONFIG_JSON``; it imports only
the standard library (plus the modules named in ``preload``), so it never loads agent_gym, torch or
transformers. ``FD`` is one end of a Unix socket pair: requests and results travel over it as
length-prefixed JSON frames.

Start-up (once per server):

1. when root (and not told otherwise): claim a block of unused uids (a lock file per block, so
   several servers on one host never share a uid), move into a new mount namespace and a new, empty
   network namespace, build a root of read-only bind mounts (the Python installation and system
   libraries, nothing else, each at its host path, wherever it lives, /tmp included) plus a private
   tmpfs for work directories, and ``chroot`` into it;
2. import the ``preload`` modules (e.g. pandas) and freeze the heap (``gc.freeze``) so that forked
   workers share it copy-on-write;
3. report which isolation layers are in force, then serve.

Per call: a worker is forked from this warm process (a few are forked ahead of time, so a call is
a pipe round trip, not a Python start-up). Before it reads any code, the worker puts itself in a
new session, closes every inherited descriptor, applies rlimits (CPU, address space, file size,
open files, core; processes per uid), switches to its own unprivileged uid when root, enters its
throwaway work directory, installs a seccomp-bpf filter (no fork/vfork/execve, sockets of family
AF_UNIX only, no connect/bind/listen, signals to itself only, no ptrace ...) and an audit hook
(clear error messages; writes only inside the work directory). The server enforces the wall-clock
limit, reads at most ``output_bytes`` of output, reaps the worker and deletes its directory.

Stateful sessions keep one worker alive across calls (its globals persist) until the session is
closed, it is idle too long, or it dies (the next call then starts afresh and says so).
"""

from __future__ import annotations

import ast
import errno
import fcntl
import gc
import heapq
import io
import json
import linecache
import os
import random
import resource
import selectors
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
import types

_HEADER = struct.Struct(">I")
_MAX_FRAME = 256 * 1024 * 1024
_MAX_RESULT_FRAME = 1024 * 1024
_SERVER_FILE = os.path.abspath(__file__)
_UID_BASE = 1 << 30  # far above any real account; see _claim_uid_block
_UID_SPAN = 1 << 22
_LOCK_DIR = "/tmp/agent-gym-sandbox-uids"
_QUIET_S = 0.05  # "quiet" pool refills wait this long after the last running call ended
_KIND_ORDER = ("ok", "output_truncated", "error", "forbidden", "memory", "timeout")

# Fixed descriptor numbers inside a worker.
_FD_JOB, _FD_RES = 3, 4


# ---------------------------------------------------------------------------------------------------
# framing


def _frame(obj) -> bytes:
    data = json.dumps(obj, separators=(",", ":"), default=str).encode("utf-8")
    return _HEADER.pack(len(data)) + data


def _split_frames(buf: bytearray, limit: int = _MAX_FRAME):
    """Pop every complete frame off ``buf``; raises ValueError on an oversized frame."""
    out = []
    while len(buf) >= 4:
        (n,) = _HEADER.unpack_from(buf, 0)
        if n > limit:
            raise ValueError(f"frame of {n} bytes exceeds {limit}")
        if len(buf) < 4 + n:
            break
        out.append(json.loads(bytes(buf[4 : 4 + n])))
        del buf[: 4 + n]
    return out


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# ---------------------------------------------------------------------------------------------------
# libc helpers (ctypes is imported once, in the server; workers use the prepared functions)

_libc = None


def _get_libc():
    global _libc
    if _libc is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        libc.unshare.argtypes = [ctypes.c_int]
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
        _libc = (ctypes, libc)
    return _libc


def _check(ret: int, what: str) -> None:
    if ret != 0:
        ctypes, _ = _get_libc()
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2
PR_SET_CHILD_SUBREAPER = 36


def _mount(src, target, fstype, flags, data=None) -> None:
    _, libc = _get_libc()
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _unshare(flags: int) -> None:
    _, libc = _get_libc()
    _check(libc.unshare(flags), "unshare")


# ---------------------------------------------------------------------------------------------------
# seccomp-bpf

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# name -> (x86_64, aarch64); None where the syscall does not exist.
_SYSCALLS = {
    "fork": (57, None), "vfork": (58, None), "execve": (59, 221), "execveat": (322, 281),
    "clone": (56, 220), "clone3": (435, 435), "socket": (41, 198), "connect": (42, 203),
    "bind": (49, 200), "listen": (50, 201), "accept": (43, 202), "accept4": (288, 242),
    "sendto": (44, 206), "sendmsg": (46, 211), "sendmmsg": (307, 269), "kill": (62, 129),
    "tkill": (200, 130), "tgkill": (234, 131), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "kexec_load": (246, 104),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265), "pidfd_getfd": (438, 438),
}
_DENY_EPERM = (
    "fork", "vfork", "execve", "execveat", "tkill", "ptrace", "process_vm_readv", "process_vm_writev",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "unshare", "setns", "mount", "umount2",
    "pivot_root", "chroot", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "kexec_load", "init_module", "finit_module", "delete_module", "name_to_handle_at",
    "open_by_handle_at", "pidfd_getfd",
)
_DENY_EACCES = ("connect", "bind", "listen", "accept", "accept4", "sendmsg", "sendmmsg")
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000


def _errno_action(e: int) -> int:
    return 0x00050000 | (e & 0xFFFF)


def seccomp_program(arch: str, pid: int) -> list[tuple[int, int, int, int]]:
    """The worker's filter as (code, jt, jf, k) instructions (see the module docstring)."""
    col = 0 if arch == "x86_64" else 1
    nr = {name: nums[col] for name, nums in _SYSCALLS.items() if nums[col] is not None}
    eperm, eacces = _errno_action(errno.EPERM), _errno_action(errno.EACCES)
    p: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
        (_RET, 0, 0, eperm),  # another ABI (i386 via int 0x80): deny everything
        (_LD_W_ABS, 0, 0, 0),  # syscall number
    ]
    if arch == "x86_64":  # the x32 ABI
        p += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, eperm)]
    p += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, _errno_action(errno.ENOSYS))]  # glibc falls back to clone
    for name in _DENY_EPERM:
        if name in nr:
            p += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eperm)]
    for name in _DENY_EACCES:
        p += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eacces)]
    # clone: threads only (CLONE_THREAD set)
    p += [(_JEQ, 0, 4, nr["clone"]), (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, 0x00010000), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eperm)]
    # socket: AF_UNIX only
    p += [(_JEQ, 0, 4, nr["socket"]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 0, 1, 1), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eacces)]
    # sendto: only without a destination address (send() on a connected socket / socketpair)
    p += [
        (_JEQ, 0, 6, nr["sendto"]), (_LD_W_ABS, 0, 0, 48), (_JEQ, 0, 3, 0), (_LD_W_ABS, 0, 0, 52),
        (_JEQ, 0, 1, 0), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eacces),
    ]
    # kill: itself, its process group (0) or -itself only
    p += [
        (_JEQ, 0, 6, nr["kill"]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 3, 0, pid), (_JEQ, 2, 0, 0),
        (_JEQ, 1, 0, (-pid) & 0xFFFFFFFF), (_RET, 0, 0, eperm), (_RET, 0, 0, _ALLOW),
    ]
    # tgkill: threads of itself only
    p += [(_JEQ, 0, 4, nr["tgkill"]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 0, 1, pid), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eperm)]
    p.append((_RET, 0, 0, _ALLOW))
    return p


_PID_MARK = 0x7EADBEEF  # placeholder for the worker's pid in the precompiled program


class _Seccomp:
    """The filter compiled once in the server; a worker only patches in its pid and installs it."""

    def __init__(self, arch: str):
        ctypes, self.libc = _get_libc()
        prog = seccomp_program(arch, _PID_MARK)
        self.raw = bytearray(b"".join(struct.pack("HBBI", *ins) for ins in prog))
        self.pid_offsets = [i * 8 + 4 for i, ins in enumerate(prog) if ins[3] == _PID_MARK]
        self.neg_offsets = [i * 8 + 4 for i, ins in enumerate(prog) if ins[3] == (-_PID_MARK) & 0xFFFFFFFF]
        self.buf = ctypes.create_string_buffer(len(self.raw))

        class _Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self.fprog = _Fprog(len(prog), ctypes.addressof(self.buf))
        self.fprog_ptr = ctypes.cast(ctypes.byref(self.fprog), ctypes.c_void_p)

    def install(self) -> None:
        pid = os.getpid()
        raw = self.raw
        for off in self.pid_offsets:
            struct.pack_into("I", raw, off, pid)
        for off in self.neg_offsets:
            struct.pack_into("I", raw, off, (-pid) & 0xFFFFFFFF)
        self.buf.raw = bytes(raw)
        _check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0), "prctl(NO_NEW_PRIVS)")
        _check(self.libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.fprog_ptr, 0, 0), "seccomp")


def _install_seccomp(arch: str) -> None:
    _Seccomp(arch).install()


# ---------------------------------------------------------------------------------------------------
# the worker: audit hook, output capture, running code


class SandboxViolation(PermissionError):
    """Raised by the audit hook: something the sandbox does not allow (category: network/file/fork/native)."""

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


class _CpuTimeout(BaseException):
    pass


class _WallTimeout(BaseException):
    pass


_INTERRUPTS = {signal.SIGXCPU, signal.SIGUSR1}


_FORK_EVENTS = frozenset(
    {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "os.startfile", "pty.spawn"}
)
_NET_EVENTS = frozenset(
    {
        "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
        "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex", "socket.getnameinfo",
        "urllib.Request", "http.client.connect", "ftplib.connect", "smtplib.connect", "poplib.connect",
        "imaplib.open", "nntplib.connect", "telnetlib.Telnet.open", "webbrowser.open",
    }
)
# events whose args[0] (and for rename/link/symlink args[1]) is a path that gets modified
_WRITE_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.truncate": (0,), "os.utime": (0,), "os.chflags": (0,), "os.lchflags": (0,), "os.lchmod": (0,),
    "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (1,), "shutil.rmtree": (0,),
    "os.setxattr": (0,), "os.removexattr": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
}
_READ_PATH_EVENTS = {"os.listdir": (0,), "os.scandir": (0,)}
# readable outside the working directory and the import paths when there is no private root
_ALWAYS_READABLE = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/etc/localtime", "/usr/share/zoneinfo")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Guard:
    """The worker's audit hook (installed once; audit hooks cannot be removed)."""

    def __init__(self, root: str, read_roots: list[str] | None, allow_processes: bool):
        self.root = os.path.realpath(root)
        self.read_roots = None if read_roots is None else [os.path.realpath(r) for r in read_roots] + [self.root]
        self.allow_processes = allow_processes
        self.violations: list[tuple[str, str]] = []
        self.active = False
        self._busy = False

    def _inside(self, path, roots) -> bool:
        if isinstance(path, int):
            return True
        try:
            p = os.fsdecode(os.fspath(path))
        except TypeError:
            return True
        real = os.path.realpath(p)
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)

    def deny(self, category: str, message: str):
        self.violations.append((category, message))
        raise SandboxViolation(category, message)

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active or self._busy:
            return
        self._busy = True
        try:
            self._check(event, args)
        finally:
            self._busy = False

    def _check(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if mode is not None:
                writing = any(c in str(mode) for c in "wax+")
            else:
                writing = bool((flags or 0) & _WRITE_FLAGS)
            if writing:
                if not self._inside(path, [self.root]) and path not in ("/dev/null", b"/dev/null"):
                    self.deny("file", f"writing {os.fsdecode(path) if not isinstance(path, int) else path!s} is not allowed: only files in the working directory can be written")
            elif self.read_roots is not None and not self._inside(path, self.read_roots):
                self.deny("file", f"reading {os.fsdecode(path)} is not allowed outside the working directory")
        elif event in _WRITE_PATH_EVENTS:
            for i in _WRITE_PATH_EVENTS[event]:
                if i < len(args) and not self._inside(args[i], [self.root]):
                    self.deny("file", f"{event} on {args[i]!s} is not allowed: only the working directory can be modified")
        elif event in _READ_PATH_EVENTS:
            if self.read_roots is not None and args and args[0] is not None and not self._inside(args[0], self.read_roots):
                self.deny("file", f"listing {args[0]!s} is not allowed outside the working directory")
        elif event in _FORK_EVENTS:
            if not self.allow_processes:
                self.deny("fork", "starting processes (fork, exec, subprocess, os.system) is not allowed in this sandbox")
        elif event == "socket.__new__":
            family = args[1] if len(args) > 1 else None
            if family is not None and family != -1 and family != socket.AF_UNIX:
                self.deny("network", "network access is not allowed in this sandbox")
        elif event in _NET_EVENTS:
            self.deny("network", "network access is not allowed in this sandbox")
        elif event.startswith("ctypes."):
            self.deny("native", "ctypes (calling native code directly) is not allowed in this sandbox")


class _Output(io.TextIOBase):
    """sys.stdout/sys.stderr of a worker: writes through to fd 1, keeps at most ``cap`` bytes per call."""

    def __init__(self, fd: int, cap: int):
        self._fd = fd
        self.cap = cap
        self.reset()

    def reset(self) -> None:
        self.written = 0
        self.truncated = False

    @property
    def encoding(self):  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self):  # type: ignore[override]
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
                _write_all(self._fd, data)
            except OSError:
                self.truncated = True
            self.written += len(data)
        elif s:
            self.truncated = True
        return len(s)


class _Worker:
    """Everything a worker process does after fork (never returns)."""

    def __init__(self, server: "Server", slot: "_Slot", job_r: int, out_w: int, res_w: int):
        self.server, self.slot = server, slot
        self.cfg = server.cfg
        self.job_r, self.out_w, self.res_w = job_r, out_w, res_w
        self.cells = 0
        self.globals: dict | None = None

    def setup(self) -> None:
        cfg, iso = self.cfg, self.server.iso
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
        os.dup2(high[0], _FD_JOB)
        os.dup2(high[2], _FD_RES)
        os.closerange(_FD_RES + 1, 1 << 20)
        # limits
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (cfg["max_open_files"], cfg["max_open_files"]))
        fsize = int(cfg["max_file_mb"] * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        base = self.server.baseline_vm()
        mem = base + int(cfg["memory_mb"] * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        cpu = max(1, int(-(-cfg["cpu_s"] // 1)))
        hard = cpu * 50  # a session raises its soft limit per call (see run_job)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
        _, libc = _get_libc()
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, None, 0, 0)
        if iso["setuid"]:
            uid = self.slot.uid
            resource.setrlimit(resource.RLIMIT_NPROC, (cfg["max_threads"], cfg["max_threads"]))
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, None, 0, 0)
        if os.getppid() != self.server.pid:
            os._exit(1)  # the server died between fork and prctl
        os.chdir(self.slot.workdir)
        tempfile.tempdir = self.slot.workdir  # (HOME, USER, TMPDIR were set once by the server)
        if iso["seccomp"]:
            self.server.seccomp.install()
        self.out = _Output(1, cfg["output_bytes"])
        sys.stdout = sys.stderr = self.out
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - /dev/null
        readable = None if iso["chroot"] else self.server.read_roots + list(_ALWAYS_READABLE)
        self.guard = _Guard(self.slot.workdir, readable, cfg["allow_processes"])
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
        signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
        while True:
            try:
                (n,) = _HEADER.unpack(_read_exact(_FD_JOB, 4))
                job = json.loads(_read_exact(_FD_JOB, n))
            except (EOFError, OSError):
                os._exit(0)
            frame = self.run_job(job)
            try:
                _write_all(_FD_RES, frame)
            except OSError:
                os._exit(0)
            if not job.get("keep"):
                os._exit(0)

    # -- one call ------------------------------------------------------------------------------------

    def run_job(self, job: dict) -> bytes:
        pid = os.getpid()
        self.out.reset()
        result = {"kind": "ok", "error": None, "traceback": None, "detail": None}
        g = self.globals
        if g is None:
            module = types.ModuleType("__main__")
            module.__dict__["__builtins__"] = __builtins__
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
                result.update(kind="error", error=f"sandbox setup failed: {type(exc).__name__}: {exc}")
                return self._finish(result, 0.0, 0.0, 0.0)
        self.guard.active = True
        cpu_limit = job.get("cpu_s") or self.cfg["cpu_s"]
        used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(-(-(used + cpu_limit) // 1))
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        self.cells += 1
        filename = f"<cell {self.cells}>" if job.get("keep") else "<python>"
        code = job.get("code", "")
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        self.guard.violations.clear()
        t0 = time.monotonic()
        c0 = used
        while signal.sigpending() & _INTERRUPTS:  # stale interrupts aimed at an earlier call
            signal.sigtimedwait(_INTERRUPTS, 0)
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _INTERRUPTS)
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
            signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
            self.guard.active = False
        if os.getpid() != pid:
            os._exit(0)  # a forked copy (only possible when processes are allowed): never report twice
        t1 = time.monotonic()
        cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - c0
        if result["kind"] == "ok" and self.guard.violations:
            result["violations"] = [c for c, _ in self.guard.violations]
        return self._finish(result, t0, t1, cpu)

    def _finish(self, result: dict, t0: float, t1: float, cpu: float) -> bytes:
        if self.out.truncated and result["kind"] == "ok":
            result["kind"] = "output_truncated"
        result.update(truncated=self.out.truncated, t0=t0, t1=t1, exec_s=max(0.0, t1 - t0), cpu_s=cpu)
        if self.cells <= 1:
            result.update(setup_s=self.t_setup, setup_cpu_s=self.setup_cpu)
        try:
            return _frame(result)
        except BaseException:  # noqa: BLE001 - e.g. still out of memory
            return _frame({"kind": result.get("kind", "error"), "error": str(result.get("error"))[:200], "t0": t0, "t1": t1})

    @staticmethod
    def _compile(code: str, filename: str, echo: bool):
        tree = ast.parse(code, filename, "exec")
        last = None
        if echo and tree.body and isinstance(tree.body[-1], ast.Expr):
            expr = tree.body.pop()
            last = compile(ast.Expression(expr.value), filename, "eval")
        return compile(tree, filename, "exec"), last

    @staticmethod
    def _tb(exc: BaseException) -> str:
        if isinstance(exc, SyntaxError) and str(exc.filename).startswith("<"):
            return "".join(traceback.format_exception_only(type(exc), exc))
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == _SERVER_FILE:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        if len(text) > 3000:
            text = "...\n" + text[-3000:]
        return text


# ---------------------------------------------------------------------------------------------------
# the server


class _Slot:
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
        self.session = None
        self.job = None
        self.killed = None
        self.last_used = time.monotonic()
        self.out_open = self.res_open = True
        self.initialised = False


class _Job:
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


class _Session:
    __slots__ = ("sid", "files", "prelude", "slot", "queue", "lost", "used")

    def __init__(self, sid: str, files, prelude):
        self.sid, self.files, self.prelude = sid, files, prelude
        self.slot: _Slot | None = None
        self.queue: list[_Job] = []
        self.lost = False
        self.used = False


class Server:
    def __init__(self, ctl_fd: int, cfg: dict):
        self.cfg = cfg
        self.pid = os.getpid()
        self.ctl = socket.socket(fileno=ctl_fd)
        self.ctl.setblocking(True)
        self.ctl_buf = bytearray()
        self.sel = selectors.DefaultSelector()
        self.slots: dict[int, _Slot] = {}
        self.idle: list[_Slot] = []
        self.sessions: dict[str, _Session] = {}
        self.pending: list = []  # jobs and sessions waiting for a free worker slot
        self.timers: list[tuple[float, int, int]] = []  # (deadline, pid, job id)
        self.free_uids: list[int] = []
        self.busy_count = 0
        self.last_call_end = 0.0  # when busy_count last fell to 0 (the "quiet" refill waits after it)
        self.counter = 0
        self.read_roots: list[str] = []
        self.errors: list[str] = []
        self.iso = {
            "root": os.geteuid() == 0, "setuid": False, "chroot": False, "netns": False, "seccomp": False,
            "audit_hook": bool(cfg["audit_hook"]), "arch": os.uname().machine, "uid_range": None,
        }
        self.base = ""
        self._baseline = 0
        self._next_idle_check = 0.0

    # -- start-up ----------------------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.cfg
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        _, libc = _get_libc()  # ctypes is loaded once here; workers only call the prepared functions
        # Orphans of workers (only possible without seccomp) are re-parented to this server and
        # reaped by it, instead of lingering as zombies that count against their uid's RLIMIT_NPROC.
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, None, 0, 0)
        privileged = self.iso["root"] and cfg.get("privileged") is not False
        self.read_roots = self._python_paths()
        if privileged:
            self._setup_privileged()
        if not self.iso["chroot"]:
            self.base = tempfile.mkdtemp(prefix="agent-gym-sandbox-")
            os.chmod(self.base, 0o711)
        self.iso["seccomp"] = bool(cfg["seccomp"]) and self.iso["arch"] in _AUDIT_ARCH and self._seccomp_works()
        if self.iso["seccomp"]:
            self.seccomp = _Seccomp(self.iso["arch"])
        os.environ.update(HOME=self.base, TMPDIR=self.base, USER="sandbox", LOGNAME="sandbox")
        if not self.iso["seccomp"] and cfg["seccomp"]:
            self.errors.append(f"seccomp not available on {self.iso['arch']}")
        if not self.iso["setuid"]:
            self.free_uids = list(range(cfg["max_workers"]))
        preloaded = []
        for name in cfg["preload"]:
            try:
                __import__(name)
                preloaded.append(name)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"preload {name}: {type(exc).__name__}: {exc}")
        gc.collect()
        gc.freeze()
        self._baseline = self._vm_size()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        signal.signal(signal.SIGTERM, lambda s, f: self._shutdown())
        self.sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self._send({"op": "ready", "pid": self.pid, "isolation": dict(self.iso), "errors": self.errors, "preloaded": preloaded, "baseline_mb": self._baseline / 2**20})

    def _python_paths(self) -> list[str]:
        paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
        paths += [p for p in sys.path if p and os.path.isabs(p)]
        out = []
        for p in paths:
            if os.path.exists(p):
                out.append(os.path.realpath(p if os.path.isdir(p) else os.path.dirname(p)))
        return sorted(set(out))

    def _setup_privileged(self) -> None:
        cfg = self.cfg
        try:
            self.free_uids = self._claim_uid_block(cfg["max_workers"])
        except OSError as exc:
            self.errors.append(f"uid block: {exc}")
            self.free_uids = []
        try:
            _unshare(CLONE_NEWNET)
            self.iso["netns"] = True
        except OSError as exc:
            self.errors.append(f"network namespace: {exc}")
        try:
            self._build_root()
            self.iso["chroot"] = True
        except OSError as exc:
            self.errors.append(f"mount namespace / chroot: {exc}")
        # Without the private root, an unprivileged uid may not even be able to read the Python
        # installation (e.g. under /root), so uids are switched only inside it.
        self.iso["setuid"] = self.iso["chroot"] and bool(self.free_uids)
        if self.iso["setuid"]:
            self.iso["uid_range"] = [self.free_uids[0], self.free_uids[-1]]

    def _claim_uid_block(self, n: int) -> list[int]:
        import fcntl

        os.makedirs(_LOCK_DIR, mode=0o700, exist_ok=True)
        st = os.lstat(_LOCK_DIR)
        if not (os.path.isdir(_LOCK_DIR) and not os.path.islink(_LOCK_DIR)) or st.st_uid != 0 or st.st_mode & 0o022:
            raise OSError(errno.EPERM, f"{_LOCK_DIR} is not a root-owned, private directory")
        blocks = _UID_SPAN // n
        start = random.randrange(blocks)
        for i in range(blocks):
            b = (start + i) % blocks
            fd = os.open(os.path.join(_LOCK_DIR, f"{b}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._uid_lock_fd = fd  # held (and so the block owned) until this server exits
            first = _UID_BASE + b * n
            return list(range(first, first + n))
        raise OSError(errno.EBUSY, "every uid block is in use")

    def _root_plan(self) -> tuple[list[tuple[str, str]], list[tuple[str, bool, int, int]]]:
        """What the private root shows, resolved on the host while nothing is shadowed: the symlinks
        to recreate, as (path, link target), and the binds in the order they are made, as (host path,
        is a directory, mount flags, remount flags). Every path keeps its host name inside the root."""
        ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
        links: list[tuple[str, str]] = []
        wanted: list[str] = []
        for top in ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"):
            if os.path.islink(top):
                links.append((top, os.readlink(top)))
            elif os.path.isdir(top):
                wanted.append(top)
        wanted += list(self.cfg.get("extra_ro_paths") or [])
        wanted += self.read_roots
        binds: list[tuple[str, bool, int, int]] = []

        def covered(path: str) -> bool:  # already shown by a (recursive) bind made earlier
            return any(path == b[0] or path.startswith(b[0].rstrip("/") + "/") for b in binds)

        # parents before children, so that a path inside an earlier bind is not bound twice
        for path in sorted({os.path.realpath(p) for p in wanted if os.path.exists(p)}, key=len):
            if not covered(path):
                binds.append((path, os.path.isdir(path), MS_BIND | MS_REC, ro))
        # The root's own /etc and /dev hold only these; a bind above that already shows the host's
        # file wins (the root's directory would then be that read-only bind).
        if os.path.islink("/etc/localtime") and not covered("/etc/localtime"):
            links.append(("/etc/localtime", os.readlink("/etc/localtime")))
        if os.path.isfile("/etc/ld.so.cache") and not covered("/etc/ld.so.cache"):
            binds.append(("/etc/ld.so.cache", False, MS_BIND, ro))
        for dev in ("null", "zero", "full", "random", "urandom"):
            path = "/dev/" + dev
            if os.path.exists(path) and not covered(path):
                binds.append((path, False, MS_BIND, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC))
        return links, binds

    def _build_root(self) -> None:
        _unshare(CLONE_NEWNS)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        links, binds = self._root_plan()
        # The root lives in a private tmpfs over /tmp (visible to this namespace only), which hides
        # the host's /tmp, and with it any interpreter, virtualenv or checkout that lives there. So
        # every bind source is opened (O_PATH) before that mount and bound from /proc/self/fd/N,
        # which names the opened directory or file itself, whatever is mounted over its path since.
        # They are opened after the unshare because a bind's source must be a mount of the caller's
        # own namespace, and all closed before the chroot: an open directory outside the root would
        # lead back out of it.
        handles: list[int] = []
        try:
            for path, *_ in binds:
                handles.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
            _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(self.cfg['disk_mb'])}m,mode=0755")
            root = "/tmp/root"
            os.mkdir(root, 0o755)
            for path, target in links:
                os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
                os.symlink(target, root + path)
            for (path, is_dir, flags, remount), fd in zip(binds, handles):
                target = root + path
                if is_dir:
                    os.makedirs(target, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                    open(target, "a").close()
                _mount(f"/proc/self/fd/{fd}", target, None, flags)
                _mount(None, target, None, remount)
        finally:
            for fd in handles:
                os.close(fd)
        for name in ("/etc", "/dev"):
            os.makedirs(root + name, mode=0o755, exist_ok=True)
        # The work directories' parent is the root's own directory: never one that a bind shows or
        # holds (a virtualenv at /sandbox/venv would otherwise share it, or make it read-only).
        base = "/sandbox"
        while any(p == base or p.startswith(base + "/") for p, *_ in binds):
            base += "_"
        os.mkdir(root + base, 0o711)
        os.chroot(root)
        os.chdir("/")
        self.base = base

    def _seccomp_works(self) -> bool:
        """Fork a probe that installs the filter and checks fork is refused and threads work."""
        try:
            _get_libc()
            pid = os.fork()
        except OSError as exc:
            self.errors.append(f"seccomp probe: {exc}")
            return False
        if pid == 0:
            code = 1
            try:
                _install_seccomp(self.iso["arch"])
                try:
                    os.fork()
                    os._exit(3)  # (the child) fork was allowed
                except OSError:
                    pass
                import threading

                t = threading.Thread(target=lambda: None)
                t.start()
                t.join()
                code = 0
            except BaseException:  # noqa: BLE001
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if not ok:
            self.errors.append(f"seccomp probe failed (status {status})")
        return ok

    def _vm_size(self) -> int:
        # read through a descriptor opened before the chroot: there is no /proc inside the private root
        try:
            return int(os.pread(self._statm, 256, 0).split()[0]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            return 0

    def baseline_vm(self) -> int:
        return self._baseline

    # -- workers -----------------------------------------------------------------------------------------

    def _spawn(self) -> _Slot | None:
        if not self.free_uids:
            return None
        slot = _Slot()
        slot.uid_index = self.free_uids.pop()
        slot.uid = slot.uid_index if self.iso["setuid"] else None
        self.counter += 1
        slot.workdir = os.path.join(self.base, f"w{self.counter}")
        os.mkdir(slot.workdir, 0o700)
        if slot.uid is not None:
            os.chown(slot.workdir, slot.uid, slot.uid)
        job_r, job_w = os.pipe()
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _Worker(self, slot, job_r, out_w, res_w).serve()
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

    def _take_worker(self, session: _Session | None) -> _Slot | None:
        slot = self.idle.pop() if self.idle else self._spawn()
        if slot is not None and session is not None:
            slot.session = session.sid
        return slot

    def _dispatch(self, slot: _Slot, job: _Job, session: _Session | None) -> None:
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
        try:
            _write_all(slot.job_w, _frame(payload))
        except OSError:
            self._kill(slot, "crashed")

    def _kill(self, slot: _Slot, reason: str) -> None:
        if slot.killed is None:
            slot.killed = reason
        try:
            os.kill(slot.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.slots.pop(pid, None)
            if slot is not None:
                self._retire(slot, status, usage)

    def _retire(self, slot: _Slot, status: int, usage) -> None:
        self._drain_out(slot)
        self._read_res(slot)
        for fd in (slot.out_r, slot.res_r):
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)
        os.close(slot.job_w)
        if slot in self.idle:
            self.idle.remove(slot)
        if slot.job is not None:
            self._respond(slot, self._abnormal(slot, status, usage))
        session = self.sessions.get(slot.session) if slot.session else None
        if session is not None and session.slot is slot:
            session.slot = None
            session.lost = session.used
        if slot.uid is not None and not self.iso["seccomp"]:
            self._kill_uid(slot.uid)
        shutil.rmtree(slot.workdir, ignore_errors=True)
        self.free_uids.append(slot.uid_index)
        if session is not None and session.queue and session.slot is None:
            self._start_session_job(session, session.queue.pop(0))
        self._run_pending()

    def _kill_uid(self, uid: int) -> None:
        """Kill every process of ``uid`` (only needed where seccomp cannot stop fork)."""
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

    def _abnormal(self, slot: _Slot, status: int, usage) -> dict:
        job = slot.job
        cpu = usage.ru_utime + usage.ru_stime
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        timeout = float(job.msg.get("timeout_s") or self.cfg["timeout_s"]) if job else self.cfg["timeout_s"]
        cpu_limit = float(job.msg.get("cpu_s") or self.cfg["cpu_s"]) if job else self.cfg["cpu_s"]
        if slot.killed == "timeout":
            return {"kind": "timeout", "detail": "wall", "error": f"TimeoutError: the code ran longer than {timeout:g} s"}
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and slot.killed is None and cpu >= cpu_limit - 0.05):
            return {"kind": "timeout", "detail": "cpu", "error": f"TimeoutError: the code used more than {cpu_limit:g} s of CPU time"}
        if slot.killed == "closed":
            return {"kind": "error", "detail": "closed", "error": "the sandbox session was closed"}
        if slot.killed == "output":
            return {"kind": "output_truncated", "detail": "killed", "error": "the code wrote too much output and was stopped"}
        if sig is not None:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            return {"kind": "error", "detail": "crash", "error": f"the Python process was killed by signal {name}"}
        code = os.WEXITSTATUS(status)
        return {"kind": "error", "detail": "exit", "error": f"the Python process exited with status {code} before finishing"}

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

    def _drain_out(self, slot: _Slot) -> None:
        if not slot.out_open:
            return
        for chunk in self._read_chunks(slot.out_r):
            if not chunk:
                slot.out_open = False
            else:
                self._keep_output(slot, chunk)

    def _keep_output(self, slot: _Slot, chunk: bytes) -> None:
        job = slot.job
        if job is None:
            return
        room = self.cfg["output_bytes"] - len(job.out)
        if room > 0:
            job.out += chunk[:room]
        job.out_dropped += max(0, len(chunk) - max(room, 0))

    def _read_res(self, slot: _Slot) -> None:
        if not slot.res_open:
            return
        for chunk in self._read_chunks(slot.res_r):
            if not chunk:
                slot.res_open = False
            else:
                slot.res_buf += chunk
        try:
            frames = _split_frames(slot.res_buf, _MAX_RESULT_FRAME)
        except ValueError:
            slot.res_buf.clear()
            self._kill(slot, "protocol")
            return
        for frame in frames:
            if slot.job is None:
                continue  # a stray frame (cannot come from our runner)
            self._drain_out(slot)
            self._respond(slot, frame)
            if slot.session is None:
                pass  # the worker exits by itself; reaped later
            else:
                session = self.sessions.get(slot.session)
                if session is not None and session.queue:
                    job = session.queue.pop(0)
                    self._dispatch_session(session, slot, job)

    def _respond(self, slot: _Slot, result: dict) -> None:
        job = slot.job
        if job is None:
            return
        slot.job = None
        self.busy_count -= 1
        if self.busy_count == 0:
            self.last_call_end = time.monotonic()
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
        if result.get("kind") == "timeout" and slot.session is not None and slot.killed is None:
            reply["state_kept"] = True
        self._send(reply)

    # -- requests ---------------------------------------------------------------------------------------

    def _handle(self, msg: dict) -> None:
        op = msg.get("op")
        if op == "run":
            job = _Job(msg, time.monotonic())
            sid = msg.get("session")
            if sid is None:
                self._start_job(job)
            else:
                session = self.sessions.get(sid)
                if session is None:
                    session = self.sessions[sid] = _Session(sid, msg.get("files"), msg.get("prelude"))
                if (session.slot is not None and session.slot.job is not None) or session.queue:
                    session.queue.append(job)
                elif session.slot is not None:
                    self._dispatch_session(session, session.slot, job)
                else:
                    self._start_session_job(session, job)
        elif op == "open":
            self.sessions.setdefault(msg["session"], _Session(msg["session"], msg.get("files"), msg.get("prelude")))
        elif op == "close":
            session = self.sessions.pop(msg["session"], None)
            if session is not None:
                for job in session.queue:
                    self._send({"op": "result", "id": job.id, "kind": "error", "detail": "closed", "error": "the sandbox session was closed", "output": ""})
                session.queue.clear()
                if session.slot is not None:
                    self._kill(session.slot, "closed")
        elif op == "stats":
            self._send({"op": "stats", "id": msg.get("id"), "workers": len(self.slots), "idle": len(self.idle), "busy": self.busy_count, "sessions": len(self.sessions), "pending": len(self.pending), "spawned": self.counter})
        elif op == "shutdown":
            self._shutdown()

    def _start_job(self, job: _Job) -> None:
        slot = self._take_worker(None)
        if slot is None:
            self.pending.append(job)
            self._evict_one()
            return
        self._dispatch(slot, job, None)

    def _evict_one(self) -> None:
        """Every worker slot is taken: stop the least recently used idle session worker (its session's
        next call starts afresh with ``state_reset``), unless one is already being stopped."""
        if any(s.killed is not None for s in self.slots.values()):
            return  # a worker is on its way out; its slot will serve the queue
        idle = [s for s in self.slots.values() if s.session is not None and s.job is None]
        if idle:
            self._kill(min(idle, key=lambda s: s.last_used), "evicted")

    def _start_session_job(self, session: _Session, job: _Job) -> None:
        slot = self._take_worker(session)
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

    def _dispatch_session(self, session: _Session, slot: _Slot, job: _Job) -> None:
        session.used = True
        self._dispatch(slot, job, session)

    def _run_pending(self) -> None:
        while self.pending and (self.free_uids or self.idle):
            item = self.pending.pop(0)
            if isinstance(item, _Job):
                self._start_job(item)
            elif self.sessions.get(item.sid) is item and item.slot is None and item.queue:
                self._start_session_job(item, item.queue.pop(0))

    def _send(self, msg: dict) -> None:
        try:
            self.ctl.sendall(_frame(msg))
        except OSError:
            self._shutdown()

    # -- main loop --------------------------------------------------------------------------------------

    def _timeouts(self) -> float:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            _, pid, job_id = heapq.heappop(self.timers)
            slot = self.slots.get(pid)
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
                self._kill(slot, "timeout")
        if now >= self._next_idle_check:
            self._next_idle_check = now + 1.0
            idle_limit = self.cfg["session_idle_s"]
            for session in self.sessions.values():
                slot = session.slot
                if slot is not None and slot.job is None and now - slot.last_used > idle_limit:
                    self._kill(slot, "idle")
        if not self.timers:
            return 1.0
        return max(0.0, min(1.0, self.timers[0][0] - now))

    def serve(self) -> None:
        while True:
            timeout = self._timeouts()
            refill = len(self.idle) < self.cfg["prefork"] and not self.pending and bool(self.free_uids)
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
            events = self.sel.select(timeout)
            for key, _ in events:
                tag = key.data
                if tag == "ctl":
                    try:
                        chunk = self.ctl.recv(1 << 20)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        self._shutdown()
                    self.ctl_buf += chunk
                    for msg in _split_frames(self.ctl_buf):
                        self._handle(msg)
                elif tag == "wake":
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    self._reap()
                else:
                    kind, slot = tag
                    if kind == "out":
                        self._read_out(slot)
                    else:
                        self._read_res(slot)
            if not events and refill:
                slot = self._spawn()
                if slot is not None:
                    self.idle.append(slot)

    def _read_out(self, slot: _Slot) -> None:
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

    def _shutdown(self) -> None:
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
            if slot.uid is not None and not self.iso["seccomp"]:
                self._kill_uid(slot.uid)
        if self.base and not self.iso["chroot"]:
            shutil.rmtree(self.base, ignore_errors=True)
        os._exit(0)


def main() -> None:
    fd = int(sys.argv[1])
    cfg = json.loads(sys.argv[2])
    server = Server(fd, cfg)
    try:
        server.start()
    except BaseException as exc:  # noqa: BLE001
        try:
            server._send({"op": "ready", "fatal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        finally:
            os._exit(1)
    server.serve()


if __name__ == "__main__":
    main()
