"""Running an agent program for one episode: a Python callable in a thread, or a command in a subprocess.

Either way the program gets the endpoint's base URL, its own API key and the task, and its end (a
return value, an exit, an exception) is reported to its :class:`agent_gym.endpoint.server.Session`
as a :class:`~agent_gym.endpoint.server.ProgramEnd`:

- a callable ``program(base_url=..., api_key=..., task=...)`` (``async def`` too: run on an event loop
  of its own) runs in a daemon thread; its return value is the result, an exception is the error
  (its type, message and where it was raised). A thread cannot be killed: a callable that hangs
  keeps its thread until it returns, but its episode ends at its time limit and every request it
  makes after that is answered 410;
- a command (a list of arguments) runs in a new process group with ``OPENAI_BASE_URL``,
  ``OPENAI_API_KEY`` and ``AGENT_GYM_TASK`` (the task as JSON) in its environment, its working
  directory a fresh temporary folder of the episode; its stdout is the result, a non-zero exit the
  error (with the end of its stderr). Stopping it kills the whole group.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import importlib.util
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from agent_gym.endpoint.server import Session

__all__ = ["ProgramSpec", "RunningProgram", "describe_exception", "load_callable", "run_test"]

#: The end of a command's stdout kept as its result, and of its stderr kept in an error.
MAX_OUTPUT_CHARS = 64_000
STDERR_TAIL_CHARS = 2_000


def load_callable(spec: str, what: str = "program") -> Callable[..., Any]:
    """``"package.module:function"``, or ``"path/to/file.py:function"`` (a file imported by path).

    Raises:
        ValueError: the spec does not name a callable; the message says what was looked for.
    """
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"{what} {spec!r}: give 'package.module:function' or 'path/to/file.py:function' "
                         f"(a command is a list of arguments)")
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            name = f"agent_gym_program_{abs(hash(str(path)))}"
            module = sys.modules.get(name)
            if module is None:
                module_spec = importlib.util.spec_from_file_location(name, path)
                if module_spec is None or module_spec.loader is None:
                    raise ImportError(f"cannot load {path}")
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[name] = module
                module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        found = getattr(module, attr)
    except (ImportError, AttributeError, FileNotFoundError, OSError) as exc:
        raise ValueError(f"{what} {spec!r}: cannot import it ({type(exc).__name__}: {exc})") from None
    if not callable(found):
        raise ValueError(f"{what} {spec!r} is not callable")
    return found


class ProgramSpec:
    """What runs in an episode: a callable, or a command (see the module docstring).

    Args:
        program: a callable, its ``"module:function"`` / ``"file.py:function"`` path, or a command
            (a list of strings).
        env: more environment variables for a command.
    """

    def __init__(self, program: Any, env: Mapping[str, str] | None = None):
        self.command: list[str] | None = None
        self.function: Callable[..., Any] | None = None
        if isinstance(program, (list, tuple)):
            if not program or not all(isinstance(a, str) for a in program):
                raise ValueError(f"a command program is a non-empty list of strings, got {program!r}")
            self.command = list(program)
        elif isinstance(program, str):
            self.function = load_callable(program)
        elif callable(program):
            self.function = program
        else:
            raise ValueError(f"program must be a callable, 'module:function' or a command list, got {program!r}")
        self.env = {str(k): str(v) for k, v in (env or {}).items()}

    @property
    def name(self) -> str:
        if self.command is not None:
            return " ".join(self.command)
        f = self.function
        return f"{getattr(f, '__module__', '?')}:{getattr(f, '__qualname__', repr(f))}"

    def start(self, session: Session, base_url: str, task: Mapping[str, Any]) -> RunningProgram:
        """Start the program for one episode; its end goes to ``session``."""
        return RunningProgram(self, session, base_url, task)


class RunningProgram:
    """One episode's program (made by :meth:`ProgramSpec.start`)."""

    def __init__(self, spec: ProgramSpec, session: Session, base_url: str, task: Mapping[str, Any]):
        self.session = session
        self.workdir: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        if spec.command is not None:
            self.workdir = tempfile.mkdtemp(prefix="agent-gym-program-")
            env = {**os.environ, **spec.env, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": session.key,
                   "AGENT_GYM_TASK": json.dumps(task)}
            try:
                self._proc = subprocess.Popen(spec.command, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            except OSError as exc:
                session.finish(error=f"the command {spec.command[0]!r} could not start: {exc}")
                return
            target: Callable[[], None] = self._wait_command
        else:
            assert spec.function is not None
            function = spec.function

            def target() -> None:
                _run_callable(function, session, base_url, copy.deepcopy(dict(task)))

        threading.Thread(target=target, name="agent-gym-program", daemon=True).start()

    def _wait_command(self) -> None:
        proc = self._proc
        assert proc is not None
        out, err = proc.communicate()
        stdout = out.decode("utf-8", "replace")[-MAX_OUTPUT_CHARS:]
        if proc.returncode == 0:
            self.session.finish(value=stdout)
        else:
            tail = err.decode("utf-8", "replace").strip()[-STDERR_TAIL_CHARS:]
            how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            self.session.finish(error=f"the command ended with {how}" + (f"; stderr ends: {tail}" if tail else ""))

    def stop(self) -> None:
        """Kill a command's process group (a callable cannot be stopped: see the module docstring) and
        remove the episode's working directory."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _run_callable(function: Callable[..., Any], session: Session, base_url: str, task: dict[str, Any]) -> None:
    try:
        value = function(base_url=base_url, api_key=session.key, task=task)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
    except BaseException as exc:  # noqa: BLE001 - the program's failure is its episode's end, told in info
        session.finish(error=describe_exception(exc))
        return
    session.finish(value=value)


async def _awaited(value: Any) -> Any:
    return await value


def describe_exception(exc: BaseException) -> str:
    """``Type: message (at file:line in function)``: the exception and the innermost frame it came from."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def run_test(command: Sequence[str], *, task: Mapping[str, Any], result: Any, workdir: str | None,
             timeout_s: float) -> tuple[bool, str]:
    """Run a grading command (a test) after the program: ``(passed, why)``; passed when it exits 0.
    It gets ``AGENT_GYM_TASK`` and ``AGENT_GYM_RESULT`` (the result as text) and runs in the episode's
    working directory (a command program's files are there)."""
    env = {**os.environ, "AGENT_GYM_TASK": json.dumps(task), "AGENT_GYM_RESULT": result if isinstance(result, str) else json.dumps(result, default=str)}
    try:
        proc = subprocess.run(list(command), cwd=workdir, env=env, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"the test did not end within {timeout_s:g} s"
    except OSError as exc:
        return False, f"the test {command[0]!r} could not start: {exc}"
    if proc.returncode == 0:
        return True, "passed"
    tail = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip()[-STDERR_TAIL_CHARS:]
    return False, f"exit code {proc.returncode}" + (f": {tail}" if tail else "")
