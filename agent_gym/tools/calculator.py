"""A safe arithmetic calculator tool.

The expression comes straight from the policy, so it is treated as hostile:
it is parsed with :func:`ast.parse` and evaluated by walking the tree with an
explicit whitelist.  Nothing is ever compiled or passed to ``eval``/``exec``.
Besides forbidding names, calls, attributes and the like, the evaluator bounds
the *cost* of allowed arithmetic (``9**9**9`` is syntactically innocent), so a
single call always finishes in milliseconds.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Union

from agent_gym.tools.base import Tool, ToolError, tool

__all__ = [
    "CalculatorError",
    "MAX_EXPRESSION_CHARS",
    "MAX_EXPONENT",
    "MAX_NESTING_DEPTH",
    "MAX_RESULT_DIGITS",
    "calculate",
    "calculator",
    "evaluate_arithmetic",
    "evaluate_exact",
    "format_number",
]

Number = Union[int, float, Fraction]

#: Longest accepted expression, in characters.
MAX_EXPRESSION_CHARS = 1000
#: Deepest accepted parenthesis nesting.
MAX_NESTING_DEPTH = 50
#: Largest accepted absolute value of an exponent.
MAX_EXPONENT = 1000
#: Largest accepted integer (intermediate or final), in decimal digits.  Kept
#: below CPython's default int->str limit (4300 digits) so every result can be
#: formatted.
MAX_RESULT_DIGITS = 4000

# Integers with at most this many bits have at most MAX_RESULT_DIGITS digits
# plus at most one more, a slack that does not matter for a resource guard.
_MAX_INT_BITS = math.ceil(MAX_RESULT_DIGITS * math.log2(10))


class CalculatorError(ToolError, ValueError):
    """The expression is invalid or outside the calculator's limits.

    Subclasses :class:`ToolError`, so the executor shows the policy just the
    message (``"Error: division by zero"``).
    """


_BINARY_OPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_UNARY_OPS: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: lambda x: +x,
    ast.USub: lambda x: -x,
}

# Operators Python parses but a calculator should refuse, with their spelling.
_REFUSED_OPERATORS: dict[type[ast.AST], str] = {
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
    ast.Invert: "~",
    ast.Not: "not",
}

# Friendly names for refused syntax; anything not listed gets a generic message.
_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Call: "function calls are not allowed",
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts are not allowed",
    ast.Slice: "slices are not allowed",
    ast.Compare: "comparisons are not allowed",
    ast.BoolOp: "boolean operators are not allowed",
    ast.Lambda: "lambda expressions are not allowed",
    ast.IfExp: "conditional expressions are not allowed",
    ast.List: "lists are not allowed",
    ast.Set: "sets are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "strings are not allowed",
    ast.NamedExpr: "assignments are not allowed",
    ast.Starred: "starred expressions are not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield is not allowed",
}


def _check_number(value: Number) -> Number:
    """Enforce the size limits on every intermediate result."""
    if isinstance(value, complex):
        # e.g. (-8) ** 0.5
        raise CalculatorError("result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("result too large")
    if _bits(value) > _MAX_INT_BITS:
        raise CalculatorError(f"result too large (more than {MAX_RESULT_DIGITS} digits)")
    return value


def _bits(value: Number) -> int:
    """The size of an exact number (an int, or a fraction's larger term); 0 for a float."""
    if isinstance(value, Fraction):
        return max(abs(value.numerator).bit_length(), value.denominator.bit_length())
    return value.bit_length() if isinstance(value, int) else 0


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse powers that would be slow to compute or absurdly large."""
    if not -MAX_EXPONENT <= exponent <= MAX_EXPONENT:
        raise CalculatorError(f"exponent too large (the limit is {MAX_EXPONENT})")
    if _bits(base) and isinstance(exponent, int) and exponent > 0 and not -1 <= base <= 1:
        # Estimate the result's size before computing it: digits ~ exp * log10|base|.
        digits = exponent * (_bits(base) - 1) * math.log10(2)
        if digits > MAX_RESULT_DIGITS:
            raise CalculatorError(
                f"exponent too large: the result would have more than {MAX_RESULT_DIGITS} digits"
            )


def _apply_binary(op: ast.operator, left: Number, right: Number) -> Number:
    if isinstance(op, ast.Pow):
        _check_power(left, right)
    try:
        value = _BINARY_OPS[type(op)](left, right)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result too large") from None
    return _check_number(value)


def _refuse(node: ast.AST) -> CalculatorError:
    if isinstance(node, ast.Name):
        return CalculatorError(f"names are not allowed: {node.id!r}")
    if isinstance(node, ast.Tuple):
        return CalculatorError(
            "commas are not allowed (write numbers without thousands separators, e.g. 1000)"
        )
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return CalculatorError("booleans are not allowed")
        if isinstance(value, str):
            return CalculatorError("strings are not allowed")
        if isinstance(value, bytes):
            return CalculatorError("bytes are not allowed")
        if isinstance(value, complex):
            return CalculatorError("complex numbers are not allowed")
        return CalculatorError(f"{value!r} is not allowed")
    message = _REFUSED_NODES.get(type(node))
    if message is not None:
        return CalculatorError(message)
    return CalculatorError(f"unsupported syntax: {type(node).__name__}")


def _check_operator(op: ast.AST) -> None:
    if isinstance(op, ast.BitXor):
        raise CalculatorError("'^' is not supported; use '**' for exponentiation")
    symbol = _REFUSED_OPERATORS.get(type(op))
    if symbol is not None:
        raise CalculatorError(f"operator '{symbol}' is not allowed")
    if type(op) not in _BINARY_OPS and type(op) not in _UNARY_OPS:
        raise CalculatorError(f"unsupported operator: {type(op).__name__}")


# A numeric literal immediately followed by a keyword ("1if", "0x1for") makes
# CPython's tokenizer emit a SyntaxWarning on every parse.  Such text is never
# valid arithmetic, so it is refused up front: warning filters are process-wide
# and cannot be changed safely from the worker threads tools run in.
_NUMBER_BEFORE_KEYWORD_RE = re.compile(
    # Not preceded by a letter or underscore: "x1if" is one (refused) name.
    r"(?<![^\W\d])"
    r"(?:0[xXoObB][0-9a-fA-F_]*|(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9_]*)?[jJ]?)"
    r"(?=and|else|for|if|in|is|not|or)"
)


def _parse(expression: str) -> ast.expr:
    depth = max_depth = 0
    for char in expression:
        if char == "(":
            depth += 1
            max_depth = max(max_depth, depth)
        elif char == ")":
            depth -= 1
    if max_depth > MAX_NESTING_DEPTH:
        raise CalculatorError(
            f"expression is nested too deeply (more than {MAX_NESTING_DEPTH} levels of parentheses)"
        )
    if _NUMBER_BEFORE_KEYWORD_RE.search(expression):
        raise CalculatorError("invalid syntax: a number is directly followed by a word")
    try:
        tree = ast.parse(expression, filename="<expression>", mode="eval")
    except SyntaxError as exc:
        detail = exc.msg or ""
        # Python's hints ("Perhaps you forgot a comma?") mislead here: commas
        # are not allowed either.
        if not detail or detail.startswith("invalid syntax"):
            raise CalculatorError("invalid syntax") from None
        raise CalculatorError(f"invalid syntax: {detail}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        # Null bytes, lone surrogates, pathological inputs: never let them escape.
        raise CalculatorError(f"invalid expression: {type(exc).__name__}") from None
    return tree.body


def evaluate_arithmetic(expression: str) -> int | float:
    """Safely evaluate an arithmetic expression.

    Supports int and float literals (``3``, ``3.5``, ``.5``, ``1e3``), binary
    ``+ - * / // % **``, unary ``+``/``-`` and parentheses, with Python's
    semantics (so ``10/4 == 2.5`` and ``7 // 2 == 3``).

    Raises:
        CalculatorError: For anything else (names, calls, attributes, strings,
            comparisons, ``^``, ...), for division by zero, and when a limit is
            exceeded: :data:`MAX_EXPRESSION_CHARS`, :data:`MAX_NESTING_DEPTH`,
            :data:`MAX_EXPONENT`, :data:`MAX_RESULT_DIGITS`.  No other
            exception escapes, whatever the input.
    """
    result = _evaluate(expression, exact=False)
    assert not isinstance(result, Fraction)
    return result


def evaluate_exact(expression: str) -> Fraction:
    """:func:`evaluate_arithmetic` in exact rational arithmetic: ``6 / 4 * 2`` is exactly 3 and
    ``0.1 + 0.2`` exactly 3/10 (a decimal literal is read as the decimal it spells).

    Raises:
        CalculatorError: as :func:`evaluate_arithmetic`, and for a power whose exponent is not a
            whole number (it has no exact value in general).
    """
    result = _evaluate(expression, exact=True)
    assert isinstance(result, Fraction)
    return result


def _evaluate(expression: str, *, exact: bool) -> Number:
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"expression too long ({len(text)} characters; the limit is {MAX_EXPRESSION_CHARS})"
        )
    if "\\" in text:
        # Refused before parsing: a backslash is never valid arithmetic, and
        # parsing escape sequences in string literals can emit warnings as a
        # side effect (warning filters are process-global; tools run in threads).
        raise CalculatorError("backslashes are not allowed")
    root = _parse(text)

    # Iterative post-order walk: long operator chains ("1+1+...+1") build deep
    # trees, and recursion could hit Python's recursion limit.  Each stack entry
    # is (node, children_done); values of finished nodes go on `values`.
    values: list[Number] = []
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if isinstance(node, ast.Constant):
            literal = node.value
            # bool is an int subclass: refuse it explicitly.
            if isinstance(literal, bool) or not isinstance(literal, (int, float)):
                raise _refuse(node)
            number: Number = literal
            if exact:
                number = Fraction(repr(literal)) if isinstance(literal, float) else Fraction(literal)
            values.append(_check_number(number))
        elif isinstance(node, ast.BinOp):
            if not children_done:
                _check_operator(node.op)
                stack.append((node, True))
                # Pushed right first so the left operand is evaluated (and its
                # errors reported) first, as a reader would expect.
                stack.append((node.right, False))
                stack.append((node.left, False))
            else:
                right = values.pop()
                left = values.pop()
                if exact and isinstance(node.op, ast.Pow):
                    assert isinstance(right, Fraction)
                    if right.denominator != 1:
                        raise CalculatorError("a power with a fractional exponent has no exact value")
                    right = int(right)
                values.append(_apply_binary(node.op, left, right))
        elif isinstance(node, ast.UnaryOp):
            if not children_done:
                _check_operator(node.op)
                stack.append((node, True))
                stack.append((node.operand, False))
            else:
                values.append(_check_number(_UNARY_OPS[type(node.op)](values.pop())))
        else:
            raise _refuse(node)
    (result,) = values
    return result


def format_number(x: int | float) -> str:
    """Format a calculator result for the policy.

    Integers print in full; integral floats print without ``.0`` (``4``, not
    ``4.0``); other floats get up to 10 significant digits with trailing zeros
    removed, in positional notation for magnitudes in ``[1e-9, 1e16)`` and in
    scientific notation beyond (where positional digits would be noise).
    """
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"expected an int or float, got {type(x).__name__}")
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return str(x)  # 'inf', '-inf', 'nan'
    if x == 0:
        return "0"  # also maps -0.0 to "0"
    magnitude = abs(x)
    if x.is_integer() and magnitude < 1e16:
        return str(int(x))
    if not 1e-9 <= magnitude < 1e16:
        return f"{x:.10g}"
    # Never round away integer digits (123456789012.5 must not print as
    # 123456789000): keep at least as many significant digits as the integer
    # part has, capped by float precision.
    integer_digits = len(str(int(magnitude))) if magnitude >= 1 else 0
    significant = min(max(10, integer_digits), 17)
    rounded = Decimal(f"{x:.{significant}g}")
    text = format(rounded, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


# The docstring's first paragraph is the description the policy sees, so it
# names the supported syntax explicitly.
@tool(timeout_s=5.0, inline=True)  # bounded by its own limits: no thread hop needed
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression and return the numeric result.
    Supports + - * / ** % and parentheses (also // for floor division and unary
    minus) on integers and decimals, e.g. "(3 + 4.5) * 2" or "2**10 % 7".
    Variables, functions, '^' and thousands separators are not supported.

    Args:
        expression: The arithmetic expression to evaluate, e.g. "(1.5 + 2.5) / 2".
    """
    return format_number(evaluate_arithmetic(expression))


#: The calculator as a :class:`Tool` named ``"calculate"``.
calculator: Tool = calculate
