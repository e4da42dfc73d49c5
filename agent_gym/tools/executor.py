"""Executing parsed tool calls and turning every outcome into text for the policy.

The executor is the boundary between untrusted policy output and tool code:
whatever the policy wrote and whatever the tools do, :meth:`ToolExecutor.aexecute`
returns one :class:`ToolResult` per attempted call and never raises (except for
cancellation of the caller itself), so an environment's ``step`` cannot be
crashed by a bad action.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from agent_gym.tools.base import Tool
from agent_gym.tools.parsing import ParsedResponse, ToolCall, ToolCallError

__all__ = ["ERROR_KINDS", "ToolExecutor", "ToolResult", "count_errors"]

#: Every value :attr:`ToolResult.error_kind` can take besides ``None``.
ERROR_KINDS: tuple[str, ...] = (
    "malformed",  # the call text could not be parsed
    "unknown_tool",  # parsed, but no tool has that name
    "invalid_arguments",  # arguments failed the tool's pydantic model
    "exception",  # the tool raised (a ToolError with a kind of its own counts under that kind)
    "timeout",  # the tool exceeded its timeout_s
    "too_many_calls",  # beyond max_calls_per_turn; not executed
)

# Cap on how many pydantic errors are spelled out, so one wildly wrong call
# does not flood the context window.
_MAX_LISTED_VALIDATION_ERRORS = 5


@dataclass(frozen=True)
class ToolResult:
    """Outcome of one attempted tool call.

    Attributes:
        call_id: The call's id (``call_N``), or ``malformed_N`` for parse errors.
        name: Tool name as written by the policy (``""`` if it could not be parsed).
        content: Text for the policy: the tool output, or an ``"Error: ..."`` message.
        error_kind: ``None`` on success, otherwise one of :data:`ERROR_KINDS`.
        truncated: Whether ``content`` was cut to ``max_output_chars`` (not an error).
    """

    call_id: str
    name: str
    content: str
    error_kind: str | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """True if the tool ran and returned normally."""
        return self.error_kind is None


def count_errors(results: Iterable[ToolResult]) -> dict[str, int]:
    """Count results per error kind.

    Every kind in :data:`ERROR_KINDS` is present (zero if unseen) so the dict can
    be logged as metrics with stable keys; an unexpected kind is counted too.
    """
    counts = dict.fromkeys(ERROR_KINDS, 0)
    for result in results:
        if result.error_kind is not None:
            counts[result.error_kind] = counts.get(result.error_kind, 0) + 1
    return counts


def _format_loc(loc: tuple[int | str, ...]) -> str:
    """('items', 0, 'x') -> 'items[0].x'."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def summarize_validation_error(error: pydantic.ValidationError) -> str:
    """Compact ``loc: msg; loc: msg`` summary of a pydantic error for the policy."""
    parts = []
    details = error.errors(include_url=False, include_input=False)
    for detail in details[:_MAX_LISTED_VALIDATION_ERRORS]:
        loc = _format_loc(tuple(detail.get("loc", ())))
        msg = detail.get("msg", "invalid value")
        parts.append(f"{loc}: {msg}" if loc else msg)
    hidden = len(details) - _MAX_LISTED_VALIDATION_ERRORS
    if hidden > 0:
        parts.append(f"and {hidden} more error{'s' if hidden > 1 else ''}")
    return "; ".join(parts)


def _error_kind(exc: BaseException) -> str:
    """The error kind a tool's exception counts as: the ``kind`` of a :class:`~agent_gym.tools.ToolError`
    (or an opted-in exception) when it names one, else ``"exception"``."""
    kind = getattr(exc, "kind", None) if getattr(type(exc), "user_message", False) is True else None
    return kind if isinstance(kind, str) and kind else "exception"


def _describe_exception(tool_name: str, exc: BaseException) -> str:
    if getattr(type(exc), "user_message", False) is True:
        # ToolError and opted-in exceptions already speak to the policy.
        message = str(exc)
        return f"Error: {message}" if message else f"Error: tool {tool_name!r} failed"
    message = str(exc)
    head = f"Error: tool {tool_name!r} raised {type(exc).__name__}"
    return f"{head}: {message}" if message else head


