"""ToolExecutor: error reporting, timeouts, concurrency, truncation."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from agent_gym.tools import (
    HermesParser,
    ParsedResponse,
    ToolCall,
    ToolError,
    ToolExecutor,
    ToolResult,
    calculator,
    tool,
)
from agent_gym.tools.executor import ERROR_KINDS, count_errors

P = HermesParser()


def calls(*specs: tuple[str, dict[str, Any]]) -> ParsedResponse:
    """A parsed response made of well-formed calls, via the real parser."""
    return P.parse(P.format_calls({"name": n, "arguments": a} for n, a in specs))


@tool(timeout_s=2)
def fail(kind: str) -> str:
    """Raise the requested kind of error."""
    if kind == "zero":
        return str(1 / 0)
    if kind == "tool":
        raise ToolError("the input was bad")
    if kind == "timeout":
        raise TimeoutError("upstream timed out")  # the tool's own, not the executor's
    if kind == "empty":
        raise RuntimeError()
    if kind == "exit":
        raise SystemExit(3)
    return "fine"


class Slow:
    """What the slow tools did, in order; ``release`` lets a blocked ``slow_sync`` return."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.events: list[str] = []
        self.release = threading.Event()
        self.done = threading.Event()


SLOW = Slow()


@tool(timeout_s=0.1)
def slow_sync(seconds: float) -> str:
    SLOW.events.append("started")
    SLOW.events.append("released" if SLOW.release.wait(seconds) else "gave up")
    SLOW.done.set()
    return "late"


@tool(timeout_s=0.1)
async def slow_async(seconds: float) -> str:
    SLOW.events.append("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        SLOW.events.append("cancelled")
        raise
    SLOW.events.append("finished")
    return "late"


@tool
async def nap(tag: str) -> str:
    await asyncio.sleep(0.4)
    return tag


@tool
def big(n: int) -> str:
    return "x" * n


EX = ToolExecutor([calculator, fail, slow_sync, slow_async, nap, big])
SMALL = ToolExecutor([big], max_output_chars=50)


def test_success() -> None:
    (result,) = EX.execute(calls(("calculate", {"expression": "2**10"})))
    assert result == ToolResult(call_id="call_0", name="calculate", content="1024", error_kind=None)
    assert result.ok and not result.truncated


def test_unknown_tool() -> None:
    executor = ToolExecutor([calculator])
    (result,) = executor.execute(calls(("foo", {})))
    assert result == ToolResult(
        call_id="call_0",
        name="foo",
        content="Error: unknown tool 'foo'. Available tools: calculate.",
        error_kind="unknown_tool",
    )
    assert not result.ok


def test_invalid_arguments_exact_message() -> None:
    missing, extra_and_type = EX.execute(
        calls(("calculate", {}), ("calculate", {"expression": 5, "precision": 2}))
    )
    assert missing.content == "Error: invalid arguments for 'calculate': expression: Field required"
    assert missing.error_kind == "invalid_arguments"
    assert extra_and_type.content == (
        "Error: invalid arguments for 'calculate': expression: Input should be a valid string; "
        "precision: Extra inputs are not permitted"
    )


def test_exceptions_become_messages() -> None:
    results = EX.execute(
        calls(
            ("fail", {"kind": "zero"}),
            ("fail", {"kind": "tool"}),
            ("fail", {"kind": "timeout"}),
            ("fail", {"kind": "empty"}),
            ("fail", {"kind": "exit"}),
            ("calculate", {"expression": "1/0"}),
        )
    )
    assert [(r.content, r.error_kind) for r in results] == [
        ("Error: tool 'fail' raised ZeroDivisionError: division by zero", "exception"),
        ("Error: the input was bad", "exception"),
        ("Error: tool 'fail' raised TimeoutError: upstream timed out", "exception"),
        ("Error: tool 'fail' raised RuntimeError", "exception"),
        ("Error: tool 'fail' raised SystemExit: 3", "exception"),
        ("Error: division by zero", "exception"),
    ]


def test_a_tool_error_with_a_kind_is_counted_under_it() -> None:
    class Refused(Exception):  # an opted-in exception class with a kind of its own
        user_message = True
        kind = "policy"

    class Loud(Exception):  # a kind attribute on an exception that did not opt in is not taken
        kind = "ignored"

    @tool
    def search(query: str) -> str:
        if not query:
            raise ToolError("give a non-empty query", kind="empty_query")
        raise Refused("not allowed")

    @tool
    async def loud() -> str:
        raise Loud("boom")

    results = ToolExecutor([search, loud]).execute(calls(("search", {"query": ""}), ("search", {"query": "x"}), ("loud", {})))
    assert [(r.content, r.error_kind) for r in results] == [
        ("Error: give a non-empty query", "empty_query"),
        ("Error: not allowed", "policy"),
        ("Error: tool 'loud' raised Loud: boom", "exception"),
    ]
    assert ToolError("plain").kind is None


def test_user_message_attribute_opt_in() -> None:
    class Friendly(Exception):
        user_message = True

    @tool
    def f() -> str:
        raise Friendly("try a smaller number")

    (result,) = ToolExecutor([f]).execute(calls(("f", {})))
    assert result.content == "Error: try a smaller number"


@pytest.mark.parametrize("name", ["slow_sync", "slow_async"])
def test_timeout(name: str) -> None:
    SLOW.reset()
    (result,) = EX.execute(calls((name, {"seconds": 30.0})))
    assert result == ToolResult(
        call_id="call_0",
        name=name,
        content=f"Error: tool '{name}' timed out after 0.1 s",
        error_kind="timeout",
    )
    if name == "slow_sync":
        # execute() returned while the tool's thread still waits: it did not join the thread (as
        # asyncio.run does with default-executor threads on shutdown), which would have taken 30 s.
        assert SLOW.events == ["started"]
        SLOW.release.set()
        assert SLOW.done.wait(30)  # the abandoned thread still finishes, its result discarded
        assert SLOW.events == ["started", "released"]
    else:
        assert SLOW.events == ["started", "cancelled"]


class Rendezvous:
    """Calls that each wait until ``parties`` of them run at once: they all return only if they ran
    concurrently (one after another, the first waits ``timeout_s`` for the others and fails)."""

    def __init__(self, parties: int, timeout_s: float = 5.0) -> None:
        self.parties, self.timeout_s = parties, timeout_s
        self.lock = threading.Lock()
        self.running = self.peak = 0

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)

    def exit(self) -> None:
        with self.lock:
            self.running -= 1


