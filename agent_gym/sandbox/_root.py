"""The privileged layers of the sandbox server: its block of worker uids and its private root.

Used only when the server runs as root. A block of unused uids is claimed with a lock file per
block, so several servers on one host never share a uid. The private root is a tree of read-only
bind mounts (the Python installation and system libraries, nothing else, each at its host path,
wherever it lives, /tmp included) on a private tmpfs, in a mount namespace of its own; the server
``chroot``s into it. Separate because this is filesystem set-up that runs once, before anything is
served, and whose every step is about paths and mounts rather than calls.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import sys

from ._libc import CLONE_NEWNS, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT, mount, unshare

UID_BASE = 1 << 30  # far above any real account; see claim_uid_block
UID_SPAN = 1 << 22
LOCK_DIR = "/tmp/agent-gym-sandbox-uids"


def python_paths() -> list[str]:
    """The directories of this Python installation and its import path (what code may read)."""
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    out = []
    for p in paths:
        if os.path.exists(p):
            out.append(os.path.realpath(p if os.path.isdir(p) else os.path.dirname(p)))
    return sorted(set(out))


def claim_uid_block(n: int) -> tuple[int, list[int]]:
    """Lock a free block of ``n`` uids: the lock file's descriptor (the block is owned while it is
    open, so it is kept until the server exits) and the uids."""
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    st = os.lstat(LOCK_DIR)
    if not (os.path.isdir(LOCK_DIR) and not os.path.islink(LOCK_DIR)) or st.st_uid != 0 or st.st_mode & 0o022:
        raise OSError(errno.EPERM, f"{LOCK_DIR} is not a root-owned, private directory")
    blocks = UID_SPAN // n
    start = random.randrange(blocks)
    for i in range(blocks):
        b = (start + i) % blocks
        fd = os.open(os.path.join(LOCK_DIR, f"{b}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        first = UID_BASE + b * n
        return fd, list(range(first, first + n))
    raise OSError(errno.EBUSY, "every uid block is in use")


def root_plan(read_roots: list[str], extra_ro_paths) -> tuple[list[tuple[str, str]], list[tuple[str, bool, int, int]]]:
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
    wanted += list(extra_ro_paths or [])
    wanted += read_roots
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


def build_root(read_roots: list[str], extra_ro_paths, disk_mb: float, hidden_paths=()) -> str:
    """Build the private root (see :func:`root_plan`) and ``chroot`` into it; returns the parent
    directory of the work directories, as seen inside the root. ``hidden_paths`` that a bind shows
    are covered: a directory by an empty read-only tmpfs, a file by ``/dev/null``."""
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    links, binds = root_plan(read_roots, extra_ro_paths)
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
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(disk_mb)}m,mode=0755")
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
            mount(f"/proc/self/fd/{fd}", target, None, flags)
            mount(None, target, None, remount)
    finally:
        for fd in handles:
            os.close(fd)
    for name in ("/etc", "/dev"):
        os.makedirs(root + name, mode=0o755, exist_ok=True)
    for path in hidden_paths or ():
        target = root + os.path.realpath(path)
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
        elif os.path.lexists(target) and os.path.exists(root + "/dev/null"):
            mount(root + "/dev/null", target, None, MS_BIND)
    # The work directories' parent is the root's own directory: never one that a bind shows or
    # holds (a virtualenv at /sandbox/venv would otherwise share it, or make it read-only).
    base = "/sandbox"
    while any(p == base or p.startswith(base + "/") for p, *_ in binds):
        base += "_"
    os.mkdir(root + base, 0o711)
    os.chroot(root)
    os.chdir("/")
    return base
