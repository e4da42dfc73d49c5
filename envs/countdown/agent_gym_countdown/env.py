"""The Countdown envs: answer in one step, or with a calculator tool over several turns."""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.tools import calculator

from agent_gym_countdown.check import check_answer
from agent_gym_countdown.generate import (
    LEVELS,
    SPLITS,
    CountdownTask,
    sample_task,
    task_from_id,
    task_from_mapping,
)

__all__ = ["DEMONSTRATIONS", "CountdownEnv", "CountdownToolEnv"]

#: Worked examples shown before the task when ``few_shot`` is on: (numbers, target, expression).
DEMONSTRATIONS: tuple[tuple[tuple[int, ...], int, str], ...] = (((3, 9), 12, "3 + 9"), ((4, 7, 2), 28, "4 * 7"))


class CountdownStepInfo(StepInfo, total=False):
    """The ``info`` of a Countdown step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the answer check."""

    answer_detail: str
    """``answer_check`` in words (which number was not given, the value reached, ...)."""
    expression: str | None
    """The expression checked (normalised); ``None``: no answer found."""
    value: str | None
    """Its exact value (a fraction as text), when it could be computed."""
    numbers_used: list[int]
    """The expression's numbers, in reading order."""
    numbers: list[int]
    """The numbers given."""
    target: int
    """The number to reach."""
    difficulty: str
    reference_solution: str
    """An expression that reaches the target (the generator's)."""


class CountdownEnv(AgentEnv[CountdownTask, ResetInfo, CountdownStepInfo]):
    """Countdown, one step: reach the target with some of the given numbers and ``+ - * /``.

    The policy answers with an expression in ``<answer>...</answer>`` (or after ``####``); see
    :mod:`agent_gym_countdown.check` for the exact rules.

    Reward: 1.0 when the expression uses only given numbers, each at most once, and its exact
    (rational) value equals the target; else 0.0. ``info["answer_check"]`` says why (``correct``,
    ``no_answer``, ``unparsable``, ``operator_not_allowed``, ``number_not_given``, ``number_reused``,
    ``division_by_zero``, ``wrong_value``) and ``info["answer_detail"]`` explains it in words.

    Tasks are generated from the reset seed (see :mod:`agent_gym_countdown.generate`); every
    generated task is solvable. ``reset(options={"task_id": "train-easy-7"})`` pins a generated task,
    ``reset(options={"task": {"numbers": [3, 7, 25], "target": 46}})`` supplies one.

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        difficulty: ``"easy"`` (2-3 numbers in 1..10, target one or two operations away),
            ``"medium"`` (4 numbers in 1..25) or ``"hard"`` (6 numbers, TV-show style).
        split: ``"train"`` or ``"test"``: disjoint task sets (by a hash of the task's content).
        few_shot: open the chat with two worked examples (:data:`DEMONSTRATIONS`, as user/assistant
            turns) before the task. ``None`` (default): on for ``difficulty="easy"``, where they make
            the answer format reachable for tiny models (SmolLM2-135M-Instruct almost never writes
            ``<answer>`` tags without them), off otherwise.
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_action_tokens``, ``chat_template``, ...).
    """

    _system_template = "countdown_system.j2"

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        difficulty: str = "medium",
        split: str = "train",
        few_shot: bool | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=LEVELS, env="Countdown")
        kwargs.setdefault("max_turns", 1)
        super().__init__(tokenizer, **kwargs)
        self.difficulty = difficulty
        self.split = split
        self.few_shot = difficulty == "easy" if few_shot is None else bool(few_shot)
        self.prompts = PromptTemplates("agent_gym_countdown", prompt_dir)

    def sample_task(self, rng: np.random.Generator) -> CountdownTask:
        return sample_task(rng, self.difficulty, self.split)

    def get_task(self, task_id: str) -> CountdownTask:
        return task_from_id(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> CountdownTask:
        return task_from_mapping(task)

    def initial_messages(self, task: CountdownTask) -> list[dict[str, Any]]:
        example = {"name": "calculate", "arguments": {"expression": "(6 + 4) * 3"}}  # the call the prompt shows
        variables = self.tool_prompt_variables(example) if self.tools else {"tools": []}
        messages = [{"role": "system", "content": self.prompts.render(self._system_template, **variables)}]
        if self.few_shot:
            for numbers, target, expression in DEMONSTRATIONS:
                messages.append({"role": "user", "content": self._question(numbers, target)})
                messages.append({
                    "role": "assistant",
                    "content": self.prompts.render("countdown_demo_answer.j2", expression=expression, target=target),
                })
        messages.append({"role": "user", "content": self._question(task.numbers, task.target)})
        return messages

    def _question(self, numbers: tuple[int, ...], target: int) -> str:
        return self.prompts.render("countdown_user.j2", numbers=list(numbers), target=target)

    def grade(self, task: CountdownTask, turn: Turn) -> Grade:
        check = check_answer(turn.parsed.content, task.numbers, task.target)
        return Grade.from_check(
            check.correct,
            check.reason,
            answer_detail=check.detail,
            expression=check.normalized,
            value=None if check.value is None else str(check.value),
            numbers=list(task.numbers),
            target=task.target,
            numbers_used=list(check.extra.get("numbers_used", ())),
            difficulty=task.difficulty,
            reference_solution=task.solution,
        )


class CountdownToolEnv(CountdownEnv):
    """Countdown with a ``calculate`` tool, up to ``max_turns`` assistant turns (default 6).

    Each turn either calls the tool (in the ``tool_format``, hermes ``<tool_call>`` JSON by default;
    the result comes back as a ``tool`` message) or answers without a tool call, which ends the episode and is graded as
    :class:`CountdownEnv`. A tool call on the last turn truncates the episode (reward 0). The
    calculator only does arithmetic (floating point, like any calculator); it never tells whether
    an expression is a valid answer. ``few_shot`` is off by default here (the worked examples
    answer directly, without the tool).
    """

    _system_template = "countdown_tool_system.j2"

    def __init__(self, tokenizer: Any = None, **kwargs: Any):
        kwargs.setdefault("max_turns", 6)
        kwargs.setdefault("tools", [calculator])
        kwargs.setdefault("few_shot", False)
        super().__init__(tokenizer, **kwargs)