class _Outcome:
    """What a tool invocation produced, kept apart from the timeout mechanism.

    Tool exceptions are captured *inside* the coroutine that ``wait_for`` guards,
    so a tool that itself raises ``TimeoutError`` is reported as an exception,
    not confused with the executor's own timeout.
    """

    __slots__ = ("error", "text")

    def __init__(self, text: str | None = None, error: BaseException | None = None) -> None:
        self.text = text
        self.error = error


class ToolExecutor:
    """Runs the tool calls of one assistant turn.

    Args:
        tools: The tools available to the policy; names must be unique.
        max_output_chars: Longer outputs (and error messages) are cut to this
            many characters followed by ``"\\n... [truncated N characters]"``.
        max_calls_per_turn: Calls beyond this many in one turn are not executed
            and get a ``"too_many_calls"`` error result.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        max_output_chars: int = 4000,
        max_calls_per_turn: int = 8,
    ) -> None:
        if max_output_chars < 0:
            raise ValueError("max_output_chars must be >= 0")
        if max_calls_per_turn < 1:
            raise ValueError("max_calls_per_turn must be >= 1")
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(f"expected Tool instances, got {t!r}")
            if t.name in self._tools:
                raise ValueError(f"duplicate tool name {t.name!r}")
            self._tools[t.name] = t
        self.max_output_chars = max_output_chars
        self.max_calls_per_turn = max_calls_per_turn

    @property
    def tools(self) -> dict[str, Tool]:
        """Tools by name, in registration order (a copy)."""
        return dict(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of all tools, e.g. for a chat template's ``tools=``."""
        return [t.schema() for t in self._tools.values()]

    async def aexecute(self, parsed: ParsedResponse) -> list[ToolResult]:
        """Execute all calls of a turn concurrently.

        Results come back in call order, followed by one result per malformed
        call in ``parsed.errors``.  Every failure is reported as a result; only
        ``asyncio.CancelledError`` (and ``KeyboardInterrupt``) propagate.
        """
        calls = list(parsed.calls)
        allowed = calls[: self.max_calls_per_turn]
        results = list(await asyncio.gather(*(self._execute_one(call) for call in allowed)))
        return self._finish(calls, results, parsed)

    def _finish(self, calls: list[ToolCall], results: list[ToolResult], parsed: ParsedResponse) -> list[ToolResult]:
        """Append the errors for calls over the limit and for malformed calls."""
        for call in calls[self.max_calls_per_turn :]:
            results.append(
                self._result(
                    call.id,
                    call.name,
                    f"Error: too many tool calls in one turn ({len(calls)} > "
                    f"{self.max_calls_per_turn}); only the first {self.max_calls_per_turn} "
                    "were executed.",
                    "too_many_calls",
                )
            )
        results.extend(self._malformed(i, error) for i, error in enumerate(parsed.errors))
        return results

    def execute(self, parsed: ParsedResponse) -> list[ToolResult]:
        """Synchronous :meth:`aexecute`, usable with or without a running event loop.

        Without a running loop in this thread it simply uses ``asyncio.run``.
        Inside a running loop (e.g. a sync ``step`` called from async code) a
        nested ``asyncio.run`` is impossible, so the coroutine runs on a fresh
        loop in a helper thread; note this blocks the calling loop until done,
        so async callers should prefer ``await aexecute(...)``.
        """
        calls = list(parsed.calls)
        if all(self._tools.get(c.name) is None or self._tools[c.name].inline for c in calls[: self.max_calls_per_turn]):
            # Only inline tools and errors: no event loop and no thread needed at all.
            quick = [self._execute_sync(c) for c in calls[: self.max_calls_per_turn]]
            if all(r is not None for r in quick):
                return self._finish(calls, [r for r in quick if r is not None], parsed)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.aexecute(parsed))
        context = contextvars.copy_context()
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="tool-executor"
        ) as pool:
            # The coroutine is created inside the helper thread so that nothing
            # is left un-awaited if submission fails.
            future = pool.submit(context.run, lambda: asyncio.run(self.aexecute(parsed)))
            return future.result()

    # ------------------------------------------------------------------ internals

    def _result(
        self, call_id: str, name: str, content: str, error_kind: str | None
    ) -> ToolResult:
        truncated = len(content) > self.max_output_chars
        if truncated:
            dropped = len(content) - self.max_output_chars
            content = (
                content[: self.max_output_chars] + f"\n... [truncated {dropped} characters]"
            )
        return ToolResult(
            call_id=call_id, name=name, content=content, error_kind=error_kind, truncated=truncated
        )

    def _malformed(self, index: int, error: ToolCallError) -> ToolResult:
        return self._result(
            f"malformed_{index}",
            "",
            f"Error: malformed tool call: {error.message}",
            error.kind or "malformed",
        )

    async def _execute_one(self, call: ToolCall) -> ToolResult:
        try:
            return await self._execute_checked(call)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - last-resort guard, see module docstring
            # Only reachable through a bug in the executor itself (tool errors are
            # handled below); still a result rather than a crashed environment.
            return self._result(
                call.id, call.name, f"Error: internal error running tool {call.name!r}: {exc!r}",
                "exception",
            )

    def _prepare(self, call: ToolCall) -> ToolResult | tuple[Tool, pydantic.BaseModel]:
        """The tool and validated arguments of a call, or the error result that replaces it."""
        t = self._tools.get(call.name)
        if t is None:
            available = ", ".join(self._tools) or "none"
            return self._result(
                call.id,
                call.name,
                f"Error: unknown tool {call.name!r}. Available tools: {available}.",
                "unknown_tool",
            )
        try:
            args = t.validate(call.arguments)
        except pydantic.ValidationError as exc:
            return self._result(
                call.id,
                call.name,
                f"Error: invalid arguments for {call.name!r}: {summarize_validation_error(exc)}",
                "invalid_arguments",
            )
        return t, args

    def _run_inline(self, call: ToolCall, t: Tool, args: pydantic.BaseModel) -> ToolResult:
        try:
            text = t.invoke_inline(args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - a tool error is a message to the policy
            return self._result(call.id, call.name, _describe_exception(call.name, exc), _error_kind(exc))
        return self._result(call.id, call.name, text, None)

    def _execute_sync(self, call: ToolCall) -> ToolResult | None:
        """The result of a call that needs no event loop (errors, inline tools); else ``None``."""
        prepared = self._prepare(call)
        if isinstance(prepared, ToolResult):
            return prepared
        t, args = prepared
        return self._run_inline(call, t, args) if t.inline else None

    async def _execute_checked(self, call: ToolCall) -> ToolResult:
        prepared = self._prepare(call)
        if isinstance(prepared, ToolResult):
            return prepared
        t, args = prepared
        if t.inline:
            return self._run_inline(call, t, args)
        invocation = self._invoke(t, args)
        timeout = t.timeout_s
        if timeout is None:
            outcome = await invocation
        else:
            try:
                outcome = await asyncio.wait_for(invocation, timeout=timeout)
            except asyncio.TimeoutError:
                # Only the executor's own deadline lands here: tool exceptions
                # (including a tool's TimeoutError) are captured by _invoke.
                return self._result(
                    call.id,
                    call.name,
                    f"Error: tool {call.name!r} timed out after {float(timeout)} s",
                    "timeout",
                )
        if outcome.error is not None:
            return self._result(
                call.id, call.name, _describe_exception(call.name, outcome.error), _error_kind(outcome.error)
            )
        return self._result(call.id, call.name, outcome.text or "", None)

    @staticmethod
    async def _invoke(t: Tool, args: pydantic.BaseModel) -> _Outcome:
        try:
            return _Outcome(text=await t.ainvoke(args))
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - includes SystemExit from tool code
            return _Outcome(error=exc)
