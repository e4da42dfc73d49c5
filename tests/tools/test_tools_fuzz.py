"""Property-based tests: the parsers of every tool-call format and the calculator must survive any input."""

from __future__ import annotations

import json
import keyword
import math
import operator
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent_gym.tools import (
    HermesParser,
    ParsedResponse,
    PythonicParser,
    Qwen3CoderParser,
    ToolCallError,
    evaluate_arithmetic,
)
from agent_gym.tools.calculator import MAX_RESULT_DIGITS, CalculatorError

P = HermesParser()

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ----------------------------------------------------------------------------- parser

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_texts = json_values.map(json.dumps)
fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<tool_",
        "call>",
        "{",
        "}",
        "[",
        '"',
        '"name"',
        '"arguments"',
        ":",
        ",",
        "\n",
        '{"name": "calculate", "arguments": {"expression": "1+1"}}',
        '{"name": "f", "arguments": "{}"}',
        '"{\\"a\\": 1}"',
        "null",
        "\\",
        "\x00",
    ]
)
assistant_texts = st.lists(fragments | json_texts | st.text(max_size=20), max_size=25).map("".join)


def _check_parsed(text: str) -> None:
    parsed = P.parse(text)
    # Every opening tag yields exactly one call or error; stray closings add errors.
    assert len(parsed.calls) + len(parsed.errors) >= text.count("<tool_call>")
    assert [c.id for c in parsed.calls] == [f"call_{i}" for i in range(len(parsed.calls))]
    for call in parsed.calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        assert call.raw.startswith("<tool_call>") and call.raw.endswith("</tool_call>")
        assert call.raw in text
    for error in parsed.errors:
        assert isinstance(error, ToolCallError) and error.kind == "malformed" and error.message
        assert error.raw in text
    assert parsed.content == parsed.content.strip()
    assert parsed.has_tool_calls == bool(parsed.calls or parsed.errors)


@FUZZ
@given(st.text())
def test_parser_never_raises_on_arbitrary_text(text: str) -> None:
    _check_parsed(text)


@FUZZ
@given(assistant_texts)
def test_parser_never_raises_on_tag_soup(text: str) -> None:
    _check_parsed(text)


def test_parser_survives_deep_json() -> None:
    parsed = P.parse("<tool_call>" + "[" * 100_000 + "</tool_call>")
    assert parsed.calls == () and len(parsed.errors) == 1


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.text(min_size=1, max_size=20),
            st.dictionaries(st.text(max_size=10), json_values, max_size=4),
        ),
        max_size=5,
    ),
    st.text(max_size=30),
)
def test_format_calls_round_trip(specs: list[tuple[str, dict[str, Any]]], prefix: str) -> None:
    assume("<tool_call>" not in prefix and "</tool_call>" not in prefix)
    text = prefix + "\n" + P.format_calls({"name": n, "arguments": a} for n, a in specs)
    parsed = P.parse(text)
    assert parsed.errors == ()
    assert [(c.name, c.arguments) for c in parsed.calls] == specs
    assert parsed.content == prefix.strip()


# ----------------------------------------------------------------- every tool-call format
#
# The same properties for every format: any text parses without raising or warning, every failure
# is a "malformed" error quoting text it came from, and format_calls round-trips through parse.

FORMAT_FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TYPED_SCHEMA = {
    "type": "function",
    "function": {
        "name": "f",
        "description": "A tool with one argument of each JSON type.",
        "parameters": {
            "type": "object",
            "properties": {
                "s": {"type": "string"},
                "i": {"type": "integer"},
                "n": {"type": "number"},
                "b": {"type": "boolean"},
                "o": {"type": "object"},
                "a": {"type": "array"},
                "u": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            },
        },
    },
}
FORMATS = {
    "hermes": HermesParser([TYPED_SCHEMA]),
    "qwen3_coder": Qwen3CoderParser([TYPED_SCHEMA]),
    "pythonic": PythonicParser([TYPED_SCHEMA]),
}
CALL_LIST_START = re.compile(r"\[\s*[^\W\d][\w.]*\(")  # where pythonic sees a call list begin

