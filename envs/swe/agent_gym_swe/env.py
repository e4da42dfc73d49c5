"""``AgentR1/SWE-v0``: fix a bug in a real repository with a shell, a file viewer and an editor.

Each episode gets its own copy of the task's repository in a sandbox worker (:mod:`agent_gym.sandbox`
with processes allowed: its own uid, a private read-only root, an empty network namespace, rlimits).
Tools: ``bash(command)``, ``view(path, start_line, end_line)``, ``edit(path, old_str, new_str)``,
``submit()``. Submitting (or answering without a tool call, or running out of turns) grades the
workspace: a fresh copy of the repository gets the agent's changes to source files, and the task's
hidden tests run there. Reward 1.0 when every ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` test passes, else
0.0; ``info["tests"]`` has the partial credit.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any, Mapping, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from agent_gym.core.env import AgentEnv, EnvReply, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import TaskList
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.sandbox import Sandbox, SandboxConfig, SandboxResult
from agent_gym.sandbox.tool import resolve_sandbox
from agent_gym.tools import Tool, ToolError
from agent_gym_swe.tasks import DIFFICULTIES, SWETask, data_dir, load_tasks, packaged_tasks, repo_archive, split_of, tar_files, task_files, test_files

__all__ = ["SWEEnv", "Workspace", "default_sandbox"]

_HELPERS = (Path(__file__).with_name("_in_sandbox.py")).read_text()
#: The sandbox the env uses unless given one: processes allowed (bash, pytest), room for a test run.
SANDBOX_DEFAULTS: dict[str, Any] = {
    "timeout_s": 60.0, "cpu_s": 60.0, "memory_mb": 1024, "output_bytes": 1 << 20, "max_threads": 64,
    "max_file_mb": 64, "disk_mb": 2048, "max_open_files": 512, "prefork": 2, "session_idle_s": 3600.0,
    "allow_processes": True, "echo": False,
}


def _hidden_paths() -> tuple[str, ...]:
    """What the agent must not read although the sandbox shows this Python's import paths: the
    packaged tasks (their fixes and test lists), and the git folder of a checkout holding them."""
    hidden = [str(data_dir())]
    here = Path(__file__).resolve().parent
    for parent in [here, *here.parents]:
        git = parent / ".git"
        if git.is_dir():
            hidden.append(str(git))
            break
        if git.is_file():  # a worktree: .git names its folder, which names the shared one
            text = git.read_text().strip()
            if text.startswith("gitdir:"):
                gitdir = Path(text.split(":", 1)[1].strip())
                hidden.append(str(gitdir))
                common = gitdir / "commondir"
                if common.is_file():
                    hidden.append(str((gitdir / common.read_text().strip()).resolve()))
            break
    return tuple(hidden)


def default_sandbox(**overrides: Any) -> SandboxConfig:
    """The SWE env's sandbox config (:data:`SANDBOX_DEFAULTS`, the task data hidden) with ``overrides``."""
    cfg = {**SANDBOX_DEFAULTS, **overrides}
    cfg["hidden_paths"] = tuple(cfg.get("hidden_paths", ())) + _hidden_paths()
    return SandboxConfig(**cfg)


def _tool_path() -> str:
    """PATH inside the sandbox: this interpreter's scripts folder first (python, pytest), then the system's."""
    scripts = {os.path.dirname(sys.executable), sysconfig.get_path("scripts")}
    return ":".join(sorted(scripts) + ["/usr/local/bin", "/usr/bin", "/bin"])


