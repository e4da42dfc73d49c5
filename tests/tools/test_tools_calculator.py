"""Safe arithmetic evaluation and number formatting."""

from __future__ import annotations

import asyncio

import pytest

from agent_gym.tools import ToolError, calculator, evaluate_arithmetic, format_number
from agent_gym.tools.calculator import CalculatorError


@pytest.mark.parametrize(
    ("expression", "value", "text"),
    [
        ("2+3*4", 14, "14"),
        ("(1.5+2.5)/2", 2.0, "2"),
        ("2**10", 1024, "1024"),
        ("7 % 3", 1, "1"),
        ("-3 + +2", -1, "-1"),
        ("10/4", 2.5, "2.5"),
        ("0.1+0.2", 0.30000000000000004, "0.3"),
        (".5 * 4", 2.0, "2"),
        ("2 ** -2", 0.25, "0.25"),
        ("-2 ** 2", -4, "-4"),  # Python precedence: -(2**2)
        ("2 ** 3 ** 2", 512, "512"),  # right-associative
        ("10 - 4 - 3", 3, "3"),  # left-associative
        ("7 // 2", 3, "3"),
        ("-7 % 3", 2, "2"),
        ("1/3", 1 / 3, "0.3333333333"),
        ("2/3", 2 / 3, "0.6666666667"),
        ("  ((((42))))  ", 42, "42"),
        ("1e3 + 1", 1001.0, "1001"),
        ("123456789 * 987654321", 121932631112635269, "121932631112635269"),
        ("1+" * 400 + "1", 401, "401"),  # long chains are fine (no recursion)
        ("-" * 999 + "1", -1, "-1"),
    ],
)
def test_values(expression: str, value: float, text: str) -> None:
    result = evaluate_arithmetic(expression)
    assert result == value
    assert type(result) is type(value)
    assert format_number(result) == text


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "function calls are not allowed"),
        ("x + 1", "names are not allowed: 'x'"),
        ("(1).real", "attribute access is not allowed"),
        ("9**9**9", "exponent too large (the limit is 1000)"),
        ("10**100000", "exponent too large (the limit is 1000)"),
        ("999999**999", "exponent too large: the result would have more than 4000 digits"),
        ("1/0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("5.0 // 0.0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("'a'*3", "strings are not allowed"),
        ("[1,2]", "lists are not allowed"),
        ("2^3", "'^' is not supported; use '**' for exponentiation"),
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("1" * 5000, "expression too long (5000 characters; the limit is 1000)"),
        ("1,000", "commas are not allowed (write numbers without thousands separators, e.g. 1000)"),
        ("1 < 2", "comparisons are not allowed"),
        ("1 and 2", "boolean operators are not allowed"),
        ("(1, 2)[0]", "subscripts are not allowed"),
        ("lambda: 1", "lambda expressions are not allowed"),
        ("True + 1", "booleans are not allowed"),
        ("None", "None is not allowed"),
        ("2j", "complex numbers are not allowed"),
        ("1 if 1 else 2", "conditional expressions are not allowed"),
        ("{1: 2}", "dicts are not allowed"),
        ("(y := 2)", "assignments are not allowed"),
        ("~1", "operator '~' is not allowed"),
        ("1 << 2", "operator '<<' is not allowed"),
        ("not 1", "operator 'not' is not allowed"),
        ("2 +", "invalid syntax"),
        ("(2 + 3", "invalid syntax: '(' was never closed"),
        ("1 = 1", "invalid syntax"),
        ("1\\\n+1", "backslashes are not allowed"),
        ("(" * 51 + "1" + ")" * 51, "expression is nested too deeply (more than 50 levels of parentheses)"),
        ("(-8) ** 0.5", "result is not a real number"),
        ("2.5 ** 900", "result too large"),
        ("1e308 * 10", "result too large"),
        ("(10**999)**4 * 10**10", "result too large (more than 4000 digits)"),
        ("1e999", "result too large"),
    ],
)
def test_refusals(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError) as info:
        evaluate_arithmetic(expression)
    assert str(info.value) == message


def test_error_types() -> None:
    assert issubclass(CalculatorError, ToolError)
    assert issubclass(CalculatorError, ValueError)
    with pytest.raises(CalculatorError, match="expression must be a string, got int"):
        evaluate_arithmetic(3)  # type: ignore[arg-type]


def test_limits_refuse_huge_work_before_doing_it() -> None:
    # Without the limits, 9**9**9 alone takes minutes: the exponent is refused before the power is taken.
    for expression, message in [
        ("9**9**9", "exponent too large (the limit is 1000)"),
        ("10**100000", "exponent too large (the limit is 1000)"),
        ("123456**999", "exponent too large: the result would have more than 4000 digits"),
        ("(9**999)*(9**999)*(9**999)*(9**999)*(9**999)", "result too large (more than 4000 digits)"),
    ]:
        with pytest.raises(CalculatorError) as info:
            evaluate_arithmetic(expression)
        assert str(info.value) == message, expression
    # Just inside the limits: computed exactly.
    assert evaluate_arithmetic("(9**999)*(9**999)*(9**999)*(9**999)") == 9**3996
    assert evaluate_arithmetic("1" * 999) == int("1" * 999)


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (4, "4"),
        (4.0, "4"),
        (-0.0, "0"),
        (2.5, "2.5"),
        (1 / 3, "0.3333333333"),
        (1e-7, "0.0000001"),
        (123456789012.5, "123456789012"),  # integer digits are never rounded away
        (1234.5678901234, "1234.56789"),
        (1e15, "1000000000000000"),
        (1e20, "1e+20"),
        (1.5e-12, "1.5e-12"),
        (-2.0 / 3, "-0.6666666667"),
        (10**30, "1000000000000000000000000000000"),
        (float("inf"), "inf"),
    ],
)
def test_format_number(number: float, text: str) -> None:
    assert format_number(number) == text


def test_format_number_rejects_non_numbers() -> None:
    with pytest.raises(TypeError):
        format_number(True)


def test_calculator_tool() -> None:
    assert calculator.name == "calculate"
    description = calculator.schema()["function"]["description"]
    assert description.startswith("Evaluate an arithmetic expression")
    assert description == (
        "Evaluate an arithmetic expression and return the numeric result. "
        "Supports + - * / ** % and parentheses (also // for floor division and unary minus) "
        'on integers and decimals, e.g. "(3 + 4.5) * 2" or "2**10 % 7". '
        "Variables, functions, '^' and thousands separators are not supported."
    )
    assert calculator.schema()["function"]["parameters"]["required"] == ["expression"]
    assert asyncio.run(calculator.acall({"expression": "(1.5+2.5)/2"})) == "2"
    assert calculator("0.1+0.2") == "0.3"
