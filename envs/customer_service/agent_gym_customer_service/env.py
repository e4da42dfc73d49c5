"""``AgentR1/CustomerService-v0``: a tau-bench style retail support conversation with tools and a simulated user."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, EnvReply, Grade, Turn
from agent_gym.core.prompts import PromptTemplates
from agent_gym.core.tasks import GeneratedTaskId
from agent_gym.core.types import ResetInfo, StepInfo

from agent_gym_customer_service.domain import RETURN_WINDOW_DAYS, Store
from agent_gym_customer_service.generate import (
    DIFFICULTIES,
    SPLITS,
    CustomerServiceTask,
    sample_task,
    task_from_id,
    task_from_mapping,
)
from agent_gym_customer_service.grading import db_diff, missing_info
from agent_gym_customer_service.tools import EXAMPLE_CALL, RetailTools
from agent_gym_customer_service.user import STOP, ScriptedUser, User, UserBackend, make_user

__all__ = ["CustomerServiceEnv"]


class CustomerServiceResetInfo(ResetInfo):
    """The ``info`` of a CustomerService reset: :class:`~agent_gym.core.types.ResetInfo` and the goal's size."""

    difficulty: str
    requests: int
    """How many requests the customer brings."""


class CustomerServiceStepInfo(StepInfo, total=False):
    """The ``info`` of a CustomerService step: :class:`~agent_gym.core.types.StepInfo`, the progress, and on the
    final step the grade (see :class:`CustomerServiceEnv`)."""

    verified: bool
    """The agent has verified the customer's identity."""
    policy_violations: int
    """Changes the policy forbids that the agent tried so far."""
    user_turns: int
    """The customer's messages so far."""
    user_error: str
    """What the simulated customer's backend raised (the episode ends)."""
    user_stopped: bool
    """The customer ended the conversation (``###STOP###``)."""
    db_match: bool
    """The database equals the goal's end state."""
    db_diff: list[str]
    """How it differs, in words."""
    info_given: bool
    """Every fact the customer asked for was told."""
    info_missing: list[str]
    violations: list[str]
    """The forbidden changes tried, in words."""
    difficulty: str


