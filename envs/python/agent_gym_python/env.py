"""``AgentR1/GSM8KPython-v0``: GSM8K where the tool is a sandboxed Python interpreter."""

from __future__ import annotations

import functools
import os
from typing import Any, Mapping, Protocol

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import TaskList, TaskSource, make_task_source
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.sandbox import Sandbox, SandboxConfig
from agent_gym.sandbox.tool import PythonTool, SandboxToolExecutor

__all__ = ["GSM8KPythonEnv"]


class GSM8KPythonStepInfo(StepInfo, total=False):
    """The ``info`` of a GSM8KPython step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the answer check."""

    predicted: str | None
    """The number read from the response (after ``####``), normalised; ``None``: none found."""
    expected: str
    """The reference answer, normalised."""
    format_ok: bool
    """The response ends with a ``#### <number>`` line."""


class MathTask(Protocol):
    """What this env reads of a task of the ``"gsm8k"`` source (``agent_gym_gsm8k``'s ``GSM8KTask``)."""

    @property
    def id(self) -> str: ...

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...


class GSM8KPythonEnv(AgentEnv[MathTask, ResetInfo, GSM8KPythonStepInfo]):
    """GSM8K with a ``python(code)`` tool running in :mod:`agent_gym.sandbox` (tool-integrated reasoning).

    Each assistant turn either calls ``python`` (in the ``tool_format``, hermes ``<tool_call>`` JSON by
    default; the output, a traceback or the limit that was hit comes back as a ``tool`` message) or answers without a tool call, which ends
    the episode. A tool call on the last turn truncates it. Reward: the outcome only, 1.0 when the
    number after the last ``####`` equals the reference (GSM8K's normalisation:
    :func:`agent_gym_gsm8k.reward.score_answer`); ``info["answer_check"]`` says why. The tasks and their
    grading are the task source ``"gsm8k"`` (:func:`agent_gym.core.tasks.make_task_source`), which
    agent-r1-gym-gsm8k registers: this package declares that dependency and imports none of its code.

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        split: ``"train"`` or ``"test"``.
        data_dir: folder with GSM8K's ``train.jsonl``/``test.jsonl``, or ``"hf://openai/gsm8k"`` for the
            Hugging Face hub (default ``$AGENT_GYM_GSM8K_DIR``, else the copy packaged with
            agent-r1-gym-gsm8k; :mod:`agent_gym_gsm8k.data`).
        stateful: keep Python variables across the calls of an episode (one sandbox worker per
            episode) rather than a fresh process per call.
        sandbox: a :class:`~agent_gym.sandbox.Sandbox` to use, or a :class:`SandboxConfig` / dict of
            its fields (envs with equal configs share one warm server), or ``None`` (defaults).
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` default 5, ...).
    """

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        stateful: bool = True,
        sandbox: Sandbox | SandboxConfig | Mapping[str, Any] | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        if "tools" in kwargs:
            raise TypeError("GSM8KPythonEnv offers exactly one tool (python); do not pass tools=")
        kwargs.setdefault("max_turns", 5)
        self.split = split
        self.source: TaskSource[MathTask] = make_task_source("gsm8k", needs="agent-r1-gym-gsm8k", split=split, data_dir=data_dir)
        self.tasks: TaskList[Any] = self.source.tasks
        self.python = PythonTool(sandbox, stateful=stateful)
        super().__init__(tokenizer, tools=[self.python], **kwargs)
        self.executor = SandboxToolExecutor(self.tools, max_output_chars=self.python.sandbox.config.output_bytes + 4000)
        self.stateful = bool(stateful)
        self.prompts = _prompts(None if prompt_dir is None else os.fspath(prompt_dir))

    @property
    def sandbox(self) -> Sandbox:
        return self.python.sandbox

    def sample_task(self, rng: np.random.Generator) -> MathTask:
        return self.source.sample_task(rng)

    def get_task(self, task_id: str) -> MathTask:
        return self.source.get_task(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> MathTask:
        return self.source.task_from_dict(task)

    def grade(self, task: MathTask, turn: Turn) -> Grade:
        return self.source.grade(task, turn)

    def initial_messages(self, task: MathTask) -> list[dict[str, Any]]:
        example = {"name": "python", "arguments": {"code": "eggs = 16 - 3 - 4\nprint(eggs * 2)"}}  # shown in the prompt
        system = self.prompts.render(
            "gsm8k_python_system.j2", **self.tool_prompt_variables(example), stateful=self.python.stateful, timeout_s=f"{self.sandbox.config.timeout_s:g}"
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": self.prompts.render("gsm8k_python_user.j2", question=task.question)},
        ]

    def on_reset(self, task: MathTask) -> dict[str, Any]:
        self.python.new_episode()  # the previous episode's Python session (if any) is closed
        return {}

    def close(self) -> None:
        self.python.close()
        super().close()


@functools.lru_cache(maxsize=16)
def _prompts(prompt_dir: str | None) -> PromptTemplates:
    """One template loader per prompt folder, shared by every env instance (templates compile once)."""
    return PromptTemplates("agent_gym_python", prompt_dir)
