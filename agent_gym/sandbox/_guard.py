"""The worker's audit hook: the Python-level policy, and the clear error messages it gives.

Installed by each worker before it runs any code (audit hooks cannot be removed): it refuses
starting processes, network access and ctypes, writes outside the work directory and, when there is
no private root, reads outside the work directory and the import paths, raising
:class:`SandboxViolation`, which the worker reports as a ``forbidden`` result. Separate from the
seccomp filter (``_seccomp.py``), which enforces the process and network limits in the kernel where
native code could get past this hook, and from the worker's process set-up, because this is a table
of events and rules.
"""

from __future__ import annotations

import os
import socket


class SandboxViolation(PermissionError):
    """Raised by the audit hook: something the sandbox does not allow (category: network/file/fork/native)."""

    # Tracebacks shown to the policy name it plainly ("SandboxViolation: ..."), as they name the
    # code's own exceptions, not under this private module's dotted name.
    __module__ = "__main__"

    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


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
ALWAYS_READABLE = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/etc/localtime", "/usr/share/zoneinfo")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Guard:
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
