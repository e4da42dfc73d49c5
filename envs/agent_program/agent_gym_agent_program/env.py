"""``AgentR1/AgentProgram-v0``: an agent program that calls an OpenAI-compatible chat API, as a Gymnasium env.

The env puts the policy behind the endpoint of :mod:`agent_gym.endpoint` and runs the program against
it, one program per episode. Each chat request of the program is one step:

- ``reset`` starts the program and waits for its first request; the observation is that request
  rendered with the policy's chat template (its exact prompt ids);
- ``step(action_ids)`` answers the waiting request with the completion those ids stand for (content
  and ``tool_calls`` parsed in the env's tool-call format), then waits for the program's next request
  (the next observation) or its end: the grader scores the program's result, and the episode
  terminates with that reward.

While the program only appends to its history, each prompt is the previous prompt + the action + the
appended turns' ids (no drift); when it rewrites its history the request is rendered afresh and the
step says ``info["new_segment"]`` (:mod:`agent_gym.endpoint.conversation`).

Nothing the program does raises out of ``step``: a crash or a non-zero exit ends the episode truncated
with ``info["truncated_reason"] == "program_error"`` and ``info["program_error"]`` saying what happened;
a program that neither asks nor ends within ``time_limit_s`` seconds of its own time (the time the
policy takes is not counted) is stopped, ``"program_timeout"``; one more request than ``max_turns``
is refused, ``"max_turns"``. A request the endpoint cannot take (longer than ``max_context_tokens``,
one the template cannot render) is answered with OpenAI's 400 error and the env waits for the next:
the program may shorten its history and ask again. Only a program that fails *before* its first
request has no episode to end: ``reset`` raises :class:`ProgramError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.tasks import TaskList
from agent_gym.core.types import Observation, ResetInfo, StepInfo
from agent_gym.endpoint.conversation import Conversation
from agent_gym.endpoint.server import ProgramEnd, Request, Session, shared_server
from agent_gym.endpoint.wire import APIError, completion
from agent_gym.tools import ParsedResponse
from agent_gym_agent_program.demo import DEMO_SPLITS, answer_match, calculator_program, demo_task
from agent_gym_agent_program.programs import ProgramSpec, RunningProgram, describe_exception, load_callable, run_test

__all__ = ["AgentProgramEnv", "ProgramError"]

#: ``grader(result, task)``: a reward (``bool`` counts as 1.0 / 0.0) or a full :class:`Grade`.
Grader = Callable[[Any, Mapping[str, Any]], "float | bool | Grade"]
#: How many demo tasks each split draws from.
DEMO_TASKS_PER_SPLIT = 100_000
#: The most characters of a program's result kept in ``info["program_result"]``.
RESULT_CHARS = 2_000


class ProgramError(RuntimeError):
    """The program ended, or stayed silent past its time limit, before its first request: no episode."""


class AgentProgramResetInfo(ResetInfo):
    """The ``info`` of an AgentProgram reset: :class:`~agent_gym.core.types.ResetInfo` and the program's first request."""

    request: dict[str, Any]
    """The request's sampling parameters (``temperature``, ``max_tokens``, ...)."""


class AgentProgramStepInfo(StepInfo, total=False):
    """The ``info`` of an AgentProgram step: :class:`~agent_gym.core.types.StepInfo`, the program's next request,
    and on the final step its result and grade."""

    request: dict[str, Any]
    """The next request's sampling parameters."""
    rejected_requests: int
    """Requests answered with an error so far (too long, a template that cannot render them)."""
    program_result: str
    """What the program returned (or printed), shortened."""
    program_error: str
    """Why the program ended without a result (a crash, an exit status, silence past the time limit)."""
    predicted: str
    """The demo grader's number read from the result."""
    expected: str
    """The task's answer (the demo grader)."""