class Workspace:
    """One episode's repository in a stateful sandbox session (the helpers of ``_in_sandbox.py``)."""

    def __init__(self, sandbox: Sandbox, *, command_timeout_s: float, test_timeout_s: float, output_chars: int):
        self.sandbox = sandbox
        self.command_timeout_s = float(command_timeout_s)
        self.test_timeout_s = float(test_timeout_s)
        self.output_chars = int(output_chars)
        self.task: SWETask | None = None
        self.changes: dict[str, str | None] = {}
        self._session: Any = None

    def start(self, task: SWETask, changes: Mapping[str, str | None] | None = None) -> None:
        """A fresh copy of ``task``'s buggy repository (plus ``changes``, from a snapshot); the worker
        starts on the first call."""
        self.close()
        self.task = task
        self.changes = dict(changes or {})
        archive = repo_archive(task)
        setup: dict[str, Any] = {"path": _tool_path(), "pythonpath": _pythonpath(task), "changes": self.changes}
        if task.test_patch:
            setup["grade_archive"] = base64.b64encode(tar_files(test_files(task, task_files(task)).items())).decode("ascii")
        prelude = _HELPERS + f"\n_setup(open('repo.b64').read(), json.loads({json.dumps(setup)!r}))\nos.remove('repo.b64')\n"
        self._session = self.sandbox.session(files={"repo.b64": base64.b64encode(archive).decode("ascii")}, prelude=prelude)

    def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    # -- calls -------------------------------------------------------------------------------------------

    def _code(self, name: str, *args: Any) -> tuple[str, float]:
        timeout = self.test_timeout_s if name == "grade" else self.command_timeout_s
        return f"{name}(*__import__('json').loads({json.dumps(list(args))!r}))", timeout + 15.0

    def _parse(self, result: SandboxResult) -> dict[str, Any]:
        if result.state_reset:
            raise ToolError("the workspace was lost (its sandbox worker stopped) and this episode cannot go on from it")
        lines = [ln for ln in result.output.splitlines() if ln.startswith("{")]
        if not result.ok or not lines:
            raise ToolError(f"the workspace failed: {result.text()[-1500:]}")
        return json.loads(lines[-1])

    def call(self, name: str, *args: Any) -> dict[str, Any]:
        if self._session is None:
            raise ToolError("no episode is under way: call reset() first")
        code, timeout = self._code(name, *args)
        return self._parse(self._session.run(code, timeout_s=timeout, cpu_s=timeout))

    async def acall(self, name: str, *args: Any) -> dict[str, Any]:
        if self._session is None:
            raise ToolError("no episode is under way: call reset() first")
        code, timeout = self._code(name, *args)
        return self._parse(await self._session.arun(code, timeout_s=timeout, cpu_s=timeout))

    def grade_args(self) -> tuple[Any, ...]:
        assert self.task is not None
        return (self.task.grading_command(), list(self.task.source_globs), self.test_timeout_s, 4 << 20)

    def snapshot_changes(self) -> dict[str, str | None]:
        return dict(self.call("changes", 32 << 20)["changes"])


def _pythonpath(task: SWETask) -> str:
    return task.pythonpath


def _text(reply: Mapping[str, Any]) -> str:
    if not reply.get("ok", True):
        raise ToolError(reply["text"])
    return str(reply["text"])


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(description="A bash command, run in the repository's root folder.")


class ViewArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="A file or folder, relative to the repository's root.")
    start_line: int | None = Field(default=None, description="First line to show (1-based); default the first.")
    end_line: int | None = Field(default=None, description="Last line to show; default (or -1) the last.")


class EditArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="The file to edit, relative to the repository's root.")
    old_str: str = Field(description="Text that occurs exactly once in the file, whitespace included.")
    new_str: str = Field(description="The text that replaces it.")


class SubmitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _WorkspaceTool(Tool):
    timeout_s = None  # the sandbox enforces the limits and always answers

    def __init__(self, workspace: Workspace, description: str):
        super().__init__(description=description, timeout_s=None)
        self.workspace = workspace


class BashTool(_WorkspaceTool):
    name = "bash"
    args_model = BashArgs

    async def run(self, command: str) -> str:  # type: ignore[override]
        ws = self.workspace
        return _text(await ws.acall("bash", command, ws.command_timeout_s, ws.output_chars))

    # The workspace is the episode's state: a snapshot holds its changed files (not the commands that
    # made them, whose output may differ when re-run), a restore writes them into a fresh copy.
    def snapshot_state(self) -> dict[str, Any]:
        ws = self.workspace
        assert ws.task is not None
        return {"task": ws.task.to_dict(), "changes": ws.snapshot_changes()}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        self.workspace.start(SWETask.from_dict(state["task"]), state["changes"])