format_fragments = st.sampled_from(
    [
        "<tool_call>", "</tool_call>", "<function=", "<function=f>", "</function>", "<parameter=", "<parameter=s>",
        "<parameter=i>", "</parameter>", ">", "<", "=", "\n", " ", "f", "calculate", "[", "]", "(", ")", "{", "}",
        "[f(", "[calculate(", "s=", "i=", ", ", "'", '"', '"' * 3, "'" * 3, "\\", "\\x", "\\N{", "\\u12", "#", "r",
        "b", 'f"', "1", "-2.5", "1if", "True", "null", "None", "x", "...", "**", "\x00", "\ud7ff", "\u00e9",
        "\u2028", "[f(s='x')]",
        "<tool_call>\n<function=f>\n<parameter=i>\n3\n</parameter>\n</function>\n</tool_call>",
    ]
)
format_texts = st.lists(format_fragments | st.text(max_size=12), max_size=40).map("".join)


def _check_format(parser: Any, text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a parse that makes CPython warn would spam every rollout
        parsed = parser.parse(text)
    assert [c.id for c in parsed.calls] == [f"call_{i}" for i in range(len(parsed.calls))]
    for call in parsed.calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        assert call.raw in text
        json.dumps(call.arguments)  # what the env records in the assistant message's tool_calls
    for error in parsed.errors:
        assert isinstance(error, ToolCallError) and error.kind == "malformed" and error.message
        assert error.raw in text
    assert parsed.content == parsed.content.strip()
    assert parsed.has_tool_calls == bool(parsed.calls or parsed.errors)
    if parser.name in ("hermes", "qwen3_coder"):
        assert len(parsed.calls) + len(parsed.errors) >= text.count("<tool_call>")
    if parser.name == "pythonic" and not CALL_LIST_START.search(text):
        assert parsed == ParsedResponse(content=text.strip())


@pytest.mark.parametrize("name", sorted(FORMATS))
@FORMAT_FUZZ
@given(text=st.text() | format_texts)
def test_every_format_survives_any_text(name: str, text: str) -> None:
    _check_format(FORMATS[name], text)


HOSTILE = {
    "deep-json": "<tool_call>" + "[" * 100_000 + "</tool_call>",
    "many-parameters": "<tool_call>\n<function=f>\n" + "<parameter=s>x</parameter>" * 20_000 + "</function></tool_call>",
    "deep-object": "<tool_call><function=f><parameter=o>" + "{" * 100_000 + "</parameter></function></tool_call>",
    "many-opening-tags": "<tool_call>" * 30_000,
    "many-closing-tags": "</tool_call>" * 30_000,
    "deep-list": "[f(" + "[" * 100_000 + ")]",
    "deep-dict": "[f(o=" + "{'a': " * 50_000 + "1" + "}" * 50_000 + ")]",
    "backslashes": "[f(s='" + "\\" * 100_001 + "')]",
    "unclosed-calls": "[f(" * 30_000,
    "unclosed-strings": "[f(s='" * 30_000,
    "unclosed-triple-quote": "[f(s='''" + "x" * 1_000_000,
    "many-lists": "[f(s=1)] " * 2_000,
    "unicode-unterminated": "<tool_call><function=f><parameter=s>" + "\u00e9\u2028\U0001f600\x00" * 50_000,
    "lone-surrogates": "\ud800[f(s='\udfff')]<tool_call>\ud800</tool_call>",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_survives_hostile_input(name: str, case: str) -> None:
    _check_format(FORMATS[name], HOSTILE[case])


def test_hostile_inputs_give_the_expected_errors() -> None:
    q, p = FORMATS["qwen3_coder"], FORMATS["pythonic"]
    assert len(q.parse("<tool_call>" * 1_000).errors) == 1_000
    huge = q.parse("<tool_call><function=f><parameter=s>" + "x" * 1_000_000 + "</parameter></function></tool_call>")
    assert len(huge.calls[0].arguments["s"]) == 1_000_000
    assert [e.message for e in p.parse("[f(" + "[" * 100_000).errors] == ["unterminated call list (missing ])"]
    assert [e.message for e in p.parse("[f(" + "[" * 100_000 + ")]").errors] == [
        "invalid Python in the call list: too many nested parentheses"  # the ")" closes no "[": the list ends there
    ]
    assert [e.message for e in p.parse("[f(s=" + "(" * 300 + "1" + ")" * 300 + ")]").errors] == [
        "invalid Python in the call list: too many nested parentheses"
    ]
    many = p.parse("[f(s=1)] " * 2_000)
    assert len(many.calls) == 2_000 and many.errors == ()


identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(lambda n: not keyword.iskeyword(n))
finite_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@FORMAT_FUZZ
@given(
    st.lists(st.tuples(identifiers, st.dictionaries(identifiers, finite_json, max_size=4)), max_size=4),
    st.text(max_size=30),
)
def test_pythonic_format_calls_round_trip(specs: list[tuple[str, dict[str, Any]]], prefix: str) -> None:
    assume(not CALL_LIST_START.search(prefix))
    parser = FORMATS["pythonic"]
    text = prefix + "\n" + parser.format_calls({"name": n, "arguments": a} for n, a in specs)
    parsed = parser.parse(text)
    assert parsed.errors == ()
    assert [(c.name, c.arguments) for c in parsed.calls] == specs
    assert parsed.content == prefix.strip()


QWEN_UNWRITABLE = ("</parameter>", "<tool_call>", "</tool_call>")
qwen_texts = st.text().filter(lambda v: not any(t in v for t in QWEN_UNWRITABLE))
qwen_names = st.text(
    st.characters(blacklist_characters="<>\n", blacklist_categories=("Cs",)), min_size=1, max_size=10
).filter(lambda n: n == n.strip() and n != "f")
typed_arguments = st.fixed_dictionaries(
    {},
    optional={
        "s": qwen_texts,
        "i": st.integers(-(10**30), 10**30),
        "n": st.floats(allow_nan=False, allow_infinity=False),
        "b": st.booleans(),
        "o": st.dictionaries(st.text(max_size=8), finite_json, max_size=3),
        "a": st.lists(finite_json, max_size=3),
        "u": st.none() | st.integers(),
    },
)


@FORMAT_FUZZ
@given(
    st.lists(typed_arguments, max_size=3),
    st.lists(st.tuples(qwen_names, st.dictionaries(qwen_names, qwen_texts, max_size=3)), max_size=3),
    st.text(max_size=30),
)
def test_qwen3_coder_format_calls_round_trip(
    typed: list[dict[str, Any]], untyped: list[tuple[str, dict[str, str]]], prefix: str
) -> None:
    # Values of tool f are typed by its schema; other (unknown) tools' values stay text.
    assume("<tool_call>" not in prefix and "</tool_call>" not in prefix)
    specs = [("f", a) for a in typed] + untyped
    parser = FORMATS["qwen3_coder"]
    text = prefix + "\n" + parser.format_calls({"name": n, "arguments": a} for n, a in specs)
    parsed = parser.parse(text)
    assert parsed.errors == ()
    assert [(c.name, c.arguments) for c in parsed.calls] == specs
    assert parsed.content == prefix.strip()


# ------------------------------------------------------------------------- calculator


@FUZZ
@given(st.text(max_size=200) | st.text(alphabet="0123456789+-*/%().^ e_jx,'", max_size=60))
def test_calculator_only_raises_calculator_error(text: str) -> None:
    try:
        result = evaluate_arithmetic(text)
    except CalculatorError as exc:
        assert str(exc)
    else:
        assert type(result) in (int, float)
        # Within the limits that bound the work (an unlimited power would give far more digits).
        if type(result) is int:
            assert len(str(abs(result))) <= MAX_RESULT_DIGITS
        else:
            assert math.isfinite(result)


number_word_soup = st.lists(
    st.sampled_from(
        ["1", "0x1", "0b1", "0o7", ".5", "1.", "1e", "2j", "_", "if", "else", "and", "or", "not",
         "in", "is", "for", "f", " ", "+", "(", ")", "'\\d'", "x"]
    ),
    max_size=12,
).map("".join)


@FUZZ
@given(number_word_soup)
def test_calculator_never_warns(text: str) -> None:
    # Parse-time SyntaxWarnings would be printed on every call (log spam during
    # rollouts); the evaluator must refuse such inputs before parsing.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            evaluate_arithmetic(text)
        except CalculatorError:
            pass
    assert [str(w.message) for w in caught] == []


# A generated expression tree, rendered to text and evaluated by a reference
# walker that shares nothing with the implementation under test (no parsing).
Number = Union[int, float]


@dataclass(frozen=True)
class Lit:
    value: Number
    text: str


@dataclass(frozen=True)
class Unary:
    op: str
    operand: Node


@dataclass(frozen=True)
class Bin:
    op: str
    left: Node
    right: Node


Node = Union[Lit, Unary, Bin]

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
}


def render(node: Node) -> str:
    # Fully parenthesised, so the text's meaning is exactly the tree's.
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Unary):
        return f"({node.op}{render(node.operand)})"
    return f"({render(node.left)} {node.op} {render(node.right)})"