class AgentProgramEnv(AgentEnv[dict[str, Any], AgentProgramResetInfo, AgentProgramStepInfo]):
    """An agent program as an env (see the module docstring).

    Args:
        tokenizer: the policy's tokenizer (see :class:`agent_gym.AgentEnv`).
        program: what runs each episode: a callable ``program(base_url=..., api_key=..., task=...)``
            (``async def`` too) whose return value is the result; its ``"module:function"`` or
            ``"path/file.py:function"``; or a command (a list of strings) run with ``OPENAI_BASE_URL``,
            ``OPENAI_API_KEY`` and ``AGENT_GYM_TASK`` set, whose stdout is the result. ``None``: the demo
            (:func:`agent_gym_agent_program.demo.calculator_program`, arithmetic with a calculator).
        grader: scores the result: a callable ``grader(result, task) -> float | bool | Grade``, its
            dotted path, or a test command (a list: reward 1.0 when it exits 0; it runs in the episode's
            working directory with ``AGENT_GYM_TASK`` and ``AGENT_GYM_RESULT`` set). ``None``: the final
            number of the result against the task's ``"answer"`` (:func:`~agent_gym_agent_program.demo.answer_match`).
        tasks: the tasks, a list of mappings or a JSONL file (one object a line), each with an ``"id"``
            (default: its index) and whatever the program and grader read; ``None``: the demo's
            generated arithmetic tasks.
        split: the tasks whose ``"split"`` field is this (all of them if none has one); for the demo
            ``"train"`` (default) or ``"test"``.
        time_limit_s: the program's own time per episode (waiting for its requests and its end; the
            policy's time is not counted).
        env_vars: more environment variables for a command program.
        max_turns: requests answered per episode (default 16).
        max_context_tokens: the longest prompt accepted (a longer request is answered 400).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``tool_format``, ``chat_template``, ``max_action_tokens``).
    """

    own_episode_loop = ("the program's requests decide the context: step answers one and waits for the next "
                        "(reset is AgentEnv's; on_reset and aon_reset wait for the first)")

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        program: Any = None,
        grader: Any = None,
        tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
        split: str | None = None,
        time_limit_s: float = 300.0,
        env_vars: Mapping[str, str] | None = None,
        max_turns: int = 16,
        max_context_tokens: int = 8192,
        **kwargs: Any,
    ):
        if time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0, got {time_limit_s}")
        self.demo = tasks is None
        if self.demo:
            self.split: str | None = split or "train"
            if self.split not in DEMO_SPLITS:
                raise ValueError(f"unknown split {self.split!r} for the AgentProgram-v0 demo; known: {', '.join(DEMO_SPLITS)}")
            self.tasks: TaskList[dict[str, Any]] | None = None
        else:
            assert tasks is not None
            self.split = split
            self.tasks = TaskList(_select_split(_load_tasks(tasks), split), name="AgentProgram-v0 tasks")
        self.program = ProgramSpec(calculator_program if program is None else program, env_vars)
        self.grader = _resolve_grader(grader)
        if grader is None and self.tasks is not None:
            missing = [t["id"] for t in self.tasks if "answer" not in t]
            if missing:
                raise ValueError(f"task {missing[0]!r} has no \"answer\" for the default grader: give each task an "
                                 "\"answer\", or pass grader=")
        self.time_limit_s = float(time_limit_s)
        super().__init__(tokenizer, max_turns=max_turns, max_context_tokens=max_context_tokens, **kwargs)
        self.server = shared_server()
        self.conversation: Conversation | None = None
        self._session: Session | None = None
        self._running: RunningProgram | None = None
        self._pending: Request | None = None
        self._program_s = 0.0
        # An env dropped without close(): its program stops and its key is forgotten with it.
        self._finalizer = weakref.finalize(self, _stop, self.server, None, None, "the env was garbage-collected")

    # -- tasks -----------------------------------------------------------------------------------------

    def sample_task(self, rng: np.random.Generator) -> dict[str, Any]:
        if self.tasks is None:
            return demo_task(self.split or "train", int(rng.integers(0, DEMO_TASKS_PER_SPLIT)))
        return self.tasks.sample(rng)

    def get_task(self, task_id: str) -> dict[str, Any]:
        if self.tasks is None:
            split, _, n = task_id.rpartition("-")
            if split not in DEMO_SPLITS or not n.isascii() or not n.isdigit():
                raise KeyError(f"no task with id {task_id!r} in the AgentProgram-v0 demo (ids look like 'train-7')")
            return demo_task(split, int(n))
        return self.tasks.get(task_id)

    def task_from_dict(self, task: Mapping[str, Any]) -> dict[str, Any]:
        return _load_tasks([task])[0]

    def initial_messages(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        """The task as a trainer's dataset row shows it (verl's ``prompt`` column, TRL's): the task's
        ``prompt`` as one user message (the whole task as JSON where it has none). The program writes
        the episode's real messages; ``reset`` renders its first request, and the agent loops train on
        those ids, never on these."""
        prompt = task.get("prompt")
        return [{"role": "user", "content": prompt if isinstance(prompt, str) else json.dumps(task, sort_keys=True, default=str)}]

    def grade(self, task: dict[str, Any], turn: Turn) -> Grade:
        raise NotImplementedError("AgentProgram-v0 grades the program's result, not a turn")

    def fork_blocker(self) -> str | None:
        return "an AgentProgram-v0 episode is a running program, which a snapshot cannot copy"

    # -- gymnasium API ---------------------------------------------------------------------------------

    # The episode's start waits for the program's first request: on_reset (reset) and aon_reset (areset,
    # which AgentEnv gives an env that overrides aon_reset) wait for it; seeding, the reset options and
    # the task are AgentEnv.reset's. The context is the first request's, so open_context makes none.

    def open_context(self, task: dict[str, Any]) -> None:
        return None

    def on_reset(self, task: dict[str, Any]) -> dict[str, Any]:
        """Start the program on ``task`` and wait for its first request (see the module docstring).

        Raises:
            ProgramError: the program ended or stayed silent for ``time_limit_s`` before its first request.
        """
        self._start(task)
        while True:
            info = self._first(self._wait_sync())
            if info is not None:
                return info

    async def aon_reset(self, task: dict[str, Any]) -> dict[str, Any]:
        """:meth:`on_reset` for event loops: the wait for the first request does not block other episodes."""
        self._start(task)
        while True:
            info = self._first(await self._wait_async())
            if info is not None:
                return info

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, AgentProgramStepInfo]:  # type: ignore[override]
        """Answer the waiting request with ``action`` and wait for the next request or the program's end."""
        turn, result = self._answer(action)
        while result is None:
            event = self._wait_sync()
            grade = self._grade_end(event) if isinstance(event, ProgramEnd) else None
            result = self._next(turn, event, grade)
        return result

    async def astep(self, action: Any) -> tuple[Observation, float, bool, bool, AgentProgramStepInfo]:
        """:meth:`step` for event loops: the waits and the grader do not block other episodes."""
        turn, result = self._answer(action)
        while result is None:
            event = await self._wait_async()
            grade = await asyncio.to_thread(self._grade_end, event) if isinstance(event, ProgramEnd) else None
            result = self._next(turn, event, grade)
        return result

    def close(self) -> None:
        """Stop the episode's program (a command's processes are killed) and forget its key."""
        self._end_episode("the env was closed")
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.detach()
        super().close()

    # -- the episode -----------------------------------------------------------------------------------

    def _start(self, task: dict[str, Any]) -> None:
        self._end_episode("a new episode started")
        self.conversation = Conversation(self.template, tool_format=self.tool_format, max_context_tokens=self.max_context_tokens)
        self._rejected = 0
        self._program_s = 0.0
        session = self.server.open_session()
        self._session = session
        self._running = self.program.start(session, self.server.base_url, task)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop, self.server, session, self._running, "the env was garbage-collected")

    def _first(self, event: Request | ProgramEnd | None) -> dict[str, Any] | None:
        """The reset's context from the first request, and its entries of ``info``; ``None``: refused, wait
        for another."""
        if not isinstance(event, Request):
            why = self._silence() if event is None else (event.error or f"it returned {_short(event.value)!r}")
            self._end_episode("the program ended before its first request")
            raise ProgramError(f"the program {self.program.name} made no request: {why}")
        conversation = self.conversation
        assert conversation is not None
        try:
            conversation.open(event.request)
        except APIError as error:
            self._refuse(event, error)
            return None
        self._pending = event
        self.context = conversation.context
        return {"request": dict(event.request.params)}

    def _answer(self, action: Any) -> tuple[Turn | None, tuple[Observation, float, bool, bool, AgentProgramStepInfo] | None]:
        """Send the completion ``action`` stands for; an invalid action ends the episode at once."""
        if self.context is None or self._pending is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset() to start a new one")
        self._turn += 1
        ids, problem = self._coerce_action(action)
        if problem is not None:
            self._counts["format_errors"] += 1
            info = {"invalid_action": problem, "correct": False, "reward_components": {"outcome": 0.0}}
            return None, self._finish(0.0, True, False, info, reason=f"invalid action: {problem}")
        ids, cut = self._cut_at_end_of_turn(ids)
        text = self.template.decode(ids[: len(ids) - self._end_len(ids)])
        request = self._pending.request
        conversation = self.conversation
        assert conversation is not None
        parsed = conversation.parser.parse(text) if request.tools else ParsedResponse(content=text.strip())
        turn = Turn(index=self._turn, ids=tuple(ids), text=text, parsed=parsed, ids_after_end_of_turn=cut)
        if request.tools:
            self._counts["tool_calls"] += len(parsed.calls)
            self._counts["format_errors"] += len(parsed.errors)
        calls = [{"id": f"call_{turn.index}_{i}", "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for i, c in enumerate(parsed.calls)]
        content = parsed.content if not parsed.errors else _without_calls(text, parsed)
        ended = self._end_len(ids) > 0
        finish = "tool_calls" if calls else "stop" if ended else "length"
        reply_content = content or (None if calls else "")
        self._reply = {"role": "assistant", "content": reply_content, **({"tool_calls": calls} if calls else {})}
        self._assistant = {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}
        pending, self._pending = self._pending, None
        pending.reply(completion(completion_id=pending.completion_id, model=request.model or "agent-gym-policy",
                                 content=reply_content, tool_calls=calls, finish_reason=finish,
                                 prompt_tokens=len(self.context), completion_tokens=len(ids)))
        return turn, None

    def _next(self, turn: Turn | None, event: Request | ProgramEnd | None,
              grade: Grade | str | None) -> tuple[Observation, float, bool, bool, AgentProgramStepInfo] | None:
        """The step's result after ``event``; ``None``: a refused request, wait for the next event."""
        assert turn is not None
        info: dict[str, Any] = {}
        if turn.ids_after_end_of_turn:
            info["ids_after_end_of_turn"] = turn.ids_after_end_of_turn
        if event is None:
            self._record(turn)
            info.update(truncated_reason="program_timeout", program_error=self._silence())
            return self._finish(0.0, False, True, info, reason="time limit")
        if isinstance(event, ProgramEnd):
            self._record(turn)
            if event.error is not None:
                info.update(truncated_reason="program_error", program_error=event.error)
                return self._finish(0.0, False, True, info, reason="program error")
            info["program_result"] = _short(event.value)
            if isinstance(grade, str):
                info.update(truncated_reason="grader_error", grader_error=grade)
                return self._finish(0.0, False, True, info, reason="grader error")
            assert isinstance(grade, Grade)
            info.update(correct=grade.correct, reward_components=dict(grade.components or {"outcome": grade.reward}))
            info.update(grade.info)
            return self._finish(float(grade.reward), True, False, info, reason="the program ended")
        if turn.index >= self.max_turns:
            self._refuse(event, APIError(400, f"the episode's turn limit is reached (max_turns={self.max_turns})",
                                         code="max_turns"))
            self._record(turn)
            info["truncated_reason"] = "max_turns"
            return self._finish(0.0, False, True, info, reason="max_turns")
        conversation = self.conversation
        assert conversation is not None
        try:
            new_segment = conversation.follow(turn.ids, self._assistant, self._reply, event.request)
        except APIError as error:
            self._refuse(event, error)
            return None
        self._pending = event
        self.context = conversation.context
        info.update(new_segment=new_segment, request=dict(event.request.params))
        return self._observation(), 0.0, False, False, self._step_info(info)

    def _grade_end(self, event: ProgramEnd) -> Grade | str | None:
        """The grade of a program that returned (a string: why the grader failed)."""
        if event.error is not None:
            return None
        assert self.task is not None
        try:
            if isinstance(self.grader, list):
                workdir = self._running.workdir if self._running is not None else None
                passed, why = run_test(self.grader, task=self.task, result=event.value, workdir=workdir,
                                       timeout_s=self.time_limit_s)
                return Grade.from_check(passed, why)
            result = self.grader(event.value, self.task)
        except Exception as exc:  # noqa: BLE001 - a failing grader ends the episode, told in info
            return describe_exception(exc)
        if isinstance(result, Grade):
            return result
        if isinstance(result, (bool, np.bool_)):
            return Grade.from_check(bool(result))
        try:
            reward = float(result)
        except (TypeError, ValueError):
            return f"the grader returned {result!r}; it must return a float, a bool or a Grade"
        return Grade(reward=reward, components={"outcome": reward})

    def _record(self, turn: Turn) -> None:
        """Keep the last action in the context (no request follows it)."""
        assert self.context is not None
        self.context.append_action(turn.ids, self._assistant)

    def _finish(self, reward: float, terminated: bool, truncated: bool, info: dict[str, Any],
                *, reason: str) -> tuple[Observation, float, bool, bool, AgentProgramStepInfo]:
        info.setdefault("new_segment", False)
        result = self._observation(), reward, terminated, truncated, self._step_info(info)
        self._end_episode(f"the episode ended ({reason})")
        return result

    def _step_info(self, extra: dict[str, Any]) -> AgentProgramStepInfo:
        assert self.context is not None
        info: dict[str, Any] = {"task_id": self.task_id_of(self.task), "turn": self._turn, **self._counts,
                                "tool_error_kinds": {}, "segment": self.context.segment,
                                "context_tokens": len(self.context), "rejected_requests": self._rejected}
        info.update(extra)
        return cast(AgentProgramStepInfo, info)

    def _observation(self) -> Observation:
        assert self.context is not None
        return cast(Observation, self.context.observation())

    def _refuse(self, event: Request, error: APIError) -> None:
        self._rejected += 1
        event.fail(error)

    def _silence(self) -> str:
        return (f"no request and no end within time_limit_s={self.time_limit_s:g} s of the program's own time; "
                "it was stopped")

    def _end_episode(self, reason: str) -> None:
        self._done = True
        self._pending = None
        session, running = self._session, self._running
        self._session = self._running = None
        _stop(self.server if session is not None else None, session, running, reason)

    # -- waiting -----------------------------------------------------------------------------------------

    def _wait_sync(self) -> Request | ProgramEnd | None:
        """The next event, or ``None`` when the program's time runs out."""
        assert self._session is not None
        future = self._session.next_event()
        started = time.perf_counter()
        try:
            return future.result(timeout=max(0.0, self.time_limit_s - self._program_s))
        except concurrent.futures.TimeoutError:
            future.cancel()
            return None
        finally:
            self._program_s += time.perf_counter() - started

    async def _wait_async(self) -> Request | ProgramEnd | None:
        assert self._session is not None
        future = self._session.next_event()
        started = time.perf_counter()
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), max(0.0, self.time_limit_s - self._program_s))
        except asyncio.TimeoutError:
            return None
        finally:
            self._program_s += time.perf_counter() - started


