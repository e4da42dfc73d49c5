"""Hermes tool-call parsing."""

from __future__ import annotations

from typing import Any

import pytest

from agent_gym.tools import HermesParser, ParsedResponse, ToolCall, ToolCallError, get_parser
from agent_gym.tools.formats import PARSERS
from agent_gym.tools.parsing import ToolCallParser
from agent_gym.tools.pythonic import PythonicParser
from agent_gym.tools.qwen3_coder import Qwen3CoderParser

P = HermesParser()

CALC_BLOCK = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+2"}}\n</tool_call>'


def test_single_call() -> None:
    text = f"Let me compute.\n{CALC_BLOCK}"
    parsed = P.parse(text)
    assert parsed == ParsedResponse(
        content="Let me compute.",
        calls=(
            ToolCall(id="call_0", name="calculate", arguments={"expression": "2+2"}, raw=CALC_BLOCK),
        ),
        errors=(),
    )
    assert parsed.has_tool_calls


def test_two_parallel_calls_keep_order_and_ids() -> None:
    text = (
        'A <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> B\n'
        '<tool_call>{"name": "g", "arguments": {}}</tool_call>\n C '
    )
    parsed = P.parse(text)
    assert [(c.id, c.name, c.arguments) for c in parsed.calls] == [
        ("call_0", "f", {"x": 1}),
        ("call_1", "g", {}),
    ]
    assert parsed.calls[1].raw == '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    assert parsed.content == "A  B\n\n C"
    assert parsed.errors == ()


def test_plain_text_has_no_tool_calls() -> None:
    parsed = P.parse("  The answer is 4.  ")
    assert parsed == ParsedResponse(content="The answer is 4.", calls=(), errors=())
    assert not parsed.has_tool_calls


def test_malformed_json_message() -> None:
    raw = '<tool_call>{"name": "f" "arguments": {}}</tool_call>'
    parsed = P.parse("x " + raw)
    assert parsed.calls == ()
    assert parsed.content == "x"
    assert parsed.errors == (
        ToolCallError(
            raw=raw,
            kind="malformed",
            message="invalid JSON in <tool_call> block: Expecting ',' delimiter: line 1 column 14 (char 13)",
        ),
    )
    assert parsed.has_tool_calls  # an attempt, even though it failed


def test_bad_call_does_not_shift_ids_of_good_calls() -> None:
    parsed = P.parse(f"<tool_call>oops</tool_call>{CALC_BLOCK}")
    assert [c.id for c in parsed.calls] == ["call_0"]
    assert len(parsed.errors) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "empty <tool_call> block"),
        ("[1, 2]", 'tool call must be a JSON object like {"name": ..., "arguments": {...}}, got array'),
        ('{"arguments": {}}', "tool call is missing the 'name' field"),
        ('{"name": 3, "arguments": {}}', "'name' must be a non-empty string, got number"),
        ('{"name": "", "arguments": {}}', "'name' must be a non-empty string, got string"),
        ('{"name": "f", "arguments": [1]}', "'arguments' for 'f' must be a JSON object, got array"),
        ('{"name": "f", "arguments": null}', "'arguments' for 'f' must be a JSON object, got null"),
        (
            '{"name": "f", "arguments": "[1]"}',
            "'arguments' for 'f' must be a JSON object, got a string containing array",
        ),
        (
            '{"name": "f", "arguments": "{x"}',
            "'arguments' for 'f' is a string that is not valid JSON: "
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
    ],
)
def test_structural_errors(body: str, message: str) -> None:
    parsed = P.parse(f"<tool_call>{body}</tool_call>")
    assert parsed.calls == ()
    assert [(e.kind, e.message) for e in parsed.errors] == [("malformed", message)]


def test_arguments_as_json_string_and_missing_arguments() -> None:
    parsed = P.parse(
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}</tool_call>'
        '<tool_call>{"name": "g"}</tool_call>'
    )
    assert parsed.errors == ()
    assert [(c.name, c.arguments) for c in parsed.calls] == [("f", {"x": [1, 2]}), ("g", {})]


def test_raw_newline_inside_json_string_is_accepted() -> None:
    parsed = P.parse('<tool_call>{"name": "py", "arguments": {"code": "a = 1\nprint(a)"}}</tool_call>')
    assert parsed.calls[0].arguments == {"code": "a = 1\nprint(a)"}


def test_unterminated_block() -> None:
    text = f'{CALC_BLOCK}\nThen <tool_call>{{"name": "f", "arguments": {{}}}}'
    parsed = P.parse(text)
    assert [c.name for c in parsed.calls] == ["calculate"]
    assert parsed.errors == (
        ToolCallError(
            raw='<tool_call>{"name": "f", "arguments": {}}',
            kind="malformed",
            message="unterminated <tool_call> block (missing </tool_call>)",
        ),
    )
    assert parsed.content == "Then"


def test_new_opening_tag_ends_unterminated_block() -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}\n' + CALC_BLOCK
    parsed = P.parse(text)
    assert [c.name for c in parsed.calls] == ["calculate"]
    assert parsed.calls[0].id == "call_0"
    assert [e.message for e in parsed.errors] == [
        "unterminated <tool_call> block (missing </tool_call>)"
    ]
    assert parsed.errors[0].raw == '<tool_call>{"name": "f", "arguments": {}}\n'


def test_stray_closing_tag_is_malformed_and_removed() -> None:
    parsed = P.parse("Done.</tool_call> Bye")
    assert parsed.content == "Done. Bye"
    assert parsed.calls == ()
    assert parsed.errors == (
        ToolCallError(
            raw="</tool_call>",
            kind="malformed",
            message="stray </tool_call> without a matching <tool_call>",
        ),
    )


def test_format_calls_round_trip() -> None:
    calls: list[ToolCall | dict[str, Any]] = [
        {"name": "calculate", "arguments": {"expression": "1 < 2 </tool_call> <tool_call>"}},
        ToolCall(id="ignored", name="search", arguments={"q": "ü\n\"x\"", "n": [1, 2.5, None]}, raw=""),
    ]
    text = P.format_calls(calls)
    assert text.startswith('<tool_call>\n{"name": "calculate", "arguments": {"expression": "1 < 2 ')
    assert text.count("<tool_call>") == 2 and text.count("</tool_call>") == 2
    parsed = P.parse(text)
    assert parsed.errors == ()
    assert parsed.content == ""
    assert [(c.id, c.name, c.arguments) for c in parsed.calls] == [
        ("call_0", "calculate", {"expression": "1 < 2 </tool_call> <tool_call>"}),
        ("call_1", "search", {"q": "ü\n\"x\"", "n": [1, 2.5, None]}),
    ]


def test_format_single_call_exact() -> None:
    assert P.format_calls([{"name": "calculate", "arguments": {"expression": "2+2"}}]) == CALC_BLOCK


def test_registry() -> None:
    parser = get_parser("hermes")
    assert isinstance(parser, HermesParser)
    assert isinstance(parser, ToolCallParser)
    assert PARSERS == {"hermes": HermesParser, "qwen3_coder": Qwen3CoderParser, "pythonic": PythonicParser}
    with pytest.raises(ValueError, match=r"^unknown tool-call format 'xml'; known: hermes, pythonic, qwen3_coder$"):
        get_parser("xml")