class TooBig(Exception):
    """The value would exceed the calculator's documented size limits."""


def reference(node: Node) -> Number:
    if isinstance(node, Lit):
        return node.value
    if isinstance(node, Unary):
        operand = reference(node.operand)
        return -operand if node.op == "-" else +operand
    left, right = reference(node.left), reference(node.right)
    if node.op == "**" and isinstance(left, int) and abs(left).bit_length() * right > 10_000:
        # ~3000 digits: safely below the 4000-digit limit, so anything kept here
        # must evaluate; larger values are skipped rather than re-deriving limits.
        raise TooBig
    value: Number = _OPS[node.op](left, right)
    if isinstance(value, int) and value.bit_length() > 10_000:
        raise TooBig
    return value


def exact(node: Node) -> Fraction:
    """Exact rational value for trees built from + - * / only."""
    if isinstance(node, Lit):
        return Fraction(node.value)
    if isinstance(node, Unary):
        value = exact(node.operand)
        return -value if node.op == "-" else value
    left, right = exact(node.left), exact(node.right)
    if node.op == "+":
        return left + right
    if node.op == "-":
        return left - right
    if node.op == "*":
        return left * right
    return left / right  # ZeroDivisionError propagates, as for the evaluator


literals = st.integers(0, 30).map(lambda i: Lit(i, str(i))) | st.sampled_from(
    [Lit(0.5, ".5"), Lit(2.5, "2.5"), Lit(0.25, "0.25")]
)


