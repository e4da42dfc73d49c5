"""The base class of every agent env: a ``gymnasium.Env`` whose observation is a chat context and whose
action is the token ids the policy generated.

A task author implements five small hooks (SkyRL-gym style) and gets ``reset``/``step``/``astep``,
tool calling, token limits, drift-free context ids and the ``info`` bookkeeping from this class:

- :meth:`AgentEnv.sample_task` / :meth:`AgentEnv.get_task` / :meth:`AgentEnv.task_from_dict`: the
  env's own task source (a dataset split, a generator);
- :meth:`AgentEnv.initial_messages`: the chat that opens an episode;
- :meth:`AgentEnv.grade`: the outcome reward of a final response.

An env with state of its own per episode (a sandbox session, a database, a simulated user) sets it up
in :meth:`AgentEnv.on_reset` (:meth:`AgentEnv.aon_reset` where the start waits), which may also add
entries to ``reset``'s ``info``; ``reset`` itself is this class's alone (:meth:`AgentEnv.open_context`
gives the opening context, default: the rendered :meth:`AgentEnv.initial_messages`). Multi-turn envs whose reply is not "run the tools" (games, simulators) override
:meth:`AgentEnv.respond` (and :meth:`AgentEnv.arespond` for async work).
"""

from __future__ import annotations

import asyncio
import copy
import json
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Mapping, Sequence, cast, get_args, get_origin

import gymnasium as gym
import numpy as np
from typing_extensions import TypeVar  # PEP 696 defaults (Python 3.13's typing); comes with pydantic

from agent_gym.chat.context import ChatContext
from agent_gym.chat.template import ChatTemplate
from agent_gym.core.arguments import constructor_kwarg_names, ends_kwargs_chain, kwarg_hint
from agent_gym.core.prompts import tool_prompt_variables
from agent_gym.core.spaces import ChatContextSpace, TokenSequence
from agent_gym.core.types import Observation, ResetInfo, StepInfo
from agent_gym.models import load_tokenizer
from agent_gym.tools import ParsedResponse, Tool, ToolExecutor, ToolResult, get_parser
from agent_gym.tools.source import ToolSource, collect_sources

if TYPE_CHECKING:
    from agent_gym.core.snapshot import EnvSnapshot

__all__ = ["AgentEnv", "Turn", "EnvReply", "Grade", "ObsType", "TaskT", "ResetInfoT", "StepInfoT", "info_types"]

#: The observation type of every agent env (kept under gymnasium's name for it).
ObsType = Observation
#: The task type of an env: GSM8K's ``GSM8KTask``, Countdown's ``CountdownTask``, a mapping, ...
TaskT = TypeVar("TaskT")
#: The reset-info type of an env: :class:`~agent_gym.core.types.ResetInfo` or an extension of it.
ResetInfoT = TypeVar("ResetInfoT", bound=ResetInfo, default=ResetInfo)
#: The step-info type of an env: :class:`~agent_gym.core.types.StepInfo` or an extension of it.
StepInfoT = TypeVar("StepInfoT", bound=StepInfo, default=StepInfo)


@dataclass(frozen=True)
class Turn:
    """What the policy did in one step, as the env sees it."""

    index: int
    """1-based turn number within the episode."""
    ids: tuple[int, ...]
    """The generated token ids, exactly as given."""
    text: str
    """The ids decoded (for parsing and the message record only; never re-encoded)."""
    parsed: ParsedResponse
    """Tool calls found in ``text`` (empty when the env offers no tools)."""
    ids_after_end_of_turn: int = 0
    """How many ids the action held after its first end-of-turn id: cut off, never graded or appended."""


@dataclass
class Grade:
    """The outcome of a final response: reward, correctness and why."""

    reward: float
    correct: bool | None = None
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_check(cls, correct: bool, reason: str | None = None, **info: Any) -> Grade:
        """The grade of a right-or-wrong check: reward 1.0 or 0.0, the same as the ``outcome`` component.

        Args:
            correct: the check's verdict.
            reason: why (``"correct"``, ``"wrong_answer"``, ``"no_final_answer"``...), kept as
                ``info["answer_check"]``, the first entry of ``info``; ``None``: no such entry.
            **info: further ``info`` entries (the expected answer, what was parsed...).
        """
        reward = 1.0 if correct else 0.0
        why = {} if reason is None else {"answer_check": reason}
        return cls(reward=reward, correct=bool(correct), components={"outcome": reward}, info={**why, **info})


