"""The generic MCP env: tasks from a file, tools from MCP servers, a grader by name.

With no arguments it plays the packaged demo: warehouse questions (:data:`DEMO_TASKS`, a ``train`` and
a ``test`` split on disjoint items) answered with the ``stock`` and ``price`` tools of the demo server
:mod:`agent_gym_mcp.demo_server` (:func:`demo_servers`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import TaskList, text_of
from agent_gym.core.grading import after_marker
from agent_gym.core.types import ResetInfo, StepInfo

__all__ = [
    "DEMO_INSTRUCTIONS",
    "DEMO_SPLITS",
    "DEMO_TASKS",
    "MCPTaskEnv",
    "demo_servers",
    "exact_match",
    "load_tasks",
    "resolve_grader",
    "select_split",
]

#: What a grader returns: a reward (``bool`` counts as 1.0 / 0.0) or a full :class:`Grade`.
GraderResult = float | bool | Grade
Grader = Callable[[str, Mapping[str, Any]], GraderResult]

DEFAULT_INSTRUCTIONS = "Solve the task. Use the tools when they help."

#: The packaged demo tasks: one JSONL file, each task with a ``"split"`` (``train`` or ``test``).
DEMO_TASKS = Path(__file__).with_name("data") / "warehouse_tasks.jsonl"
DEMO_SPLITS = ("train", "test")
#: The instructions of the demo's system prompt (``instructions=`` replaces them).
DEMO_INSTRUCTIONS = (
    "You are a warehouse assistant. Look up stock and prices with the tools; never guess a number. "
    "Give the final answer as a whole number."
)


def demo_servers() -> list[dict[str, Any]]:
    """The demo's MCP server: :mod:`agent_gym_mcp.demo_server` over stdio with this Python, read-only
    (its tools only look things up: one server process is shared by every episode and env of the
    process, stopped when the last env using it closes)."""
    return [{"command": [sys.executable, "-m", "agent_gym_mcp.demo_server"], "name": "warehouse", "read_only": True}]


def load_tasks(tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tasks from a JSONL file (one ``{"id", "prompt", "answer"}`` object a line, blank lines skipped; ``id``
    defaults to the task's position, from 0; ``question`` is read as ``prompt``) or from a list of such
    mappings.

    Raises:
        ValueError: a line that is not a JSON object, or a task without ``prompt`` (or ``question``).
    """
    if isinstance(tasks, (str, os.PathLike)):
        rows: list[Any] = []
        path = Path(tasks).expanduser()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON object ({exc})") from None
        where = str(path)
    else:
        rows, where = list(tasks), "tasks"
    loaded = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}: task {index} is not an object: {row!r}")
        prompt = row.get("prompt", row.get("question"))
        if prompt is None:
            raise ValueError(f"{where}: task {index} has no \"prompt\" (keys: {sorted(row)})")
        loaded.append({**row, "id": str(row.get("id", index)), "prompt": text_of(prompt)})
    return loaded


def select_split(tasks: Sequence[dict[str, Any]], split: str | None, where: str = "tasks") -> list[dict[str, Any]]:
    """The tasks whose ``"split"`` field is ``split``; all of them when ``split`` is None or when no task
    has a ``"split"`` field (such a file is one set of tasks, whatever split a trainer or the command
    line asks for: ``agent-gym eval`` passes ``--split test`` by default).

    Raises:
        ValueError: the tasks have ``"split"`` fields but none is ``split`` (the message names them).
    """
    found = sorted({str(t["split"]) for t in tasks if "split" in t})
    if split is None or not found:
        return list(tasks)
    chosen = [t for t in tasks if t.get("split") == split]
    if not chosen:
        raise ValueError(f"{where} has no task with \"split\": {split!r} (its splits: {', '.join(found)})")
    return chosen


def final_answer(response: str) -> str:
    """The text after the last ``####`` (the whole response without one), stripped."""
    after = after_marker(response, first_line=False)
    return response.strip() if after is None else after


def exact_match(response: str, task: Mapping[str, Any]) -> Grade:
    """1.0 when :func:`final_answer` equals the task's ``answer`` as text (both stripped)."""
    predicted, expected = final_answer(response), text_of(task.get("answer")).strip()
    correct = predicted == expected
    return Grade.from_check(correct, "correct" if correct else "wrong_answer", predicted=predicted, expected=expected)


def resolve_grader(grader: str | Grader | None) -> Grader:
    """``None``: :func:`exact_match`; a callable as it is; ``"package.module:function"`` (or
    ``"package.module.function"``) imported. A grader is called as ``grader(response, task)``.

    Raises:
        ValueError: a dotted path that does not name a callable.
    """
    if grader is None:
        return exact_match
    if callable(grader):
        return grader
    module_name, _, attr = grader.partition(":") if ":" in grader else grader.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"grader {grader!r}: cannot import it ({exc}); give 'package.module:function'") from None
    if not callable(found):
        raise ValueError(f"grader {grader!r} is not callable")
    return found


class MCPTaskStepInfo(StepInfo, total=False):
    """The ``info`` of an MCPTask step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, what the
    default grader (:func:`exact_match`) reports. A ``grader=`` of your own that adds keys of its own
    declares them in an extension of this type, named by a subclass of :class:`MCPTaskEnv`."""

    predicted: str
    """The text after the last ``####``."""
    expected: str
    """The task's answer."""


