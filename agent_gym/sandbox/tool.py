"""The sandbox as an agent tool: ``python(code)``, with typed error kinds counted in ``info``.

:class:`PythonTool` is a :class:`~agent_gym.tools.Tool` whose calls run in a
:class:`~agent_gym.sandbox.Sandbox` (one stateful session per episode, or a fresh process per call).
:class:`SandboxToolExecutor` is the env's executor: for sandbox tools it reports the sandbox's own
error kind (``sandbox_timeout``, ``sandbox_memory``, ``sandbox_output_truncated``,
``sandbox_forbidden_network`` / ``_file`` / ``_fork`` / ``_native``, ``sandbox_error``) instead of
the generic ``exception``, so ``info["tool_error_kinds"]`` says what went wrong. With a plain
``ToolExecutor`` the tool still works: a failed call raises :class:`SandboxToolError`, which the
executor shows to the policy as ``Error: <output and traceback>`` (kind ``exception``).
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from agent_gym.sandbox.client import Sandbox, SandboxSession, shared_sandbox
from agent_gym.sandbox.config import SandboxConfig, SandboxResult
from agent_gym.tools import Tool, ToolError, ToolExecutor, ToolResult
from agent_gym.tools.parsing import ToolCall

__all__ = ["PythonTool", "SandboxToolError", "SandboxToolExecutor", "resolve_sandbox"]


class PythonArgs(BaseModel):
    # (no docstring: pydantic would put it in the schema the policy reads)
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Python 3 source code to run. Use print() to see values.")


class SandboxToolError(ToolError):
    """A sandboxed call that did not finish cleanly; the message is what the policy reads."""

    def __init__(self, result: SandboxResult):
        super().__init__(result.text())
        self.result = result


def resolve_sandbox(sandbox: Sandbox | SandboxConfig | Mapping[str, Any] | None) -> Sandbox:
    """A sandbox from an instance (used as is), a config or dict of options (the process-wide shared
    sandbox for that config), or ``None`` (the shared default sandbox)."""
    if isinstance(sandbox, Sandbox):
        return sandbox
    return shared_sandbox(SandboxConfig.coerce(dict(sandbox) if isinstance(sandbox, Mapping) else sandbox))


class PythonTool(Tool):
    """``python(code)``: run code in the sandbox and return its output.

    Args:
        sandbox: a :class:`Sandbox`, a :class:`SandboxConfig` / dict (the shared sandbox for it), or
            ``None`` (the shared default).
        stateful: keep variables across the calls of one episode (one worker per episode) instead of
            a fresh process per call.
        files: files put in the working directory of every call/session (name -> text).
        prelude: code run first, silently, in the same namespace (e.g. loading tables).
        name / description: override the tool's name and the description shown to the policy.

    The env calls :meth:`new_episode` on reset (closing the previous session) and :meth:`close` on
    close. :attr:`results` holds this episode's :class:`SandboxResult` objects.
    """

    name = "python"
    args_model = PythonArgs
    timeout_s = None  # the sandbox enforces its own limits and always answers

    def __init__(
        self,
        sandbox: Sandbox | SandboxConfig | Mapping[str, Any] | None = None,
        *,
        stateful: bool = True,
        files: Mapping[str, str] | None = None,
        prelude: str | None = None,
        name: str | None = None,
        description: str | None = None,
    ):
        self.sandbox = resolve_sandbox(sandbox)
        self.stateful = bool(stateful)
        if description is None:
            cfg = self.sandbox.config
            description = (
                "Run Python 3 code and return what it prints (stdout and stderr); the value of a final bare "
                "expression is printed too. "
                + ("Variables, imports and functions persist between calls in this conversation. " if self.stateful else "Every call starts in a fresh interpreter: nothing persists between calls. ")
                + f"Limits: {cfg.timeout_s:g} s, {cfg.memory_mb:g} MB, {cfg.output_bytes} bytes of output; no network access."
            )
        super().__init__(name=name, description=description, timeout_s=None)
        self.files: dict[str, str] = dict(files or {})
        self.prelude = prelude
        self._session: SandboxSession | None = None
        self.results: list[SandboxResult] = []
        self.cells: list[str] = []  # this episode's code, in order: what a restored session re-runs

    def new_episode(self, *, files: Mapping[str, str] | None = None, prelude: str | None = None) -> None:
        """Forget the previous episode (its session is closed) and set this episode's files/prelude."""
        self.close()
        if files is not None:
            self.files = dict(files)
        if prelude is not None:
            self.prelude = prelude
        self.results = []
        self.cells = []

    async def arun_code(self, code: str) -> SandboxResult:
        """Run ``code`` for the current episode; never raises for anything the code does."""
        if self.stateful:
            if self._session is None or self._session.closed:
                self._session = self.sandbox.session(files=self.files, prelude=self.prelude)
            result = await self._session.arun(code)
        else:
            result = await self.sandbox.arun(code, files=self.files or None, prelude=self.prelude)
        self.results.append(result)
        self.cells.append(code)
        return result

    # -- env state as data (agent_gym.core.snapshot) ---------------------------------------------------

    def snapshot_state(self) -> dict[str, Any]:
        """This episode's files, prelude and cells with their outputs: a stateful session cannot be
        copied, so a restore re-runs the cells in a fresh one and checks that each gives the same output."""
        return {
            "files": dict(self.files),
            "prelude": self.prelude,
            "cells": list(self.cells),
            "outputs": [r.text() for r in self.results],
        }

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Start this tool's episode over as ``state`` left it (see :meth:`snapshot_state`).

        Raises:
            RuntimeError: a re-run cell printed something else than it did (the code is not
                deterministic: time, randomness, the file system), so the session would differ
                (``restore`` reports it as a ``SnapshotError``).
        """
        self.new_episode(files=state["files"], prelude=state["prelude"])
        if not self.stateful:
            self.cells = list(state["cells"])  # each call ran in a fresh interpreter: nothing to rebuild
            return
        self._session = self.sandbox.session(files=self.files, prelude=self.prelude)
        for k, (code, expected) in enumerate(zip(state["cells"], state["outputs"])):
            result = self._session.run(code)  # blocking: a restore is synchronous
            self.results.append(result)
            self.cells.append(code)
            if result.text() != expected:
                self.close()
                raise RuntimeError(
                    f"re-running cell {k + 1} of the episode in a fresh sandbox printed {result.text()[:200]!r}, "
                    f"not {expected[:200]!r}: the cells are not deterministic, so this stateful session cannot be restored"
                )

    async def run(self, code: str) -> str:  # type: ignore[override]
        result = await self.arun_code(code)
        if result.ok:
            return result.text()
        raise SandboxToolError(result)

    def close(self) -> None:
        """Close this episode's session (its worker stops and its directory is deleted)."""
        session, self._session = self._session, None
        if session is not None:
            session.close()


class SandboxToolExecutor(ToolExecutor):
    """A :class:`~agent_gym.tools.ToolExecutor` that reports sandbox outcomes with their own kinds.

    A call of a :class:`PythonTool` never counts as ``exception``: its result text (output, then the
    traceback or the limit that was hit) goes to the policy and its kind is
    :attr:`SandboxResult.error_kind` (``None`` when ok). Other tools behave exactly as with the
    base executor.
    """

    async def _execute_checked(self, call: ToolCall) -> ToolResult:
        t = self.tools.get(call.name)
        if isinstance(t, PythonTool):
            prepared = self._prepare(call)
            if isinstance(prepared, ToolResult):
                return prepared  # invalid arguments
            _, args = prepared
            result = await t.arun_code(args.code)  # type: ignore[attr-defined]
            return self._result(call.id, call.name, result.text(), result.error_kind)
        return await super()._execute_checked(call)
