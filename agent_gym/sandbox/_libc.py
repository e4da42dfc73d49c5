"""The few libc calls the sandbox server needs that :mod:`os` lacks: mount, unshare, prctl.

ctypes is loaded once, in the server, before any worker is forked: workers only call the prepared
functions (their audit hook refuses ``ctypes.*`` events, and the private root may not even hold the
ctypes extension). Separate so that the root set-up, the seccomp filter and the worker share one
prepared ``libc`` and one set of constants.
"""

from __future__ import annotations

import os

_libc = None


def get_libc():
    """``(ctypes, libc)``, loaded and typed on first use."""
    global _libc
    if _libc is None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        libc.unshare.argtypes = [ctypes.c_int]
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
        _libc = (ctypes, libc)
    return _libc


def check(ret: int, what: str) -> None:
    if ret != 0:
        ctypes, _ = get_libc()
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2
PR_SET_CHILD_SUBREAPER = 36


def mount(src, target, fstype, flags, data=None) -> None:
    _, libc = get_libc()
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def unshare(flags: int) -> None:
    _, libc = get_libc()
    check(libc.unshare(flags), "unshare")