class MCPTaskEnv(AgentEnv[dict[str, Any], ResetInfo, MCPTaskStepInfo]):
    """Tasks from a file, tools from MCP servers, graded by exact match or a function you name.

    Each assistant turn either calls tools (results come back as ``tool`` messages; failures count in
    ``info["tool_error_kinds"]``) or answers, which ends the episode and is graded.

    With no ``tasks`` and no ``mcp_servers`` it plays the packaged demo: warehouse questions
    (:data:`DEMO_TASKS`; ``split="train"`` or ``"test"``, on disjoint items) with the ``stock`` and
    ``price`` tools of :mod:`agent_gym_mcp.demo_server` (:func:`demo_servers`).

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        tasks: a JSONL file of ``{"id", "prompt", "answer"}`` (other keys are kept for the grader), or
            a list of such mappings. ``None``: the demo tasks.
        mcp_servers: the MCP servers (see docs/mcp.md): ``[{"command": [...]}, {"url": ...}]``.
            ``None``: the demo server, which only the demo tasks may leave out (a task file of yours
            names its servers; ``mcp_servers=agent_gym_mcp.demo_servers()`` gives it the demo's).
        split: the tasks whose ``"split"`` field is this (tasks without such fields are all used,
            whatever the split); ``None``: every task of ``tasks``, or the demo's ``"train"`` split.
        grader: ``None`` (exact match of the text after the last ``####`` with ``answer``), a
            callable ``(response, task) -> float | bool | Grade``, or its dotted path.
        instructions: the first paragraph of the system prompt (default: a generic one, or the demo's
            :data:`DEMO_INSTRUCTIONS`); a task's own ``"system"`` key replaces it for that task.
        prompt_dir: a folder with a ``mcp_system.j2`` that replaces the packaged one.
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` default 5, ``tool_format``, ...).

    An env dropped without :meth:`close` releases its MCP sessions when it is garbage-collected
    (and every session still open is closed at interpreter exit); ``close()`` is the way that waits
    until the server processes are gone.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
        mcp_servers: Sequence[Mapping[str, Any]] | None = None,
        split: str | None = None,
        grader: str | Grader | None = None,
        instructions: str | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        demo = tasks is None
        if tasks is None:
            split = "train" if split is None else split
            if split not in DEMO_SPLITS:
                raise ValueError(f"unknown split {split!r} for the MCPTask-v0 demo; known: {', '.join(DEMO_SPLITS)}")
            tasks = DEMO_TASKS
            where = f"MCPTask-v0 demo {split} split"
        else:
            where = f"task file {tasks}" if isinstance(tasks, (str, os.PathLike)) else "task list"
            if mcp_servers is None:
                raise ValueError(
                    'MCPTask-v0 with your own tasks needs their servers: mcp_servers=[{"command": [...]} or {"url": ...}] '
                    "(agent_gym_mcp.demo_servers() is the demo's warehouse server)"
                )
        if mcp_servers is None:
            mcp_servers = demo_servers()
        if not mcp_servers:
            raise ValueError('MCPTask-v0 needs mcp_servers=[{"command": [...]} or {"url": ...}]')
        self.split = split
        self.tasks = TaskList(select_split(load_tasks(tasks), split, where), name=where)
        self.grader = resolve_grader(grader)
        self.instructions = instructions if instructions is not None else DEMO_INSTRUCTIONS if demo else DEFAULT_INSTRUCTIONS
        self.prompts = PromptTemplates("agent_gym_mcp", prompt_dir)
        kwargs.setdefault("max_turns", 5)
        super().__init__(tokenizer, mcp_servers=mcp_servers, **kwargs)
        if not self.tools:
            self.close()
            raise ValueError("the MCP servers offer no tools (check each server's \"tools\" list)")
        # Not closed by its user (a test, a notebook): the sessions go with the env, not at exit.
        self._release = weakref.finalize(self, _release_sessions, list(self.tool_sources))

    def close(self) -> None:
        """Close the MCP sessions; their server processes are gone when this returns."""
        release = getattr(self, "_release", None)
        if release is not None:
            release.detach()
        super().close()

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return self.tasks.sample(rng)

    def get_task(self, task_id: str) -> dict[str, Any]:
        return self.tasks.get(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return load_tasks([task])[0]

    def initial_messages(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        first = self.tools[0].schema()["function"]
        example = {"name": first["name"], "arguments": {p: "..." for p in first["parameters"].get("required", [])}}
        system = self.prompts.render(
            "mcp_system.j2", instructions=task.get("system", self.instructions), **self.tool_prompt_variables(example)
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": task["prompt"]}]

    def grade(self, task: dict[str, Any], turn: Turn) -> Grade:
        result = self.grader(turn.parsed.content, task)
        if isinstance(result, Grade):
            return result
        if isinstance(result, bool):
            return Grade.from_check(result)
        return Grade(reward=float(result), components={"outcome": float(result)})


def _release_sessions(sources: list[Any]) -> None:
    """Close the tool sources (the MCP sessions) of a garbage-collected env, in a thread of its own: a
    collection can run on any thread at any allocation, the MCP event-loop thread included or one holding
    the MCP module's locks, where waiting for the servers to exit here would deadlock."""

    def close_all() -> None:
        for source in sources:
            source.close()

    if sources:
        threading.Thread(target=close_all, name="agent-gym-mcp-release", daemon=True).start()
