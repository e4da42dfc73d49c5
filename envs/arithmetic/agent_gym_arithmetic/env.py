"""The arithmetic envs: one step, or up to three turns with the calculator tool."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.tools import calculator
from agent_gym.tools.calculator import evaluate_arithmetic, format_number

from agent_gym_arithmetic.problems import LEVELS, SPLITS, ArithmeticTask, check_answer, generate_task

__all__ = ["ArithmeticEnv", "ArithmeticToolEnv", "TOOL_DEMONSTRATION"]

# Tasks per split and level that seeds draw from (ids beyond it are valid too: generation is by id).
_POOL = 100_000


class ArithmeticStepInfo(StepInfo, total=False):
    """The ``info`` of an Arithmetic step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the answer check."""

    expected: str
    """The exact value of the expression."""
    format_ok: bool
    """The number was given after ``####``."""


class ArithmeticEnv(AgentEnv[ArithmeticTask, ResetInfo, ArithmeticStepInfo]):
    """``What is 37 + 58?``, generated from a seed at difficulty ``level`` (see :data:`LEVELS`).

    Reward: 1.0 when the response's final number (after the last ``####``, else the last number in
    the response) equals the exact value, else 0.0; ``info["answer_check"]`` is ``correct``,
    ``no_number`` or ``wrong_answer``, ``info["format_ok"]`` says whether ``####`` was used.

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        level: difficulty 1-4 (default 2).
        split: ``"train"`` or ``"test"``: disjoint generation streams.
        prompt_dir: a folder of jinja2 templates overriding the packaged ones.
    """

    def __init__(self, tokenizer: Any = None, *, level: int = 2, split: str = "train", prompt_dir: Any = None, **kwargs: Any):
        kwargs.setdefault("max_turns", 1)
        kwargs.setdefault("max_action_tokens", 512)
        super().__init__(tokenizer, **kwargs)
        generate_task(0, level, split)  # validates level and split up front
        self.level, self.split = int(level), split
        self.prompts = PromptTemplates("agent_gym_arithmetic", prompt_dir)

    def sample_task(self, rng: np.random.Generator) -> ArithmeticTask:
        return generate_task(int(rng.integers(0, _POOL)), self.level, self.split)

    def get_task(self, task_id: str) -> ArithmeticTask:
        split, level, n = GeneratedTaskId.parse(
            task_id, splits=SPLITS, variants=(f"L{k}" for k in LEVELS), name="arithmetic task", variant_name="level"
        )
        return generate_task(n, int(level.removeprefix("L")), split)

    def task_from_dict(self, task: Mapping[str, Any]) -> ArithmeticTask:
        expression = str(task["expression"])
        answer = format_number(evaluate_arithmetic(expression))  # a bad expression raises CalculatorError
        return ArithmeticTask(str(task.get("id", "custom")), int(task.get("level", 0)), expression, answer)

    def initial_messages(self, task: ArithmeticTask) -> list[dict[str, Any]]:
        example = {"name": "calculate", "arguments": {"expression": "12 * 7"}}  # the call the prompt shows
        variables = self.tool_prompt_variables(example) if self.tools else {"tools": []}
        return [
            {"role": "system", "content": self.prompts.render("system.j2", **variables)},
            {"role": "user", "content": self.prompts.render("user.j2", expression=task.expression)},
        ]

    def grade(self, task: ArithmeticTask, turn: Turn) -> Grade:
        check = check_answer(turn.parsed.content, task.answer)
        return Grade.from_check(check.correct, check.reason, format_ok="####" in turn.parsed.content, expected=task.answer)


#: The worked example of ``few_shot``: (expression, final answer text).
TOOL_DEMONSTRATION: tuple[str, str] = ("47 * 36", "47 * 36 = 1692\n#### 1692")


class ArithmeticToolEnv(ArithmeticEnv):
    """:class:`ArithmeticEnv` with the calculator tool, up to 3 turns (a tool call on the last truncates).

    ``few_shot=True`` opens the chat with one worked example (:data:`TOOL_DEMONSTRATION`): a
    calculator call, its result, the answer (SmolLM2-135M-Instruct answers directly, with or without
    it, at level 1).
    """

    def __init__(self, tokenizer: Any = None, *, few_shot: bool = False, **kwargs: Any):
        kwargs.setdefault("max_turns", 3)
        kwargs.setdefault("tools", [calculator])
        super().__init__(tokenizer, **kwargs)
        self.few_shot = bool(few_shot)

    def initial_messages(self, task: ArithmeticTask) -> list[dict[str, Any]]:
        messages = super().initial_messages(task)
        if not self.few_shot:
            return messages
        expression, answer = TOOL_DEMONSTRATION
        call = {"name": "calculate", "arguments": {"expression": expression}}
        return self.prepend_demonstration(messages, self.prompts.render("user.j2", expression=expression), [[call]], answer)
