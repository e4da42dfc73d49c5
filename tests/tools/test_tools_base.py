"""Tool definition: schema generation, validation, invocation."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Literal

import pydantic
import pytest

from agent_gym.tools import Tool, ToolError, tool


@tool(timeout_s=3)
def search(
    query: str,
    limit: int = 5,
    temperature: float = 0.5,
    lang: Literal["en", "de"] = "en",
    site: str | None = None,
    title: str = "",
) -> str:
    """Search the web
    for pages.

    Returns the top results.

    Args:
        query: What to search for.
        limit: Maximum number of
            results to return.
        lang (str): Result language.
        title: Page title filter.

    Returns:
        Results.
    """
    return f"{query}|{limit}|{temperature}|{lang}|{site}|{title}"


def test_schema_exact() -> None:
    assert search.schema() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web for pages.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "limit": {
                        "type": "integer",
                        "default": 5,
                        "description": "Maximum number of results to return.",
                    },
                    "temperature": {"type": "number", "default": 0.5},
                    "lang": {
                        "type": "string",
                        "enum": ["en", "de"],
                        "default": "en",
                        "description": "Result language.",
                    },
                    "site": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                    # A *property* called "title" survives title stripping.
                    "title": {"type": "string", "default": "", "description": "Page title filter."},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }
    assert search.name == "search"
    assert search.timeout_s == 3.0


def test_schema_is_a_copy() -> None:
    schema = search.schema()
    schema["function"]["parameters"]["properties"].clear()
    assert "query" in search.schema()["function"]["parameters"]["properties"]


def test_no_required_params_still_has_required_list_and_empty_description() -> None:
    @tool
    def ping() -> str:
        return "pong"

    params = ping.schema()["function"]["parameters"]
    assert params == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert ping.schema()["function"]["description"] == ""
    assert ping.timeout_s == 10.0


def test_decorator_overrides_and_no_timeout() -> None:
    @tool(name="add-ints", description="Adds.", timeout_s=None)
    def add(a: int, b: int) -> int:
        """Ignored summary."""
        return a + b

    assert add.name == "add-ints"
    assert add.description == "Adds."
    assert add.timeout_s is None
    assert add(2, 3) == 5  # still callable as plain Python


def test_missing_type_hint_raises() -> None:
    def bad(a: int, b) -> int:  # type: ignore[no-untyped-def]
        return a

    with pytest.raises(TypeError, match=r"tool 'bad': parameter 'b' has no type hint"):
        tool(bad)


def _star_args(*args: int) -> None: ...


def _star_kwargs(**kw: int) -> None: ...


def _positional_only(a: int, /) -> None: ...


def _underscore(_a: int) -> None: ...


@pytest.mark.parametrize(
    ("fn", "pattern"),
    [
        (_star_args, r"parameter '\*args' is not supported"),
        (_star_kwargs, r"parameter '\*\*kw' is not supported"),
        (_positional_only, r"parameter 'a' is positional-only"),
        (_underscore, r"parameter '_a' must not start with an underscore"),
    ],
)
def test_unsupported_parameters_raise(fn: object, pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern):
        tool(fn)  # type: ignore[call-overload]


def test_invalid_name_raises() -> None:
    def f(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="invalid tool name 'has space'"):
        tool(f, name="has space")


def test_validate_rejects_extra_and_wrong_types() -> None:
    assert search.validate({"query": "q"}).model_dump() == {
        "query": "q",
        "limit": 5,
        "temperature": 0.5,
        "lang": "en",
        "site": None,
        "title": "",
    }
    with pytest.raises(pydantic.ValidationError) as info:
        search.validate({"query": "q", "lang": "fr", "bogus": 1})
    locs = sorted(tuple(e["loc"]) for e in info.value.errors())
    assert locs == [("bogus",), ("lang",)]


def test_acall_sync_runs_off_loop_thread_and_converts() -> None:
    seen: list[str] = []

    @tool
    def where(n: int) -> dict[str, object]:
        seen.append(threading.current_thread().name)
        return {"n": n, "list": [1, "ü"]}

    async def main() -> str:
        return await where.acall({"n": "7"})  # lax validation coerces "7"

    assert asyncio.run(main()) == '{"n": 7, "list": [1, "ü"]}'
    assert seen and seen[0] != threading.main_thread().name


def test_acall_async_and_plain_str() -> None:
    @tool
    async def double(x: float) -> float:
        await asyncio.sleep(0)
        return x * 2

    assert asyncio.run(double.acall({"x": 1.25})) == "2.5"
    assert asyncio.run(search.acall({"query": "a", "limit": 2})) == "a|2|0.5|en|None|"


def test_acall_propagates_validation_and_tool_errors() -> None:
    @tool
    def boom(x: int) -> int:
        raise ToolError("nope")

    with pytest.raises(pydantic.ValidationError):
        asyncio.run(boom.acall({}))
    with pytest.raises(ToolError, match="nope"):
        asyncio.run(boom.acall({"x": 1}))


class EchoArgs(pydantic.BaseModel):
    """Arguments of echo."""

    text: str = pydantic.Field(description="Text to echo.")
    times: int = 1


class Echo(Tool):
    name = "echo"
    description = "Echo text."
    args_model = EchoArgs
    timeout_s = 1.5

    async def run(self, text: str, times: int) -> str:  # type: ignore[override]
        return text * times


def test_class_based_tool() -> None:
    echo = Echo()
    assert echo.timeout_s == 1.5
    assert echo.schema() == {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo text.",
            "parameters": {
                "type": "object",
                "description": "Arguments of echo.",
                "properties": {
                    "text": {"type": "string", "description": "Text to echo."},
                    "times": {"type": "integer", "default": 1},
                },
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    }
    assert asyncio.run(echo.acall({"text": "ab", "times": 2})) == "abab"
    # The model ignores extras by default, but a tool must match its schema.
    with pytest.raises(pydantic.ValidationError):
        echo.validate({"text": "a", "extra": 1})
    assert isinstance(echo.validate({"text": "a"}), EchoArgs)


def test_explicit_constructor_and_nested_model_titles_stripped() -> None:
    class Point(pydantic.BaseModel):
        x: int
        y: int

    class Args(pydantic.BaseModel):
        points: list[Point]

    def total(points: list[Point]) -> int:
        # Nested values arrive as model instances, not dicts.
        return sum(p.x + p.y for p in points)

    t = Tool(name="total", description="Sum.", args_model=Args, fn=total, timeout_s=None)
    params = t.schema()["function"]["parameters"]
    assert "title" not in json.dumps(params)
    assert params["properties"]["points"] == {"type": "array", "items": {"$ref": "#/$defs/Point"}}
    assert asyncio.run(t.acall({"points": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]})) == "10"


def test_tool_without_fn_or_run_raises() -> None:
    with pytest.raises(TypeError, match="override the run"):
        Tool(name="x", description="", args_model=EchoArgs)
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        Tool(name="x", description="", args_model=EchoArgs, fn=print, timeout_s=0)


def test_import_does_not_pull_in_torch() -> None:
    # A fresh interpreter, because this test process may have imported torch elsewhere.
    code = (
        "import sys, agent_gym.tools; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')); "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],  # the checkout, so agent_gym is importable
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"