class ViewTool(_WorkspaceTool):
    name = "view"
    args_model = ViewArgs

    async def run(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:  # type: ignore[override]
        return _text(await self.workspace.acall("view", path, start_line, end_line, self.workspace.output_chars))


class EditTool(_WorkspaceTool):
    name = "edit"
    args_model = EditArgs

    async def run(self, path: str, old_str: str, new_str: str) -> str:  # type: ignore[override]
        return _text(await self.workspace.acall("edit", path, old_str, new_str))


class SubmitTool(_WorkspaceTool):
    name = "submit"
    args_model = SubmitArgs

    async def run(self) -> str:  # type: ignore[override]
        return "submitted"  # the env grades a turn that calls submit; this is never reached through it


class SWETests(TypedDict):
    """The hidden tests' outcome: ``[passed, listed]`` per kind, and the partial credit."""

    fail_to_pass: list[int]
    pass_to_pass: list[int]
    partial_credit: float
    exit_status: int | None
    """The test command's exit status (``None``: it timed out)."""


class SWEStepInfo(StepInfo, total=False):
    """The ``info`` of a SWE step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the grade."""

    submitted: bool
    """The agent called ``submit`` (else the turn limit ended it)."""
    tests: SWETests
    changed_files: list[str]
    """Source files the agent changed (brought into the graded copy)."""
    ignored_files: list[str]
    """Files it changed that grading ignores (tests, conftest.py, configuration)."""
    grading_error: str
    """Why the tests could not be run."""


class SWEEnv(AgentEnv[SWETask, ResetInfo, SWEStepInfo]):
    """Fix a bug in a repository (see the module docstring).

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        split: ``"train"`` or ``"test"`` of the packaged tasks (one in five is ``test``).
        difficulty: ``"easy"`` / ``"medium"`` / ``"hard"``, or ``None`` for all.
        tasks: a JSONL (or ``.jsonl.gz``) file of tasks instead of the packaged ones: ours or
            SWE-bench instances (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
            ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``problem_statement``); ``split`` and ``difficulty``
            then do not filter.
        repo: the local folder or git checkout of every task of ``tasks`` that names none.
        test_command: the test command of every task of ``tasks`` that names none.
        sandbox: a :class:`Sandbox`, a dict of :class:`SandboxConfig` fields over
            :data:`SANDBOX_DEFAULTS`, or ``None``.
        command_timeout_s: wall-clock limit of one ``bash`` command.
        test_timeout_s: wall-clock limit of the test run that grades a submission.
        output_chars: the most a tool's output shows (the rest is cut, and the reply says so).
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` default 30,
            ``max_context_tokens`` 16384, ``max_action_tokens`` 2048).
    """

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        split: str = "train",
        difficulty: str | None = None,
        tasks: str | os.PathLike[str] | None = None,
        repo: str | os.PathLike[str] | None = None,
        test_command: str | None = None,
        sandbox: Sandbox | SandboxConfig | Mapping[str, Any] | None = None,
        command_timeout_s: float = 30.0,
        test_timeout_s: float = 120.0,
        output_chars: int = 8000,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        if "tools" in kwargs:
            raise TypeError("SWEEnv offers exactly its four tools (bash, view, edit, submit); do not pass tools=")
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        if difficulty is not None and difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {DIFFICULTIES} or None, got {difficulty!r}")
        if tasks is None and (repo is not None or test_command is not None):
            raise ValueError("repo= and test_command= describe the tasks of a task file: pass tasks=PATH (a JSONL file) too")
        for name, value in (("command_timeout_s", command_timeout_s), ("test_timeout_s", test_timeout_s), ("output_chars", output_chars)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        kwargs.setdefault("max_turns", 30)
        kwargs.setdefault("max_context_tokens", 16384)
        kwargs.setdefault("max_action_tokens", 2048)
        self.split, self.difficulty = split, difficulty
        if tasks is None:
            chosen = [t for t in packaged_tasks() if split_of(t.instance_id) == split and difficulty in (None, t.difficulty)]
            name = f"packaged SWE tasks ({split}{', ' + difficulty if difficulty else ''})"
        else:
            chosen, name = load_tasks(tasks, repo=repo, test_command=test_command), f"SWE task file {tasks}"
        self.tasks = TaskList(chosen, name=name)
        if isinstance(sandbox, Sandbox):
            box = sandbox
        else:
            box = resolve_sandbox(default_sandbox(**dict(sandbox or {})) if not isinstance(sandbox, SandboxConfig) else sandbox)
        self.workspace = Workspace(box, command_timeout_s=command_timeout_s, test_timeout_s=test_timeout_s, output_chars=output_chars)
        limits = f"Limits: {command_timeout_s:g} s per command, no network access; background processes end with the command."
        tools = [
            BashTool(self.workspace, "Run a bash command in the repository's root folder and return its output and exit code. " + limits),
            ViewTool(self.workspace, "Show a file with line numbers (optionally only start_line..end_line), or list a folder."),
            EditTool(self.workspace, "Replace old_str, which must occur exactly once in the file, by new_str."),
            SubmitTool(self.workspace, "Submit the repository as it is now: the hidden tests run and the episode ends."),
        ]
        super().__init__(tokenizer, tools=tools, **kwargs)
        self.prompts = _prompts(None if prompt_dir is None else os.fspath(prompt_dir))

    @property
    def sandbox(self) -> Sandbox:
        return self.workspace.sandbox

    # -- task source -------------------------------------------------------------------------------------

    def sample_task(self, rng: Any) -> SWETask:
        return self.tasks.sample(rng)

    def get_task(self, task_id: str) -> SWETask:
        return self.tasks.get(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> SWETask:
        return SWETask.from_dict(task)

    def initial_messages(self, task: SWETask) -> list[dict[str, Any]]:
        example = {"name": "view", "arguments": {"path": "README.rst", "start_line": 1, "end_line": 20}}
        system = self.prompts.render("swe_system.j2", **self.tool_prompt_variables(example), max_turns=self.max_turns)
        user = self.prompts.render("swe_user.j2", problem_statement=task.problem_statement, test_command=task.test_command)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def on_reset(self, task: SWETask) -> Mapping[str, Any]:
        self.workspace.start(task)  # a fresh copy of the repository (the previous episode's is closed)
        return {}

    def close(self) -> None:
        self.workspace.close()
        super().close()

    # -- turns ---------------------------------------------------------------------------------------------

    def _ends(self, turn: Turn) -> bool:
        calls = turn.parsed.calls
        return not turn.parsed.has_tool_calls or any(c.name == "submit" for c in calls) or turn.index >= self.max_turns

    def respond(self, turn: Turn) -> EnvReply:
        import asyncio

        return asyncio.run(self.arespond(turn)) if _no_loop() else _run_in_thread(self.arespond(turn))

    async def arespond(self, turn: Turn) -> EnvReply:
        if not self._ends(turn):
            return self._tool_reply(await self.executor.aexecute(turn.parsed))
        before: list[Any] = []
        others = [c for c in turn.parsed.calls if c.name != "submit"]
        if others and any(c.name == "submit" for c in turn.parsed.calls):
            from dataclasses import replace

            before = await self.executor.aexecute(replace(turn.parsed, calls=tuple(others), errors=()))
        try:
            outcome = await self.workspace.acall("grade", *self.workspace.grade_args())
        except ToolError as exc:
            outcome = {"status": None, "outcomes": {}, "changed": [], "ignored": [], "tail": str(exc), "error": str(exc)}
        grade = self._grade(outcome)
        submitted = any(c.name == "submit" for c in turn.parsed.calls)
        truncated = turn.parsed.has_tool_calls and not submitted
        info: dict[str, Any] = {"correct": grade.correct, "reward_components": dict(grade.components), "submitted": submitted, **grade.info}
        if truncated:
            info["truncated_reason"] = "max_turns"
        reply = EnvReply(reward=grade.reward, terminated=not truncated, truncated=truncated, info=info)
        if before:
            tool = self._tool_reply(before)
            reply.messages, reply.info = tool.messages, {**tool.info, **info}
        return reply

    def grade(self, task: SWETask, turn: Turn) -> Grade:
        return self._grade(self.workspace.call("grade", *self.workspace.grade_args()))

    def _grade(self, outcome: Mapping[str, Any]) -> Grade:
        """Reward 1.0 iff every FAIL_TO_PASS and PASS_TO_PASS test passed (or, for a task that lists
        none, the test command exited 0); the counts are the partial credit."""
        assert self.task is not None
        results: Mapping[str, str] = outcome.get("outcomes") or {}
        f2p = [t for t in self.task.FAIL_TO_PASS if results.get(t) == "passed"]
        p2p = [t for t in self.task.PASS_TO_PASS if results.get(t) == "passed"]
        listed = len(self.task.FAIL_TO_PASS) + len(self.task.PASS_TO_PASS)
        if listed:
            resolved = len(f2p) == len(self.task.FAIL_TO_PASS) and len(p2p) == len(self.task.PASS_TO_PASS)
            partial = (len(f2p) + len(p2p)) / listed
        else:
            resolved = outcome.get("status") == 0
            partial = 1.0 if resolved else 0.0
        tests = {
            "fail_to_pass": [len(f2p), len(self.task.FAIL_TO_PASS)],
            "pass_to_pass": [len(p2p), len(self.task.PASS_TO_PASS)],
            "partial_credit": round(partial, 4),
            "exit_status": outcome.get("status"),
        }
        info = {"answer_check": "resolved" if resolved else "unresolved", "tests": tests,
                "changed_files": list(outcome.get("changed") or []), "ignored_files": list(outcome.get("ignored") or [])}
        if outcome.get("error"):
            info["grading_error"] = outcome["error"]
        return Grade.from_check(resolved, None, **info)


def _no_loop() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _run_in_thread(coro: Any) -> Any:
    """Run ``coro`` to completion from sync code that is itself inside an event loop."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@functools.lru_cache(maxsize=16)
def _prompts(prompt_dir: str | None) -> PromptTemplates:
    return PromptTemplates("agent_gym_swe", prompt_dir)
