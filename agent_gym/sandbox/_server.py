"""The sandbox's warm server: a fork server that runs every sandboxed call in its own process.

Run by :class:`agent_gym.sandbox.Sandbox` as ``python -I -B _server.py FD CONFIG_JSON``; it imports
only the standard library (plus the modules named in ``preload``), so it never loads agent_gym, torch
or transformers. ``FD`` is one end of a Unix socket pair: requests and results travel over it as
length-prefixed JSON frames.

Start-up (once per server, ``_isolation.py``):

1. when root (and not told otherwise): claim a block of unused uids (a lock file per block, so
   several servers on one host never share a uid), move into a new mount namespace and a new, empty
   network namespace, build a root of read-only bind mounts (the Python installation and system
   libraries, nothing else, each at its host path, wherever it lives, /tmp included) plus a private
   tmpfs for work directories, and ``chroot`` into it (``_root.py``);
2. import the ``preload`` modules (e.g. pandas) and freeze the heap (``gc.freeze``) so that forked
   workers share it copy-on-write;
3. report which isolation layers are in force, then serve (``_scheduler.py``).

Per call: a worker is forked from this warm process (a few are forked ahead of time, so a call is
a pipe round trip, not a Python start-up; ``_pool.py``). Before it reads any code, the worker
(``_worker.py``) puts itself in a new session, closes every inherited descriptor, applies rlimits
(CPU, address space, file size, open files, core; processes per uid), switches to its own
unprivileged uid when root, enters its throwaway work directory, installs a seccomp-bpf filter
(``_seccomp.py``: no fork/vfork/execve, sockets of family AF_UNIX only, no connect/bind/listen,
signals to itself only, no ptrace ...) and an audit hook (``_guard.py``: clear error messages;
writes only inside the work directory). The server enforces the wall-clock limit, reads at most
``output_bytes`` of output, reaps the worker and deletes its directory.

Stateful sessions keep one worker alive across calls (its globals persist) until the session is
closed, it is idle too long, or it dies (the next call then starts afresh and says so).

This file is only the entry point. Run by path, it has no package, and it may not get one the usual
ways: importing ``agent_gym.sandbox`` would load agent_gym (and may not be possible with
``Sandbox(python=...)``), and putting this directory on ``sys.path`` would let sandboxed code import
``client``, ``config`` ... as top-level modules and would add it to the paths the private root
shows. So the modules beside it are imported as the submodules of a private package whose only
search path is this directory, registered in ``sys.modules`` under a name nothing else uses.
Everything is imported before start-up: the private root need not show this directory.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

_PACKAGE = "_agent_gym_sandbox_server"


def _scheduler():
    """The ``_scheduler`` module beside this file (see the module docstring)."""
    if __package__:  # imported as agent_gym.sandbox._server
        from . import _scheduler

        return _scheduler
    import importlib
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.ModuleSpec(_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules[_PACKAGE] = importlib.util.module_from_spec(spec)
    return importlib.import_module(_PACKAGE + "._scheduler")


def main() -> None:
    fd = int(sys.argv[1])
    cfg = json.loads(sys.argv[2])
    server = _scheduler().Server(fd, cfg)
    try:
        server.start()
    except BaseException as exc:  # noqa: BLE001
        try:
            server.send({"op": "ready", "fatal": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        finally:
            os._exit(1)
    server.serve()


if __name__ == "__main__":
    main()