class CustomerServiceEnv(AgentEnv[CustomerServiceTask, CustomerServiceResetInfo, CustomerServiceStepInfo]):
    """A support agent with eight tools over a per-episode SQLite shop, and a customer with a goal.

    Each assistant turn either calls tools (hermes ``<tool_call>`` JSON by default, ``tool_format`` picks
    another; results come back as ``tool`` messages) or, without a tool call, is a message to the
    customer, whose reply is appended as a ``user`` message (env tokens). The episode ends when the
    customer writes ``###STOP###`` (terminated), or at ``max_turns`` (truncated; a tool call on the last
    turn too). The policy the agent must follow is in the system prompt
    (``templates/customer_service_system.j2``) and is enforced by the tools.

    Reward, at the end only: 1.0 iff the database equals the goal's expected end state
    (``info["db_match"]``, with ``info["db_diff"]`` in words), every piece of information the customer
    asked for appears in the agent's messages to it (``info["info_given"]``, ``info["info_missing"]``),
    and no change the policy forbids was tried (``info["policy_violations"]``: cancelling a delivered
    order, returning outside the window, changing anything of an unverified customer; the tool refuses
    it, the episode fails). Refused calls are tool errors with their own kinds in
    ``info["tool_error_kinds"]`` (``no_match``, ``unknown_id``, ``not_verified``, ``policy``,
    ``invalid_request``).

    Args:
        tokenizer: see :class:`agent_gym.AgentEnv`.
        difficulty: ``"easy"`` (one request), ``"medium"`` (two, the default) or ``"hard"`` (two and a
            request the policy forbids, which must be refused).
        split: ``"train"`` or ``"test"``: disjoint task sets (a hash of each task's content).
        user: ``"scripted"`` (deterministic rules, the default), ``"hf"`` (a local model, ``user_model``
            names it), an OpenAI-compatible API root such as ``"http://localhost:8000/v1"`` (a vLLM
            server; ``user_model`` names the served model), or a callable ``(messages) -> str``. See
            :mod:`agent_gym_customer_service.user`.
        user_model: the model of a model user.
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns`` default 30,
            ``max_context_tokens`` default 8192, ``tool_format``, ...).
    """

    #: What a snapshot (``env.unwrapped.snapshot()``, where the core has it) copies besides the base
    #: class's state: the customer's view of the conversation, and the episode's shop as data.
    episode_state = ("transcript", "episode_data")

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        difficulty: str = "medium",
        split: str = "train",
        user: str | UserBackend = "scripted",
        user_model: str | None = None,
        prompt_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ):
        GeneratedTaskId.check(split, difficulty, splits=SPLITS, variants=DIFFICULTIES, env="CustomerService")
        if "tools" in kwargs:
            raise TypeError("CustomerServiceEnv offers exactly its eight shop tools; do not pass tools=")
        kwargs.setdefault("max_turns", 30)
        kwargs.setdefault("max_context_tokens", 8192)
        self.retail = RetailTools()
        super().__init__(tokenizer, tools=self.retail.tools(), **kwargs)
        self.difficulty = difficulty
        self.split = split
        self.prompts = PromptTemplates("agent_gym_customer_service", prompt_dir)
        self._new_user = make_user(user, user_model)
        self.scripted_user = self._new_user is ScriptedUser
        self.user: User | None = None
        #: the conversation the customer sees: its messages and the agent's messages to it
        self.transcript: list[dict[str, str]] = []

    # -- the task source ---------------------------------------------------------------------------------

    def sample_task(self, rng: np.random.Generator) -> CustomerServiceTask:
        return sample_task(rng, self.difficulty, self.split)

    def get_task(self, task_id: str) -> CustomerServiceTask:
        return task_from_id(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> CustomerServiceTask:
        return task_from_mapping(task)

    def initial_messages(self, task: CustomerServiceTask) -> list[dict[str, Any]]:
        system = self.prompts.render(
            "customer_service_system.j2", today=task.today, return_window_days=RETURN_WINDOW_DAYS,
            **self.tool_prompt_variables(EXAMPLE_CALL),
        )
        opening = ScriptedUser(task, self.prompts).opening()  # every user opens with the scripted request
        return [{"role": "system", "content": system}, {"role": "user", "content": opening}]

    # -- episode -----------------------------------------------------------------------------------------

    def on_reset(self, task: CustomerServiceTask) -> dict[str, Any]:
        """The episode's shop (a fresh SQLite database of the task), its customer and their transcript."""
        if self.retail.store is not None:
            self.retail.store.close()
        self.retail.store = Store(task.db, task.today)
        self.user = self._new_user(task, self.prompts)
        assert self.context is not None  # on_reset runs once the context is open
        self.transcript = [{"role": "user", "content": str(self.context.messages[-1]["content"])}]
        return {"difficulty": task.difficulty, "requests": len(task.requests)}

    def respond(self, turn: Turn) -> EnvReply:
        if turn.parsed.has_tool_calls:
            if turn.index >= self.max_turns:
                return self._end(turn, [], truncated=True, reason="max_turns")
            return self._with_progress(self._tool_reply(self.executor.execute(turn.parsed)))
        return self._customer_reply(turn, self._ask_user)

    async def arespond(self, turn: Turn) -> EnvReply:
        if turn.parsed.has_tool_calls:
            if turn.index >= self.max_turns:
                return self._end(turn, [], truncated=True, reason="max_turns")
            return self._with_progress(self._tool_reply(await self.executor.aexecute(turn.parsed)))
        if self.scripted_user:
            return self._customer_reply(turn, self._ask_user)  # microseconds: no thread hop
        return await asyncio.to_thread(self._customer_reply, turn, self._ask_user)  # a model waits

    def _ask_user(self) -> str:
        assert self.user is not None
        return self.user.reply(self.transcript)

    def _customer_reply(self, turn: Turn, ask: Any) -> EnvReply:
        """The customer's answer to the agent's message, or the episode's end (stop phrase, turn limit,
        a user model that failed)."""
        self.transcript.append({"role": "assistant", "content": turn.parsed.content})
        try:
            text = ask()
        except Exception as exc:  # noqa: BLE001 - a user model's failure ends the episode, never the process
            reply = self._end(turn, [], truncated=True, reason="user_error")
            reply.info["user_error"] = f"{type(exc).__name__}: {exc}"
            return reply
        self.transcript.append({"role": "user", "content": text})
        message = {"role": "user", "content": text}
        if STOP in text:
            return self._end(turn, [message], terminated=True)
        if turn.index >= self.max_turns:
            return self._end(turn, [message], truncated=True, reason="max_turns")
        return self._with_progress(EnvReply(messages=[message]))

    def _progress(self) -> dict[str, Any]:
        store = self.retail.store
        return {
            "policy_violations": len(store.violations) if store is not None else 0,
            "verified": bool(store and store.verified),
            "user_turns": sum(m["role"] == "user" for m in self.transcript),
        }

    def _with_progress(self, reply: EnvReply) -> EnvReply:
        reply.info.update(self._progress())
        return reply

    def _end(self, turn: Turn, messages: list[dict[str, Any]], *, terminated: bool = False, truncated: bool = False,
             reason: str | None = None) -> EnvReply:
        assert self.task is not None
        grade = self.grade(self.task, turn)
        info: dict[str, Any] = {"correct": grade.correct, "reward_components": dict(grade.components), **grade.info}
        info.update(self._progress())
        info["user_stopped"] = terminated
        if reason is not None:
            info["truncated_reason"] = reason
        return EnvReply(messages=messages, reward=grade.reward, terminated=terminated, truncated=truncated, info=info)

    def grade(self, task: CustomerServiceTask, turn: Turn) -> Grade:
        """The end state against the goal (whatever ended the episode): see the class docstring."""
        store = self.retail.store
        assert store is not None
        diff = db_diff(task.expected_db, store.dump())
        missing = missing_info(task.info_expected(), (m["content"] for m in self.transcript if m["role"] == "assistant"))
        correct = not diff and not missing and not store.violations
        reason = "correct" if correct else "policy_violation" if store.violations else "db_mismatch" if diff else "info_missing"
        return Grade.from_check(
            correct, reason, db_match=not diff, info_given=not missing, db_diff=diff, info_missing=missing,
            violations=list(store.violations), difficulty=task.difficulty,
        )

    @property
    def episode_data(self) -> dict[str, Any] | None:
        """The episode's shop and customer as plain data: the database rows, who is verified, the
        violations so far and the scripted customer's place in its goal (``None`` before a reset).
        Setting it rebuilds the SQLite database and the customer (how a snapshot is restored)."""
        store = self.retail.store
        if store is None:
            return None
        return {
            "db": store.dump(), "today": store.today.isoformat(), "verified": sorted(store.verified),
            "violations": list(store.violations), "user_index": getattr(self.user, "index", 0),
        }

    @episode_data.setter
    def episode_data(self, data: dict[str, Any] | None) -> None:
        if data is None or self.task is None:
            return
        if self.retail.store is not None:
            self.retail.store.close()
        store = Store(data["db"], data["today"])
        store.verified = set(data["verified"])
        store.violations = list(data["violations"])
        self.retail.store = store
        self.user = self._new_user(self.task, self.prompts)
        if isinstance(self.user, ScriptedUser):
            self.user.index = int(data["user_index"])

    def close(self) -> None:
        store = getattr(self, "retail", None) and self.retail.store
        if store is not None:
            store.close()
            self.retail.store = None
        super().close()