def trees(ops: list[str]) -> st.SearchStrategy[Node]:
    def extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        binary = st.builds(Bin, st.sampled_from([op for op in ops if op != "**"]), children, children)
        # Exponents are kept small literals so values stay in a sane range.
        power = st.builds(Bin, st.just("**"), children, st.integers(0, 3).map(lambda i: Lit(i, str(i))))
        unary = st.builds(Unary, st.sampled_from(["-", "+"]), children)
        return binary | unary | (power if "**" in ops else binary)

    return st.recursive(literals, extend, max_leaves=12)


@FUZZ
@given(trees(["+", "-", "*", "/", "//", "%", "**"]))  # "**" only with small literal exponents
def test_calculator_matches_reference_walker(node: Node) -> None:
    try:
        expected = reference(node)
    except TooBig:
        assume(False)
        return
    except ZeroDivisionError:
        try:
            evaluate_arithmetic(render(node))
        except CalculatorError as exc:
            assert str(exc) == "division by zero"
        else:
            raise AssertionError("expected a division-by-zero error")
        return
    except OverflowError:
        assume(False)
        return
    assume(not isinstance(expected, complex))
    assume(not (isinstance(expected, float) and not math.isfinite(expected)))
    result = evaluate_arithmetic(render(node))
    if isinstance(expected, int):
        assert result == expected and type(result) is int
    else:
        assert math.isclose(result, expected, rel_tol=1e-9, abs_tol=1e-12)


@FUZZ
@given(trees(["+", "-", "*", "/"]))
def test_calculator_matches_exact_rational_arithmetic(node: Node) -> None:
    try:
        expected = exact(node)
    except ZeroDivisionError:
        assume(False)
        return
    try:
        result = evaluate_arithmetic(render(node))
    except CalculatorError as exc:
        # Float rounding can turn an exactly non-zero divisor into 0.0.
        assert str(exc) == "division by zero"
        return
    assert math.isclose(result, float(expected), rel_tol=1e-6, abs_tol=1e-9)
