"""The GSM8K envs: single-step answering, and multi-step answering with a calculator tool."""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import TaskList
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.tools import calculator

from agent_gym_gsm8k.data import GSM8KTask, load_gsm8k
from agent_gym_gsm8k.reward import score_answer

__all__ = ["GSM8KTaskSource", "GSM8KTasks", "GSM8KEnv", "GSM8KToolEnv", "TOOL_DEMONSTRATION"]


#: The worked example of ``few_shot`` (question, calls per assistant turn, final answer): an original
#: problem, so no GSM8K task leaks into the prompt.
TOOL_DEMONSTRATION: tuple[str, tuple[tuple[dict[str, Any], ...], ...], str] = (
    "A baker makes 24 muffins in each batch and bakes 7 batches. She sells 150 muffins. "
    "How many muffins does she have left?",
    (
        ({"name": "calculate", "arguments": {"expression": "24 * 7"}},),
        ({"name": "calculate", "arguments": {"expression": "168 - 150"}},),
    ),
    "She baked 24 * 7 = 168 muffins and sold 150, so 168 - 150 = 18 are left.\n#### 18",
)


#: The call the tool prompt shows, written in the env's tool-call format.
EXAMPLE_CALL: dict[str, Any] = {"name": "calculate", "arguments": {"expression": "2 + 3 * 4"}}


class GSM8KTaskSource:
    """The task and grading hooks of every GSM8K-based env: seeded draws from ``self.tasks`` (a
    ``TaskList`` of :class:`GSM8KTask`), lookup by id, custom tasks from ``{"question", "answer"}``,
    and the outcome reward of the number after the last ``####``."""

    tasks: TaskList[GSM8KTask]

    def sample_task(self, rng: np.random.Generator) -> GSM8KTask:
        return self.tasks.sample(rng)

    def get_task(self, task_id: str) -> GSM8KTask:
        return self.tasks.get(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> GSM8KTask:
        missing = {"question", "answer"} - set(task)
        if missing:
            raise ValueError(f"a GSM8K task needs the keys question and answer; missing {sorted(missing)}")
        return GSM8KTask(
            id=str(task.get("id", "custom")),
            question=str(task["question"]),
            answer=str(task["answer"]),
            solution=str(task.get("solution", "")),
        )


    def grade(self, task: GSM8KTask, turn: Turn) -> Grade:
        check = score_answer(turn.parsed.content, task.answer)
        return Grade.from_check(
            check.correct,
            check.reason,
            format_ok=check.reason in ("correct", "wrong_answer"),
            predicted=check.normalized,
            expected=task.answer,
        )


class GSM8KTasks(GSM8KTaskSource):
    """GSM8K's tasks and grading as an object: the task source ``"gsm8k"`` other env packages make with
    :func:`agent_gym.core.tasks.make_task_source` (``split``, ``data_dir``: as :class:`GSM8KEnv`'s)."""

    def __init__(self, split: str = "train", data_dir: str | os.PathLike[str] | None = None):
        self.split = split
        self.tasks = TaskList(load_gsm8k(split, data_dir), name=f"GSM8K {split} split")


class GSM8KStepInfo(StepInfo, total=False):
    """The ``info`` of a GSM8K step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the answer check."""

    predicted: str | None
    """The number read from the response (after ``####``), normalised; ``None``: none found."""
    expected: str
    """The reference answer, normalised."""
    format_ok: bool
    """The response ends with a ``#### <number>`` line."""


class GSM8KEnv(GSM8KTaskSource, AgentEnv[GSM8KTask, ResetInfo, GSM8KStepInfo]):
    """GSM8K, one step: the policy reasons and ends with ``#### <number>``.

    Reward: 1.0 when the number after the last ``####`` equals the reference answer after
    normalising commas, ``$`` and trailing ``.0``; else 0.0. ``info["answer_check"]`` says why
    (``correct``, ``no_final_answer``, ``unparsable_answer``, ``wrong_answer``).

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        split: ``"train"`` or ``"test"``.
        data_dir: folder with the original ``train.jsonl``/``test.jsonl``, or ``"hf://openai/gsm8k"``
            to load the split from the Hugging Face hub (needs ``agent-r1-gym-gsm8k[hub]``). Default:
            ``$AGENT_GYM_GSM8K_DIR`` (either form), else the copy packaged with this package (offline,
            nothing to set up). See :mod:`agent_gym_gsm8k.data`.
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_action_tokens``, ``chat_template``, ...).
    """

    _system_template = "gsm8k_system.j2"

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        split: str = "train",
        data_dir: str | os.PathLike[str] | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("max_turns", 1)
        super().__init__(tokenizer, **kwargs)
        self.split = split
        self.tasks = TaskList(load_gsm8k(split, data_dir), name=f"GSM8K {split} split")
        self.prompts = PromptTemplates("agent_gym_gsm8k", prompt_dir)

    def initial_messages(self, task: GSM8KTask) -> list[dict[str, Any]]:
        variables = self.tool_prompt_variables(EXAMPLE_CALL) if self.tools else {"tools": []}
        return [
            {"role": "system", "content": self.prompts.render(self._system_template, **variables)},
            {"role": "user", "content": self.prompts.render("gsm8k_user.j2", question=task.question)},
        ]


class GSM8KToolEnv(GSM8KEnv):
    """GSM8K with a calculator tool, multi-step (up to ``max_turns`` assistant turns, default 5).

    Each assistant turn either calls ``calculate`` (in the ``tool_format``, hermes ``<tool_call>`` JSON
    by default; results come back as ``tool`` messages) or answers without a tool call, which ends the episode. A tool call on the last
    turn truncates the episode. Reward: the outcome only (as :class:`GSM8KEnv`); wrap with
    :class:`agent_gym.wrappers.RewardShaping` for opt-in format / tool-use bonuses.
    """

    _system_template = "gsm8k_tool_system.j2"

    def __init__(self, tokenizer: Any = None, *, few_shot: bool = False, **kwargs: Any):
        """``few_shot``: open the chat with one worked example (:data:`TOOL_DEMONSTRATION`, not a
        GSM8K problem) that calls the calculator twice, for small models that do not call tools from
        the instructions alone (SmolLM2-135M-Instruct makes no call even with it; a tool-use warm start,
        ``examples/sft_warmstart.py``, does). Other arguments: :class:`GSM8KEnv`."""
        kwargs.setdefault("max_turns", 5)
        kwargs.setdefault("tools", [calculator])
        super().__init__(tokenizer, **kwargs)
        self.few_shot = bool(few_shot)

    def initial_messages(self, task: GSM8KTask) -> list[dict[str, Any]]:
        messages = super().initial_messages(task)
        if not self.few_shot:
            return messages
        question, turns, answer = TOOL_DEMONSTRATION
        return self.prepend_demonstration(messages, self.prompts.render("gsm8k_user.j2", question=question), turns, answer)