def test_async_tool_and_concurrency() -> None:
    meet = Rendezvous(3)
    all_in: list[asyncio.Event] = []  # made on the executor's loop by the first call

    @tool
    async def nap_together(tag: str) -> str:
        if not all_in:
            all_in.append(asyncio.Event())
        meet.enter()
        try:
            if meet.running == meet.parties:
                all_in[0].set()
            await asyncio.wait_for(all_in[0].wait(), meet.timeout_s)
            return tag
        finally:
            meet.exit()

    results = ToolExecutor([nap_together]).execute(calls(*(("nap_together", {"tag": t}) for t in "abc")))
    assert [(r.call_id, r.content) for r in results] == [
        ("call_0", "a"),
        ("call_1", "b"),
        ("call_2", "c"),
    ]
    assert (meet.peak, meet.running) == (3, 0)


def test_sync_tools_run_concurrently_in_threads() -> None:
    meet = Rendezvous(3)
    barrier = threading.Barrier(meet.parties, timeout=meet.timeout_s)

    @tool
    def sync_nap_together(tag: str) -> str:
        meet.enter()
        try:
            barrier.wait()  # BrokenBarrierError unless all three threads are here at once
            return tag
        finally:
            meet.exit()

    results = ToolExecutor([sync_nap_together]).execute(calls(*(("sync_nap_together", {"tag": t}) for t in "abc")))
    assert [r.content for r in results] == ["a", "b", "c"]
    assert (meet.peak, meet.running) == (3, 0)


def test_truncation_marker() -> None:
    (short, exact, long) = SMALL.execute(
        calls(("big", {"n": 10}), ("big", {"n": 50}), ("big", {"n": 123}))
    )
    assert (short.content, short.truncated) == ("x" * 10, False)
    assert (exact.content, exact.truncated) == ("x" * 50, False)
    assert long.content == "x" * 50 + "\n... [truncated 73 characters]"
    assert long.truncated and long.ok  # truncation is not an error