def _stop(server: Any, session: Session | None, running: RunningProgram | None, reason: str) -> None:
    if session is not None and server is not None:
        server.close_session(session, reason)
    if running is not None:
        running.stop()


def _short(value: Any) -> Any:
    """A program's result for ``info``: a JSON value as it is when short, else its text, cut."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:RESULT_CHARS]
    if len(text) <= RESULT_CHARS:
        return value
    return (value if isinstance(value, str) else text)[:RESULT_CHARS]


def _without_calls(text: str, parsed: ParsedResponse) -> str:
    """The text with its well-formed calls taken out (a malformed one stays: the program sees it)."""
    for call in parsed.calls:
        text = text.replace(call.raw, "", 1)
    return text.strip()


def _load_tasks(tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(tasks, (str, os.PathLike)):
        path = Path(tasks).expanduser()
        rows = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON object ({exc})") from None
    else:
        rows = list(tasks)
    out = []
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"task {index} is not an object: {row!r}")
        out.append({**row, "id": str(row.get("id", index))})
    return out


def _select_split(tasks: list[dict[str, Any]], split: str | None) -> list[dict[str, Any]]:
    splits = sorted({str(t["split"]) for t in tasks if "split" in t})
    if split is None or not splits:
        return tasks
    chosen = [t for t in tasks if t.get("split") == split]
    if not chosen:
        raise ValueError(f"no task has \"split\": {split!r} (the tasks' splits: {', '.join(splits)})")
    return chosen


def _resolve_grader(grader: Any) -> Grader | list[str]:
    if grader is None:
        return cast(Grader, answer_match)
    if isinstance(grader, (list, tuple)):
        if not grader or not all(isinstance(a, str) for a in grader):
            raise ValueError(f"a test grader is a non-empty list of strings, got {grader!r}")
        return list(grader)
    if isinstance(grader, str):
        return cast(Grader, load_callable(grader, "grader"))
    if callable(grader):
        return cast(Grader, grader)
    raise ValueError(f"grader must be a callable, 'module:function' or a test command list, got {grader!r}")