@dataclass
class EnvReply:
    """What the env answers to a turn.

    Attributes:
        messages: turns to append to the context (tool results, feedback).
        reward: the reward of this step.
        terminated: the episode reached a real end.
        truncated: the episode was cut (turn limit, context limit).
        info: extra entries for this step's ``info``.
        rewrite: when set, the whole context is replaced by these messages and rendered afresh: a
            new segment starts (the next observation is not ``prev + action + appended``).
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    rewrite: list[dict[str, Any]] | None = None


class AgentEnv(gym.Env[Observation, np.ndarray], Generic[TaskT, ResetInfoT, StepInfoT]):
    """A chat-based agent task.

    Type arguments: the task type, then the ``info`` types of ``reset`` and ``step``
    (:class:`~agent_gym.core.types.ResetInfo` and :class:`~agent_gym.core.types.StepInfo` unless the
    env extends them with keys of its own: ``AgentEnv[MyTask, ResetInfo, MyStepInfo]``). ``agent-gym
    check`` refuses an ``info`` key that these types do not declare.

    Args:
        tokenizer: a Hugging Face tokenizer, a model path/name, or ``None`` for the embedded default
            model's tokenizer (SmolLM2-135M-Instruct).
        max_turns: assistant turns per episode; a tool call on the last turn truncates the episode.
        max_context_tokens: the context may not grow past this; a step that would exceed it
            truncates the episode.
        max_action_tokens: the longest action accepted; longer actions are invalid.
        tools: tools offered to the policy (empty: every response is final).
        tool_sources: sources of more tools, offered after ``tools``: objects with a lifecycle
            (:class:`agent_gym.tools.source.ToolSource`), told where episodes begin and end, closed
            with the env.
        mcp_servers: MCP servers whose tools are offered too, as one more tool source (after
            ``tool_sources``): ``[{"command": [...]}, {"url": ...}]`` (see docs/mcp.md). Needs the ``mcp`` extra.
        tool_format: how tool calls are written and the tools offered: a format registered in
            :data:`agent_gym.tools.PARSERS` (``"hermes"``, ``"qwen3_coder"``, ``"pythonic"``) or a
            parser object. A format that cannot express the tools raises ``ValueError`` here.
        chat_template: a jinja chat template replacing the tokenizer's own, or a built-in one by
            name (``"completion"``: plain prose for base models, see docs/base-models.md).
        render_mode: ``"ansi"`` (``render()`` returns the conversation) or ``"human"`` (prints it).

    Observation: ``{"messages", "tools", "prompt_ids"}`` (see :class:`ChatContextSpace`).
    Action: generated token ids (:class:`TokenSequence`); a ``str`` is accepted as a convenience and
    encoded, but ids are canonical. A turn ends at its first end-of-turn id: ids after it are cut (not
    graded, not appended) and counted in ``info["ids_after_end_of_turn"]``.

    ``info`` after every step: ``turn``, ``tool_calls``, ``tool_errors`` (cumulative counts),
    ``tool_error_kinds``, ``format_errors``, ``new_segment``, ``context_tokens``, ``task_id``; on the
    final step also ``reward_components``, ``correct`` and the env's grading details.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 1}  # noqa: RUF012 - gymnasium's
    #: The instance attributes that hold an episode beyond the base class's (a game's board, its
    #: counters): :meth:`snapshot` deep-copies them, :meth:`restore` puts them back.
    episode_state: ClassVar[tuple[str, ...]] = ()
    #: Why this env's ``step`` and ``astep`` are its own rather than this class's (``None``: they are this
    #: class's, customised through the hooks; ``reset`` is always this class's). Only for an env whose
    #: context something outside it decides (an agent program's requests, ``AgentR1/AgentProgram-v0``);
    #: ``agent-gym check`` skips its step hooks with this reason.
    own_episode_loop: ClassVar[str | None] = None

    @ends_kwargs_chain
    def __init__(
        self,
        tokenizer: Any = None,
        *,
        max_turns: int = 1,
        max_context_tokens: int = 4096,
        max_action_tokens: int = 1024,
        tools: Sequence[Tool] = (),
        tool_sources: Sequence[ToolSource] = (),
        tool_format: str = "hermes",
        mcp_servers: Sequence[Mapping[str, Any]] = (),
        chat_template: str | None = None,
        render_mode: str | None = None,
        **unknown: Any,
    ):
        if unknown:
            # What every subclass passed on and nobody took: a misspelt argument, refused with the
            # names the whole constructor chain takes (Python's own message names neither).
            name = next(iter(unknown))
            accepted = constructor_kwarg_names(type(self)) or []
            raise TypeError(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument {name!r}"
                + kwarg_hint(name, accepted)
            )
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tokenizer = load_tokenizer(tokenizer)
        self.template = ChatTemplate(self.tokenizer, chat_template=chat_template)
        if max_turns > 1:
            # Refused here, never mid-episode: a multi-turn env answers every non-final turn.
            self.template.require_replies()
        self.max_turns = int(max_turns)
        self.max_context_tokens = int(max_context_tokens)
        self.max_action_tokens = int(max_action_tokens)
        #: the sources of tools beyond ``tools`` (``mcp_servers`` is the last), driven through their protocol
        self.tool_sources: list[ToolSource] = collect_sources(tool_sources, mcp_servers=mcp_servers, tool_format=tool_format)
        self.tools: list[Tool] = [*tools, *(t for source in self.tool_sources for t in source.tools)]
        self.parser = get_parser(tool_format, tools=[t.schema() for t in self.tools])
        #: The name of the tool-call format (``self.parser.name``).
        self.tool_format: str = getattr(self.parser, "name", type(self.parser).__name__)
        self.executor = ToolExecutor(self.tools)
        self.render_mode = render_mode
        vocab = self.template.vocab_size
        self.action_space = TokenSequence(vocab, self.max_action_tokens)
        # An observation holds at most the context limit plus one action (the step that crosses the
        # limit still records the action, then truncates).
        self.observation_space = ChatContextSpace(vocab, self.max_context_tokens + self.max_action_tokens)
        self.context: ChatContext | None = None
        self.task: TaskT | None = None
        self._done = True

    # -- hooks for task authors ----------------------------------------------------------------------

    @abstractmethod
    def sample_task(self, rng: np.random.Generator) -> TaskT:
        """Draw a task from the env's task source using ``rng`` (seeded by ``reset(seed=...)``)."""

    @abstractmethod
    def get_task(self, task_id: str) -> TaskT:
        """The task with this id; raise ``KeyError`` with a helpful message if there is none."""

    def task_from_dict(self, task: Mapping[str, Any]) -> TaskT:
        """Build a task from ``reset(options={"task": {...}})`` (default: the mapping itself)."""
        return cast(TaskT, dict(task))

    @staticmethod
    def task_id_of(task: Any) -> str | None:
        """The id of a task (its ``id`` attribute or key)."""
        value = task.get("id") if isinstance(task, Mapping) else getattr(task, "id", None)
        return None if value is None else str(value)

    @abstractmethod
    def initial_messages(self, task: TaskT) -> list[dict[str, Any]]:
        """The chat that opens an episode on ``task`` (system prompt, user question, ...)."""

    @abstractmethod
    def grade(self, task: TaskT, turn: Turn) -> Grade:
        """The outcome reward for ``turn``, the episode's final response."""

    def on_reset(self, task: TaskT) -> Mapping[str, Any]:
        """Start the env's own state for an episode on ``task``; return extra entries for ``reset``'s ``info``.

        Called by :meth:`reset` once the task is chosen and the context opened (``self.task`` and
        ``self.context`` are set; ``self.np_random`` is seeded): open a sandbox session, load a
        database, make a simulated user. Default: nothing to start, no extra entries. Override this
        rather than ``reset``, so that seeding, task options and the context stay the base class's.
        The entries must be declared in the env's reset-info type.
        """
        return {}

    async def aon_reset(self, task: TaskT) -> Mapping[str, Any]:
        """:meth:`on_reset` for event loops, for an env whose episode start waits on something outside
        (an agent program's first request). An env that overrides it gets ``areset`` (which
        ``agent_gym``'s ``areset`` awaits through gymnasium's wrappers); every other env resets
        synchronously, as :meth:`reset`. Default: :meth:`on_reset`."""
        return self.on_reset(task)

    def open_context(self, task: TaskT) -> ChatContext | None:
        """The context an episode on ``task`` starts from, made before :meth:`on_reset`. Default: the
        :meth:`initial_messages` rendered with the env's tools. ``None``: :meth:`on_reset` sets
        ``self.context`` (an env whose context something outside it decides)."""
        return ChatContext.start(self.template, self.initial_messages(task), [t.schema() for t in self.tools])

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Only an env whose start waits gets an async reset: for the others a coroutine would only add
        # a thread hop (the wrappers' first reset) around the same synchronous work.
        if "aon_reset" in vars(cls) and "areset" not in vars(cls):
            cls.areset = AgentEnv._areset  # type: ignore[attr-defined]

    def respond(self, turn: Turn) -> EnvReply:
        """The env's answer to a turn. Default: run the tools the policy called, or grade a final answer.

        A response with a tool call (well-formed or not) gets tool results (or tool errors) back while
        turns remain; on the last turn it truncates the episode and is graded as it stands. A response
        without a tool call ends the episode and is graded.
        """
        if self.tools and turn.parsed.has_tool_calls and turn.index < self.max_turns:
            return self._tool_reply(self.executor.execute(turn.parsed))
        return self._final_reply(turn)

    async def arespond(self, turn: Turn) -> EnvReply:
        """Async :meth:`respond`: tools run concurrently without blocking the event loop."""
        if self.tools and turn.parsed.has_tool_calls and turn.index < self.max_turns:
            return self._tool_reply(await self.executor.aexecute(turn.parsed))
        if type(self).respond is not AgentEnv.respond:
            # A subclass with its own (blocking) respond: keep it off the event loop.
            return await asyncio.to_thread(self.respond, turn)
        return self._final_reply(turn)

    # -- gymnasium API ---------------------------------------------------------------------------------

    # The info types narrow gymnasium's ``dict[str, Any]`` to the documented keys; at run time they are
    # plain dicts, so the override is sound for every caller that treats them as gymnasium does.
    def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, ResetInfoT]:
        """Start an episode.

        Args:
            seed: seeds the task choice (same seed, same task, in any process).
            options: ``{"task_id": ...}`` pins a task of the env's source; ``{"task": {...}}`` supplies one.
        """
        task = self._begin_reset(seed, options)
        return self._finish_reset(self.on_reset(task))

    async def _areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, ResetInfoT]:
        """:meth:`reset`, awaiting :meth:`aon_reset` (the ``areset`` of an env that overrides it)."""
        task = self._begin_reset(seed, options)
        return self._finish_reset(await self.aon_reset(task))

    def _begin_reset(self, seed: int | None, options: dict[str, Any] | None) -> TaskT:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id", "task"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: task_id, task")
        if "task" in options:
            task = self.task_from_dict(options["task"])
        elif "task_id" in options:
            task = self.get_task(str(options["task_id"]))
        else:
            task = self.sample_task(self.np_random)
        self.task = task
        for source in self.tool_sources:  # this episode's sessions (the previous episode's have ended)
            source.start_episode()
        self.context = self.open_context(task)
        self._turn = 0
        self._counts = {"tool_calls": 0, "tool_errors": 0, "format_errors": 0}
        self._error_kinds: dict[str, int] = {}
        self._done = True  # until on_reset has run: an episode whose start failed takes no step
        return task

    def _finish_reset(self, extra: Mapping[str, Any]) -> tuple[Observation, ResetInfoT]:
        if self.context is None:
            raise RuntimeError(f"{type(self).__name__}: open_context returned None and on_reset set no context")
        self._done = False
        info: ResetInfo = {"task_id": self.task_id_of(self.task), "context_tokens": len(self.context)}
        return cast(Observation, self.context.observation()), cast(ResetInfoT, {**info, **extra})

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, StepInfoT]:  # type: ignore[override]
        """Apply the policy's action (generated token ids). Never raises on bad actions: an invalid
        action ends the episode with reward 0 and ``info["invalid_action"]`` saying why.

        The step is all or nothing: if the context cannot be rendered (a reply the chat template
        raises on), none of it is applied (context ids and messages, counters and turn number are
        as before the step) and the episode ends truncated with ``info["truncated_reason"] ==
        "render_error"`` and ``info["render_error"]`` saying what failed."""
        turn, problem = self._begin_step(action)
        reply = self._invalid_reply(problem) if turn is None else self.respond(turn)
        return self._finish_step(turn, reply)

    async def astep(self, action: Any) -> tuple[Observation, float, bool, bool, StepInfoT]:
        """:meth:`step` for event loops: waiting tools do not block other episodes."""
        turn, problem = self._begin_step(action)
        reply = self._invalid_reply(problem) if turn is None else await self.arespond(turn)
        return self._finish_step(turn, reply)

    def close(self) -> None:
        """Close the tool sources (an MCP server's processes are gone when this returns)."""
        for source in getattr(self, "tool_sources", ()):  # absent when __init__ failed early
            source.close()
        super().close()

    # -- state as data ---------------------------------------------------------------------------------

    def snapshot(self) -> EnvSnapshot:
        """The whole episode as picklable data (:mod:`agent_gym.core.snapshot`).

        Returns:
            An :class:`~agent_gym.core.snapshot.EnvSnapshot`: ``restore`` on a fresh env of the same id
            and arguments continues the episode identically, in this process or another.

        Raises:
            SnapshotError: before ``reset``, or when the env or one of its tools cannot be copied (the
                message says why: :meth:`fork_blocker`).
        """
        from agent_gym.core.snapshot import snapshot

        return snapshot(self)

    def restore(self, snap: EnvSnapshot) -> None:
        """Continue the episode of ``snap`` (taken from an env of the same id and arguments).

        Through ``gym.make``'s wrappers, use :func:`agent_gym.restore` (or ``reset()`` once first): gymnasium's
        ``OrderEnforcing`` refuses ``step`` on an env it never saw reset.

        Raises:
            SnapshotError: a snapshot of another env, or tool state that cannot be rebuilt.
        """
        from agent_gym.core.snapshot import restore_into

        restore_into(self, snap)

    def fork_blocker(self) -> str | None:
        """Why this env's episode cannot be copied, or ``None`` when it can: a tool's own reason (its
        ``fork_blocker()``), or a tool source's (MCP servers that keep state). Subclasses with state no
        snapshot can hold extend it."""
        for t in self.tools:
            blocker = getattr(t, "fork_blocker", None)
            reason = blocker() if callable(blocker) else None
            if reason:
                return str(reason)
        for source in self.tool_sources:
            reason = source.fork_blocker()
            if reason:
                return str(reason)
        return None

    def render(self) -> str | None:
        if self.render_mode is None or self.context is None:
            return None
        text = "\n".join(f"[{m['role']}] {m['content']}" for m in self.context.messages)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # -- internals -------------------------------------------------------------------------------------

    def _begin_step(self, action: Any) -> tuple[Turn | None, str | None]:
        if self.context is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset() to start a new one")
        self._turn += 1
        ids, problem = self._coerce_action(action)
        if problem is not None:
            return None, problem
        ids, cut = self._cut_at_end_of_turn(ids)
        text = self.template.decode(ids[: len(ids) - self._end_len(ids)])
        parsed = self.parser.parse(text) if self.tools else ParsedResponse(content=text.strip(), calls=(), errors=())
        return Turn(index=self._turn, ids=tuple(ids), text=text, parsed=parsed, ids_after_end_of_turn=cut), None

    def _cut_at_end_of_turn(self, ids: list[int]) -> tuple[list[int], int]:
        """``ids`` up to and including the first end-of-turn sequence, and how many ids followed it.

        The turn ends where the policy ended it: what a sampler emitted after the end-of-turn id
        (padding, a second answer) is not part of the turn, so it is neither graded nor appended to
        the context (the next prompt ids continue from the kept ids)."""
        eot = self.template.end_of_turn_ids
        n = len(eot)
        if not n or len(ids) <= n:
            return ids, 0
        first = eot[0]
        for i in range(len(ids) - n):  # an end-of-turn that is already last cuts nothing
            if ids[i] == first and ids[i : i + n] == eot:
                return ids[: i + n], len(ids) - (i + n)
        return ids, 0

    def _coerce_action(self, action: Any) -> tuple[list[int], str | None]:
        if isinstance(action, str):
            return self.template.encode(action), None
        try:
            arr = np.asarray(action)
        except Exception as exc:  # ragged nested lists and the like
            return [], f"action is not a sequence of token ids ({exc})"
        if arr.ndim != 1:
            return [], f"action must be a 1-D sequence of token ids, got shape {arr.shape}"
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            return [], f"action must hold integer token ids, got dtype {arr.dtype}"
        if arr.size > self.max_action_tokens:
            return [], f"action has {arr.size} tokens; the limit is max_action_tokens={self.max_action_tokens}"
        if arr.size and (arr.min() < 0 or arr.max() >= self.template.vocab_size):
            bad = int(arr[(arr < 0) | (arr >= self.template.vocab_size)][0])
            return [], f"token id {bad} is outside the vocabulary [0, {self.template.vocab_size})"
        return arr.tolist(), None

    def _end_len(self, ids: Sequence[int]) -> int:
        eot = self.template.end_of_turn_ids
        return len(eot) if eot and list(ids[-len(eot):]) == eot else 0

    def tool_prompt_variables(self, *example_calls: Mapping[str, Any]) -> dict[str, Any]:
        """Template variables that offer this env's tools in its tool-call format: ``tools``,
        ``tool_format``, ``tools_text``, ``call_example`` (``example_calls`` written in the format);
        see :func:`agent_gym.core.prompts.tool_prompt_variables`. When the chat template renders
        tools itself, ``tools`` and ``tools_text`` are empty (the schemas reach it as ``tools=``)."""
        return tool_prompt_variables(
            self.parser,
            [t.schema() for t in self.tools],
            example_calls,
            template_renders_tools=self.template.renders_tools,
        )

    def tool_demonstration(
        self, question: str, turns: Sequence[Sequence[Mapping[str, Any]]], answer: str
    ) -> list[dict[str, Any]]:
        """The messages of a worked tool-use example, for few-shot prompts.

        ``question`` becomes a user message; each item of ``turns`` is one assistant turn's calls
        (``{"name": ..., "arguments": {...}}``), written in this env's tool-call format, followed by
        the tool messages this env itself would reply with (the tools really run, through the env's
        executor); ``answer`` is the closing assistant message. Calls are kept in the assistant
        ``content`` only (no ``tool_calls`` field), so templates that render ``tool_calls`` do not
        show them twice.

        Raises:
            ValueError: a demonstrated call is malformed or its tool fails: a demonstration must show
                a working call.
        """
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        for calls in turns:
            text = self.parser.format_calls(calls)
            parsed = self.parser.parse(text)
            if parsed.errors or len(parsed.calls) != len(calls):
                raise ValueError(f"demonstration call is malformed: {text!r}")
            results = self.executor.execute(parsed)
            failed = [r for r in results if r.error_kind]
            if failed:
                raise ValueError(f"demonstration call {failed[0].name!r} failed: {failed[0].content}")
            messages.append({"role": "assistant", "content": text})
            messages.extend(self._tool_reply(results).messages)
        messages.append({"role": "assistant", "content": answer})
        return messages

    def prepend_demonstration(
        self, messages: Sequence[dict[str, Any]], question: str, turns: Sequence[Sequence[Mapping[str, Any]]], answer: str
    ) -> list[dict[str, Any]]:
        """``messages`` (system message first) with :meth:`tool_demonstration`'s example inserted after
        the system message: the few-shot prompt of an env. The example is built (its calls run) once
        per env and copied into each prompt."""
        key = (question, json.dumps(turns, sort_keys=True), answer)
        cache: dict[tuple[str, str, str], list[dict[str, Any]]] = self.__dict__.setdefault("_demonstrations", {})
        if key not in cache:
            cache[key] = self.tool_demonstration(question, turns, answer)
        return [messages[0], *copy.deepcopy(cache[key]), *messages[1:]]

    def _tool_reply(self, results: list[ToolResult]) -> EnvReply:
        messages = [
            {"role": "tool", "content": r.content, "tool_call_id": r.call_id, "name": r.name} for r in results
        ]
        info = {"tool_results": [r.error_kind or "ok" for r in results], "tool_outputs": [r.content for r in results]}
        return EnvReply(messages=messages, info=info)

    def _final_reply(self, turn: Turn) -> EnvReply:
        assert self.task is not None  # a step follows a reset
        grade = self.grade(self.task, turn)
        truncated = self.tools and turn.parsed.has_tool_calls  # a tool call on the last allowed turn
        info: dict[str, Any] = {"correct": grade.correct, "reward_components": dict(grade.components or {"outcome": grade.reward})}
        info.update(grade.info)
        if truncated:
            info["truncated_reason"] = "max_turns"
        return EnvReply(reward=float(grade.reward), terminated=not truncated, truncated=bool(truncated), info=info)

    def _invalid_reply(self, problem: str | None) -> EnvReply:
        self._counts["format_errors"] += 1
        return EnvReply(
            reward=0.0,
            terminated=True,
            info={"invalid_action": problem, "correct": False, "reward_components": {"outcome": 0.0}},
        )

    def _finish_step(self, turn: Turn | None, reply: EnvReply) -> tuple[Observation, float, bool, bool, StepInfoT]:
        ctx = self.context
        assert ctx is not None
        snapshot = ctx.snapshot()
        counts, kinds = dict(self._counts), dict(self._error_kinds)
        try:
            return self._apply_step(ctx, turn, reply)
        except Exception as exc:  # noqa: BLE001 - a template error must not leave the step half-applied
            ctx.restore(snapshot)
            self._counts, self._error_kinds = counts, kinds
            if turn is not None:
                self._turn -= 1
            return self._render_failure(ctx, exc)
        finally:
            if self._done:
                for source in self.tool_sources:
                    source.end_episode()  # a stateful source (an MCP server) starts fresh next episode

    def _render_failure(self, ctx: ChatContext, exc: Exception) -> tuple[Observation, float, bool, bool, StepInfoT]:
        info: dict[str, Any] = {"task_id": self.task_id_of(self.task), "turn": self._turn, **self._counts}
        info["tool_error_kinds"] = dict(self._error_kinds)
        info.update(new_segment=False, segment=ctx.segment, context_tokens=len(ctx), truncated_reason="render_error")
        info["render_error"] = f"{type(exc).__name__}: {exc}"
        self._done = True
        return cast(Observation, ctx.observation()), 0.0, False, True, cast(StepInfoT, info)

    def _apply_step(
        self, ctx: ChatContext, turn: Turn | None, reply: EnvReply
    ) -> tuple[Observation, float, bool, bool, StepInfoT]:
        info: dict[str, Any] = {"task_id": self.task_id_of(self.task), "turn": self._turn}
        terminated, truncated = bool(reply.terminated), bool(reply.truncated)
        new_segment = False
        if turn is not None:
            if turn.ids_after_end_of_turn:
                info["ids_after_end_of_turn"] = turn.ids_after_end_of_turn
            self._count_turn(turn)
            ctx.append_action(turn.ids, self._assistant_message(turn))
            if reply.rewrite is not None and not (terminated or truncated):
                ctx.rewrite(reply.rewrite)
                new_segment = True
            elif not (terminated or truncated):
                suffix = ctx.pending_suffix(reply.messages)
                if len(ctx) + len(suffix) > self.max_context_tokens:
                    truncated = True
                    info["truncated_reason"] = "max_context_tokens"
                else:
                    ctx.append_messages(reply.messages, suffix)
            if reply.messages and (terminated or truncated):
                ctx.record(reply.messages)  # kept for the record; no ids follow a final step
        self._error_kinds_update(reply)
        info.update(reply.info)
        info.update(self._counts)
        info["tool_error_kinds"] = dict(self._error_kinds)
        info["new_segment"] = new_segment
        info["segment"] = ctx.segment
        info["context_tokens"] = len(ctx)
        self._done = terminated or truncated
        if self.render_mode == "human":
            self.render()
        return cast(Observation, ctx.observation()), float(reply.reward), terminated, truncated, cast(StepInfoT, info)

    def _count_turn(self, turn: Turn) -> None:
        if not self.tools:
            return
        self._counts["tool_calls"] += len(turn.parsed.calls)
        self._counts["format_errors"] += len(turn.parsed.errors)

    def _error_kinds_update(self, reply: EnvReply) -> None:
        for kind in reply.info.get("tool_results", []):
            if kind != "ok":
                self._counts["tool_errors"] += 1
                self._error_kinds[kind] = self._error_kinds.get(kind, 0) + 1

    def _assistant_message(self, turn: Turn) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.parsed.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in turn.parsed.calls
            ]
        return message


def info_types(env_class: type) -> tuple[type, type]:
    """The reset-info and step-info ``TypedDict`` an env class declares: its ``AgentEnv[Task, ResetInfo,
    StepInfo]`` type arguments, from the class or the nearest base that names them; :class:`ResetInfo`
    and :class:`StepInfo` where none does."""
    found: list[type | None] = [None, None]
    for klass in env_class.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            origin = get_origin(base)
            if not (isinstance(origin, type) and issubclass(origin, AgentEnv)):
                continue
            args = get_args(base)
            for i in (0, 1):
                arg = args[i + 1] if len(args) > i + 1 else None
                if found[i] is None and isinstance(arg, type) and issubclass(arg, dict):
                    found[i] = arg
        if None not in found:
            break
    return found[0] or ResetInfo, found[1] or StepInfo