def test_too_many_calls() -> None:
    executor = ToolExecutor([calculator], max_calls_per_turn=8)
    results = executor.execute(calls(*(("calculate", {"expression": f"{i}+1"}) for i in range(9))))
    assert [r.content for r in results[:8]] == [str(i + 1) for i in range(8)]
    assert results[8] == ToolResult(
        call_id="call_8",
        name="calculate",
        content="Error: too many tool calls in one turn (9 > 8); only the first 8 were executed.",
        error_kind="too_many_calls",
    )


def test_malformed_calls_are_reported_after_calls() -> None:
    parsed = P.parse(
        '<tool_call>{bad}</tool_call><tool_call>{"name": "calculate", "arguments": '
        '{"expression": "3*3"}}</tool_call><tool_call>'
    )
    results = EX.execute(parsed)
    assert [(r.call_id, r.name, r.content, r.error_kind) for r in results] == [
        ("call_0", "calculate", "9", None),
        (
            "malformed_0",
            "",
            "Error: malformed tool call: invalid JSON in <tool_call> block: "
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
            "malformed",
        ),
        (
            "malformed_1",
            "",
            "Error: malformed tool call: unterminated <tool_call> block (missing </tool_call>)",
            "malformed",
        ),
    ]
    assert count_errors(results) == {
        "malformed": 2,
        "unknown_tool": 0,
        "invalid_arguments": 0,
        "exception": 0,
        "timeout": 0,
        "too_many_calls": 0,
    }
    assert set(count_errors([])) == set(ERROR_KINDS)


def test_no_calls_gives_no_results() -> None:
    assert EX.execute(ParsedResponse(content="hi")) == []


def test_execute_inside_running_event_loop() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    @tool
    def read_marker() -> str:
        return marker.get()

    executor = ToolExecutor([read_marker, calculator])

    async def main() -> list[ToolResult]:
        marker.set("from caller")
        return executor.execute(calls(("read_marker", {}), ("calculate", {"expression": "6*7"})))

    results = asyncio.run(main())
    assert [r.content for r in results] == ["from caller", "42"]


def test_aexecute_direct() -> None:
    async def main() -> list[ToolResult]:
        return await EX.aexecute(calls(("nap", {"tag": "z"}), ("calculate", {"expression": "1+1"})))

    assert [r.content for r in asyncio.run(main())] == ["z", "2"]


def test_cancellation_propagates() -> None:
    async def main() -> None:
        task = asyncio.ensure_future(EX.aexecute(calls(("nap", {"tag": "a"}))))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'calculate'"):
        ToolExecutor([calculator, calculator])
    with pytest.raises(ValueError, match="max_calls_per_turn"):
        ToolExecutor([calculator], max_calls_per_turn=0)
    assert ToolExecutor([calculator]).schemas() == [calculator.schema()]


def test_direct_toolcall_objects_without_parser() -> None:
    parsed = ParsedResponse(
        content="",
        calls=(ToolCall(id="x1", name="calculate", arguments={"expression": "2*3"}, raw=""),),
    )
    (result,) = EX.execute(parsed)
    assert (result.call_id, result.content) == ("x1", "6")


def test_inline_tools_run_in_the_calling_thread_without_an_event_loop():
    import threading

    from agent_gym.tools import HermesParser, Tool, ToolExecutor, tool

    seen: list[int] = []

    @tool(inline=True)
    def where(x: int) -> int:
        """Record the thread."""
        seen.append(threading.get_ident())
        if x < 0:
            raise ValueError("negative")
        return x * 2

    executor = ToolExecutor([where])
    text = '<tool_call>\n{"name": "where", "arguments": {"x": 4}}\n</tool_call><tool_call>\n{"name": "where", "arguments": {"x": -1}}\n</tool_call>'
    results = executor.execute(HermesParser().parse(text))
    assert [r.content for r in results] == ["8", "Error: tool 'where' raised ValueError: negative"]
    assert [r.error_kind for r in results] == [None, "exception"]
    assert seen == [threading.get_ident()] * 2
    with pytest.raises(ValueError, match="inline=True is for sync functions"):

        async def coro(x: int) -> int:
            return x

        Tool(name="c", description="", args_model=where.args_model, fn=coro, inline=True)
