"""A Python code sandbox for tool-integrated reasoning: time, memory, process, output, file and
network limits, one throwaway process per call (or one per stateful session), async-first.

    from agent_gym.sandbox import Sandbox
    sandbox = Sandbox(timeout_s=5, memory_mb=256)
    result = sandbox.run("print(sum(range(10)))")     # SandboxResult(kind="ok", output="45\\n", ...)
    result = await sandbox.arun(code)                # never blocks the event loop
    sandbox.isolation                                # which layers are in force on this machine

Every call runs in a worker process forked from a warm server (nothing heavy imported unless asked
with ``preload``), so a call costs a pipe round trip instead of a Python start-up. Violations come
back as typed results (:data:`RESULT_KINDS`), never as exceptions; :class:`PythonTool` and
:class:`SandboxToolExecutor` turn them into tool error messages with counted kinds.
"""

from __future__ import annotations

from typing import Any

from agent_gym.sandbox.client import Sandbox, SandboxError, SandboxSession, shared_sandbox
from agent_gym.sandbox.config import PREFORK_REFILL_MODES, RESULT_KINDS, SandboxConfig, SandboxResult

__all__ = [
    "PREFORK_REFILL_MODES",
    "RESULT_KINDS",
    "PythonTool",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxResult",
    "SandboxSession",
    "SandboxToolExecutor",
    "shared_sandbox",
]


def __getattr__(name: str) -> Any:
    # The tool layer needs pydantic (agent_gym.tools); the sandbox itself does not.
    if name in ("PythonTool", "SandboxToolExecutor"):
        from agent_gym.sandbox import tool

        return getattr(tool, name)
    raise AttributeError(f"module 'agent_gym.sandbox' has no attribute {name!r}")
