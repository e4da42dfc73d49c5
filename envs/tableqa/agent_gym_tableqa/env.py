"""``AgentR1/TableQA-v0``: questions over generated tables, answered with pandas in a sandbox."""

from __future__ import annotations

import functools
import os
from typing import Any, Mapping, Sequence

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.types import ResetInfo, StepInfo
from agent_gym.sandbox import Sandbox, SandboxConfig
from agent_gym.sandbox.tool import PythonTool, SandboxToolExecutor
from agent_gym_tableqa.check import check_answer
from agent_gym_tableqa.generate import DIFFICULTIES, SPLITS, TableTask, generate_task, parse_task_id

__all__ = ["PRELUDE", "TableQAEnv"]

#: Run silently before the policy's first call (every call when stateless): the tables as DataFrames.
PRELUDE = """\
import pandas as pd
pd.set_option("display.width", 120)
pd.set_option("display.max_rows", 30)
orders = pd.read_csv("orders.csv", parse_dates=["date"])
products = pd.read_csv("products.csv")
"""

#: Index range of sampled tasks (per split and difficulty).
NUM_TASKS = 1_000_000


class TableQAResetInfo(ResetInfo):
    """The ``info`` of a TableQA reset: :class:`~agent_gym.core.types.ResetInfo` and the question's difficulty."""

    difficulty: str


class TableQAStepInfo(StepInfo, total=False):
    """The ``info`` of a TableQA step: :class:`~agent_gym.core.types.StepInfo` and, on the final step, the answer check."""

    predicted: str | None
    """The answer read after ``####``, normalised; ``None``: none found."""
    expected: str
    answer_type: str
    """How the answer is compared (``integer``, ``decimal``, ``text``, ...)."""
    difficulty: str
    template: str
    """The question's template (its kind)."""


class TableQAEnv(AgentEnv[TableTask, TableQAResetInfo, TableQAStepInfo]):
    """Question answering over two generated tables with a ``python`` tool (pandas) in a sandbox.

    Reward: the outcome only: 1.0 when the answer after the last ``####`` matches the reference
    (:func:`agent_gym_tableqa.check.check_answer`); ``info["answer_check"]`` says why, and
    ``info["difficulty"]`` / ``info["template"]`` say what kind of question it was.

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        split: ``"train"`` or ``"test"`` (disjoint generator seeds).
        difficulty: ``"easy"``, ``"medium"``, ``"hard"``, ``"mixed"`` (uniform over the three) or a
            list of levels to sample from.
        stateful: keep Python variables across the calls of an episode.
        sandbox: a :class:`~agent_gym.sandbox.Sandbox`, a :class:`SandboxConfig`, a dict of its fields
            (``preload=["pandas"]`` is added), or ``None`` (defaults with pandas preloaded).
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` default 6,
            ``max_context_tokens`` default 8192, ...).
    """

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        split: str = "train",
        difficulty: str | Sequence[str] = "mixed",
        stateful: bool = True,
        sandbox: Sandbox | SandboxConfig | Mapping[str, Any] | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        if "tools" in kwargs:
            raise TypeError("TableQAEnv offers exactly one tool (python); do not pass tools=")
        if split not in SPLITS:
            raise ValueError(f"unknown TableQA split {split!r}; valid: {SPLITS}")
        levels = list(DIFFICULTIES) if difficulty == "mixed" else [difficulty] if isinstance(difficulty, str) else list(difficulty)
        bad = [d for d in levels if d not in DIFFICULTIES]
        if bad or not levels:
            raise ValueError(f"unknown TableQA difficulty {bad or difficulty!r}; valid: {DIFFICULTIES} or 'mixed'")
        kwargs.setdefault("max_turns", 6)
        kwargs.setdefault("max_context_tokens", 8192)
        self.split = split
        self.difficulties = tuple(levels)
        self.python = PythonTool(_with_pandas(sandbox), stateful=stateful, prelude=PRELUDE)
        super().__init__(tokenizer, tools=[self.python], **kwargs)
        self.executor = SandboxToolExecutor(self.tools, max_output_chars=self.python.sandbox.config.output_bytes + 4000)
        self.prompts = _prompts(None if prompt_dir is None else os.fspath(prompt_dir))

    @property
    def sandbox(self) -> Sandbox:
        return self.python.sandbox

    def sample_task(self, rng: np.random.Generator) -> TableTask:
        level = self.difficulties[int(rng.integers(0, len(self.difficulties)))]
        return generate_task(self.split, level, int(rng.integers(0, NUM_TASKS)))

    def get_task(self, task_id: str) -> TableTask:
        return generate_task(*parse_task_id(task_id))

    def task_from_dict(self, task: Mapping[str, Any]) -> TableTask:
        if "id" in task:
            return self.get_task(str(task["id"]))
        missing = {"difficulty", "index"} - set(task)
        if missing:
            raise ValueError(f"a TableQA task is {{'id': ...}} or {{'difficulty', 'index'[, 'split']}}; missing {sorted(missing)}")
        return generate_task(str(task.get("split", self.split)), str(task["difficulty"]), int(task["index"]))

    def initial_messages(self, task: TableTask) -> list[dict[str, Any]]:
        tables = [
            {"name": t.name, "filename": t.filename, "rows": len(t.rows), "columns": [list(c) for c in t.columns], "head": t.head(3)}
            for t in task.tables
        ]
        example = {"name": "python", "arguments": {"code": "print(orders.groupby('region')['quantity'].sum())"}}
        system = self.prompts.render(
            "tableqa_system.j2", tables=tables, **self.tool_prompt_variables(example), stateful=self.python.stateful,
            timeout_s=f"{self.sandbox.config.timeout_s:g}",
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": self.prompts.render("tableqa_user.j2", question=task.question)},
        ]

    def grade(self, task: TableTask, turn: Turn) -> Grade:
        check = check_answer(turn.parsed.content, task.answer_type, task.exact)
        return Grade.from_check(
            check.correct,
            check.reason,
            predicted=check.predicted,
            expected=task.answer,
            answer_type=task.answer_type,
            difficulty=task.difficulty,
            template=task.template,
        )

    def on_reset(self, task: TableTask) -> dict[str, Any]:
        self.python.new_episode(files=task.files())  # the tables, in the sandbox's working directory
        return {"difficulty": task.difficulty}

    def close(self) -> None:
        self.python.close()
        super().close()


def _with_pandas(sandbox: Sandbox | SandboxConfig | Mapping[str, Any] | None) -> Sandbox | SandboxConfig | dict[str, Any]:
    """Default sandbox options for TableQA: pandas preloaded by the warm server."""
    if sandbox is None:
        return SandboxConfig(preload=("pandas",))
    if isinstance(sandbox, Mapping):
        options = dict(sandbox)
        options["preload"] = tuple(dict.fromkeys([*options.get("preload", ()), "pandas"]))
        return options
    return sandbox


@functools.lru_cache(maxsize=16)
def _prompts(prompt_dir: str | None) -> PromptTemplates:
    """One template loader per prompt folder, shared by every env instance (templates compile once)."""
    return PromptTemplates("agent_gym_tableqa", prompt_dir)
