"""The sandbox as a tool: results become tool messages, failures become counted, typed error kinds."""

from __future__ import annotations

import asyncio

import pytest

from agent_gym.sandbox import Sandbox
from agent_gym.sandbox.tool import PythonTool, SandboxToolExecutor
from agent_gym.tools import HermesParser, ToolCall, ToolExecutor, count_errors


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout_s=1, cpu_s=1, memory_mb=256, output_bytes=500, prefork=2)
    yield sb
    sb.close()


def parsed(*codes: str):
    calls = [ToolCall(id=f"call_{i}", name="python", arguments={"code": c}, raw="") for i, c in enumerate(codes)]
    return HermesParser().parse(HermesParser().format_calls(calls))


def test_kinds_of_every_outcome(sandbox):
    tool = PythonTool(sandbox, stateful=False)
    executor = SandboxToolExecutor([tool])
    results = executor.execute(
        parsed(
            "print(1 + 1)",
            "1 / 0",
            "import time\ntime.sleep(5)",
            "x = bytearray(10 ** 10)",
            "print('y' * 5000)",
            "import socket\nsocket.create_connection(('1.1.1.1', 80))",
            "open('/tmp/x', 'w')",
            "import os\nos.fork()",
        )
    )
    kinds = [r.error_kind for r in results]
    assert kinds == [
        None,
        "sandbox_error",
        "sandbox_timeout",
        "sandbox_memory",
        "sandbox_output_truncated",
        "sandbox_forbidden_network",
        "sandbox_forbidden_file",
        "sandbox_forbidden_fork",
    ]
    assert results[0].content == "2"
    assert results[1].content.endswith("ZeroDivisionError: division by zero")
    assert results[2].content == "TimeoutError: the code ran longer than 1 s"
    assert results[4].content.endswith("... [output truncated at 500 bytes]")
    assert count_errors(results)["sandbox_timeout"] == 1
    assert len(tool.results) == 8


def test_stateful_tool_keeps_one_session_per_episode(sandbox):
    tool = PythonTool(sandbox, stateful=True, files={"in.txt": "7"}, prelude="import math")
    executor = SandboxToolExecutor([tool])
    assert executor.execute(parsed("n = int(open('in.txt').read())"))[0].content == "(no output)"
    assert executor.execute(parsed("math.factorial(n)"))[0].content == "5040"
    tool.new_episode(files={"in.txt": "3"})
    result = executor.execute(parsed("print(n)"))[0]
    assert result.error_kind == "sandbox_error" and "NameError" in result.content
    assert executor.execute(parsed("int(open('in.txt').read())"))[0].content == "3"
    tool.close()


def test_calls_of_one_turn_run_in_order_in_a_session(sandbox):
    tool = PythonTool(sandbox, stateful=True)
    executor = SandboxToolExecutor([tool])
    results = asyncio.run(executor.aexecute(parsed("a = 1", "a += 1", "print(a)")))
    assert [r.content for r in results] == ["(no output)", "(no output)", "2"]
    tool.close()


def test_plain_executor_still_reports_failures_as_tool_errors(sandbox):
    tool = PythonTool(sandbox, stateful=False)
    results = ToolExecutor([tool]).execute(parsed("print('ok')", "raise ValueError('bad')"))
    assert results[0].error_kind is None and results[0].content == "ok"
    assert results[1].error_kind == "exception" and results[1].content.startswith("Error: ")
    assert "ValueError: bad" in results[1].content


def test_invalid_arguments_never_reach_the_sandbox(sandbox):
    tool = PythonTool(sandbox)
    call = ToolCall(id="call_0", name="python", arguments={"source": "1"}, raw="")
    (result,) = SandboxToolExecutor([tool]).execute(HermesParser().parse(HermesParser().format_calls([call])))
    assert result.error_kind == "invalid_arguments" and tool.results == []


def test_schema_and_description(sandbox):
    schema = PythonTool(sandbox, stateful=False).schema()["function"]
    assert schema["name"] == "python" and "fresh interpreter" in schema["description"]
    assert schema["parameters"]["properties"]["code"]["type"] == "string"
    assert "description" not in schema["parameters"]
    assert "persist" in PythonTool(sandbox, stateful=True).description
