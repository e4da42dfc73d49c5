"""The sandbox server's start-up: which isolation layers it puts in force, and what that leaves.

:meth:`Isolation.start` runs once, before anything is served: when root (and not told otherwise) it
claims a uid block, enters a new network namespace and builds the private root (``_root.py``);
it checks that the seccomp filter works (``_seccomp.py``), imports the ``preload`` modules and
freezes the heap so that forked workers share it copy-on-write. What it establishes (the layers in
force, the errors met, the work directories' parent, the uids, the memory baseline) is all a worker
needs of the server, so workers are given this object and never the scheduler.
"""

from __future__ import annotations

import gc
import os
import resource
import tempfile

from ._libc import CLONE_NEWNET, PR_SET_CHILD_SUBREAPER, get_libc, unshare
from ._root import build_root, claim_uid_block, python_paths
from ._seccomp import AUDIT_ARCH, Seccomp, seccomp_works

# The server imports only what it uses, and not typing: its names are for the type checker alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Isolation:
    """What start-up put in force for this server process (read by every worker it forks)."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.pid = os.getpid()
        self.iso: dict[str, Any] = {
            "root": os.geteuid() == 0, "setuid": False, "chroot": False, "netns": False, "seccomp": False,
            "audit_hook": bool(cfg["audit_hook"]), "arch": os.uname().machine, "uid_range": None,
        }
        self.errors: list[str] = []
        self.read_roots: list[str] = []
        self.base = ""  # the work directories' parent
        self.uids: list[int] = []  # worker uid indices: real uids when setuid, slot numbers otherwise
        self.seccomp: Seccomp | None = None
        self.preloaded: list[str] = []
        self.baseline = 0  # the warm interpreter's address space, in bytes

    def start(self) -> None:
        cfg = self.cfg
        self._statm = os.open("/proc/self/statm", os.O_RDONLY)
        _, libc = get_libc()  # ctypes is loaded once here; workers only call the prepared functions
        # Orphans of workers (only possible without seccomp) are re-parented to this server and
        # reaped by it, instead of lingering as zombies that count against their uid's RLIMIT_NPROC.
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, None, 0, 0)
        privileged = self.iso["root"] and cfg.get("privileged") is not False
        self.read_roots = python_paths()
        if privileged:
            self._setup_privileged()
        if not self.iso["chroot"]:
            self.base = tempfile.mkdtemp(prefix="agent-gym-sandbox-")
            os.chmod(self.base, 0o711)
        self.iso["seccomp"] = bool(cfg["seccomp"]) and self.iso["arch"] in AUDIT_ARCH and seccomp_works(self.iso["arch"], self.errors)
        if self.iso["seccomp"]:
            self.seccomp = Seccomp(self.iso["arch"], bool(cfg.get("allow_processes")))
        os.environ.update(HOME=self.base, TMPDIR=self.base, USER="sandbox", LOGNAME="sandbox")
        if not self.iso["seccomp"] and cfg["seccomp"]:
            self.errors.append(f"seccomp not available on {self.iso['arch']}")
        if cfg.get("allow_processes"):
            missing = [layer for layer in ("setuid", "chroot", "netns") if not self.iso[layer]]
            if missing:
                raise RuntimeError(
                    f"allow_processes needs the privileged layers, and {', '.join(missing)} could not be put in force "
                    f"({'; '.join(self.errors) or 'not running as root'}): run as root (a container's root is enough)"
                )
        if not self.iso["setuid"]:
            self.uids = list(range(cfg["max_workers"]))
        for name in cfg["preload"]:
            try:
                __import__(name)
                self.preloaded.append(name)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"preload {name}: {type(exc).__name__}: {exc}")
        gc.collect()
        gc.freeze()
        self.baseline = self._vm_size()

    def _setup_privileged(self) -> None:
        try:
            self._uid_lock_fd, self.uids = claim_uid_block(self.cfg["max_workers"])
        except OSError as exc:
            self.errors.append(f"uid block: {exc}")
            self.uids = []
        try:
            unshare(CLONE_NEWNET)
            self.iso["netns"] = True
        except OSError as exc:
            self.errors.append(f"network namespace: {exc}")
        try:
            self.base = build_root(self.read_roots, self.cfg.get("extra_ro_paths"), self.cfg["disk_mb"], self.cfg.get("hidden_paths"))
            self.iso["chroot"] = True
        except OSError as exc:
            self.errors.append(f"mount namespace / chroot: {exc}")
        # Without the private root, an unprivileged uid may not even be able to read the Python
        # installation (e.g. under /root), so uids are switched only inside it.
        self.iso["setuid"] = self.iso["chroot"] and bool(self.uids)
        if self.iso["setuid"]:
            self.iso["uid_range"] = [self.uids[0], self.uids[-1]]

    def _vm_size(self) -> int:
        # read through a descriptor opened before the chroot: there is no /proc inside the private root
        try:
            return int(os.pread(self._statm, 256, 0).split()[0]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            return 0
