"""The worker's seccomp-bpf filter: which system calls a sandboxed call may make.

No fork/vfork/execve, sockets of family AF_UNIX only, no connect/bind/listen/accept, ``sendto`` only
without an address, signals to itself only, no ptrace, namespaces, mounts, io_uring, bpf, keys or
module loading; ``clone3`` says ENOSYS so that glibc falls back to ``clone``, which may make threads
only. With processes allowed (``allow_processes``, only under a uid of the worker's own) fork, exec
and ``clone`` without namespace flags are allowed, and so is ``kill``: the kernel lets a uid signal
only its own processes. Separate because it is the one part of the sandbox that is a kernel program: the syscall table,
the BPF it compiles to, its installation and the probe that checks the kernel honours it are read
together, apart from the Python-level policy of the audit hook (``_guard.py``).
"""

from __future__ import annotations

import errno
import os
import struct

from ._libc import PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, check, get_libc

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
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


# clone flags that make new namespaces (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET)
_CLONE_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_PROCESS_CALLS = ("fork", "vfork", "execve", "execveat", "tkill")


def seccomp_program(arch: str, pid: int, allow_processes: bool = False) -> list[tuple[int, int, int, int]]:
    """The worker's filter as (code, jt, jf, k) instructions (see the module docstring)."""
    col = 0 if arch == "x86_64" else 1
    nr: dict[str, int] = {name: num for name, nums in _SYSCALLS.items() if (num := nums[col]) is not None}
    eperm, eacces = _errno_action(errno.EPERM), _errno_action(errno.EACCES)
    p: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ, 1, 0, AUDIT_ARCH[arch]),
        (_RET, 0, 0, eperm),  # another ABI (i386 via int 0x80): deny everything
        (_LD_W_ABS, 0, 0, 0),  # syscall number
    ]
    if arch == "x86_64":  # the x32 ABI
        p += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, eperm)]
    p += [(_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, _errno_action(errno.ENOSYS))]  # glibc falls back to clone
    for name in _DENY_EPERM:
        if name in nr and not (allow_processes and name in _PROCESS_CALLS):
            p += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eperm)]
    for name in _DENY_EACCES:
        p += [(_JEQ, 0, 1, nr[name]), (_RET, 0, 0, eacces)]
    if allow_processes:  # clone: anything but new namespaces
        p += [(_JEQ, 0, 4, nr["clone"]), (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, _CLONE_NEW_NAMESPACES), (_RET, 0, 0, eperm), (_RET, 0, 0, _ALLOW)]
    else:  # clone: threads only (CLONE_THREAD set)
        p += [(_JEQ, 0, 4, nr["clone"]), (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, 0x00010000), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eperm)]
    # socket: AF_UNIX only
    p += [(_JEQ, 0, 4, nr["socket"]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 0, 1, 1), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eacces)]
    # sendto: only without a destination address (send() on a connected socket / socketpair)
    p += [
        (_JEQ, 0, 6, nr["sendto"]), (_LD_W_ABS, 0, 0, 48), (_JEQ, 0, 3, 0), (_LD_W_ABS, 0, 0, 52),
        (_JEQ, 0, 1, 0), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, eacces),
    ]
    if allow_processes:  # kill, tgkill: what the kernel allows a uid of the worker's own
        p.append((_RET, 0, 0, _ALLOW))
        return p
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


class Seccomp:
    """The filter compiled once in the server; a worker only patches in its pid and installs it."""

    def __init__(self, arch: str, allow_processes: bool = False):
        _, self.libc = get_libc()
        import ctypes  # loaded by get_libc: a lookup in sys.modules, here in the server
        prog = seccomp_program(arch, _PID_MARK, allow_processes)
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
        check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0), "prctl(NO_NEW_PRIVS)")
        check(self.libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.fprog_ptr, 0, 0), "seccomp")


def install_seccomp(arch: str) -> None:
    Seccomp(arch).install()


def seccomp_works(arch: str, errors: list[str]) -> bool:
    """Fork a probe that installs the filter and checks fork is refused and threads work; what went
    wrong is appended to ``errors``."""
    try:
        get_libc()
        pid = os.fork()
    except OSError as exc:
        errors.append(f"seccomp probe: {exc}")
        return False
    if pid == 0:
        code = 1
        try:
            install_seccomp(arch)
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
        errors.append(f"seccomp probe failed (status {status})")
    return ok
