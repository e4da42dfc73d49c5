"""Property-based tests: parsers and the calculator must survive any input."""

from __future__ import annotations

import json
import math
import operator
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent_gym.tools import HermesParser, ToolCallError, evaluate_arithmetic
from agent_gym.tools.calculator import CalculatorError

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


# ------------------------------------------------------------------------- calculator


@FUZZ
@given(st.text(max_size=200) | st.text(alphabet="0123456789+-*/%().^ e_jx,'", max_size=60))
def test_calculator_only_raises_calculator_error(text: str) -> None:
    start = time.perf_counter()
    try:
        result = evaluate_arithmetic(text)
    except CalculatorError as exc:
        assert str(exc)
    else:
        assert type(result) in (int, float)
    assert time.perf_counter() - start < 2.0  # an unlimited power or repeat would take far longer


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
