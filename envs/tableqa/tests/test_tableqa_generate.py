"""The TableQA generator and answer checker: determinism, typed tables, exact answers that pandas agrees with."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from fractions import Fraction

import pytest

from agent_gym.sandbox import Sandbox
from agent_gym_tableqa.check import check_answer, parse_number
from agent_gym_tableqa.env import PRELUDE
from agent_gym_tableqa.generate import DIFFICULTIES, TEMPLATES, generate_task, parse_task_id


def test_same_task_in_another_process():
    here = generate_task("train", "hard", 77)
    code = (
        "import hashlib\nfrom agent_gym_tableqa.generate import generate_task\n"
        "t = generate_task('train', 'hard', 77)\n"
        "print(t.question); print(t.answer); print(hashlib.sha256(''.join(t.files().values()).encode()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    import hashlib

    assert out == [here.question, here.answer, hashlib.sha256("".join(here.files().values()).encode()).hexdigest()]
    assert generate_task("test", "hard", 77).files() != here.files()  # splits use different seeds


def test_tables_are_typed_and_a_few_hundred_rows():
    task = generate_task("test", "medium", 3)
    orders, products = task.tables
    assert 200 <= len(orders.rows) <= 400 and 8 <= len(products.rows) <= 14
    assert [t for _, t in orders.columns] == ["int", "date", "str", "str", "int", "float"]
    assert [t for _, t in products.columns] == ["str", "str", "str", "float", "int"]
    rows = list(csv.reader(io.StringIO(orders.to_csv())))
    assert rows[0] == ["order_id", "date", "region", "product", "quantity", "unit_price"] and len(rows) == len(orders.rows) + 1
    names = {p[0] for p in products.rows}
    assert {o[3] for o in orders.rows} <= names  # every order joins to a product


def test_every_template_is_reachable_and_answers_are_typed():
    seen = {}
    for difficulty in DIFFICULTIES:
        for i in range(60):
            task = generate_task("train", difficulty, i)
            seen[task.template] = task
            assert task.answer_type in ("int", "decimal", "str", "date")
    assert set(seen) == {f.__name__.lstrip("_") for fs in TEMPLATES.values() for f in fs}
    assert seen["h_argmax_date_supplier"].answer_type == "date"


def test_reference_pandas_solutions_agree_with_the_exact_answers():
    """The generator computes answers in exact arithmetic; pandas, run in the sandbox on the CSV files,
    must agree for every template (this is what a perfect policy would do)."""
    tasks = {}
    for difficulty in DIFFICULTIES:
        for i in range(40):
            task = generate_task("test", difficulty, i)
            tasks.setdefault(task.template, task)
    with Sandbox(preload=("pandas",), timeout_s=30, cpu_s=20, prefork=0) as sb:
        futures = {name: sb.submit(t.solution, files=t.files(), prelude=PRELUDE) for name, t in tasks.items()}
        for name, future in futures.items():
            result = future.result()
            task = tasks[name]
            assert result.kind == "ok", (name, result)
            check = check_answer("#### " + result.output.strip(), task.answer_type, task.exact)
            assert check.correct, (name, task.question, task.answer, result.output)


@pytest.mark.parametrize(
    "response, answer_type, exact, reason",
    [
        ("so #### 1,234", "int", Fraction(1234), "correct"),
        ("#### $1234.0", "int", Fraction(1234), "correct"),
        ("#### 1235", "int", Fraction(1234), "wrong_answer"),
        ("#### 12.35", "decimal", Fraction(12345, 1000), "correct"),  # half up
        ("#### 12.34", "decimal", Fraction(12345, 1000), "correct"),  # half even (pandas' float round)
        ("#### 12.3449", "decimal", Fraction(12345, 1000), "correct"),
        ("#### 12.36", "decimal", Fraction(12345, 1000), "wrong_answer"),
        ("#### **Alpha Desk**", "str", "Alpha Desk", "correct"),
        ("#### alpha desk.", "str", "Alpha Desk", "correct"),
        ("#### Alpha Lamp", "str", "Alpha Desk", "wrong_answer"),
        ("#### 2023-03-05", "date", "2023-03-05", "correct"),
        ("#### 2023-03-05 00:00:00", "date", "2023-03-05", "correct"),
        ("#### March 5", "date", "2023-03-05", "unparsable_answer"),
        ("#### twelve", "int", Fraction(12), "unparsable_answer"),
        ("the answer is 12", "int", Fraction(12), "no_final_answer"),
        ("#### ", "str", "North", "unparsable_answer"),
    ],
)
def test_answer_check(response, answer_type, exact, reason):
    check = check_answer(response, answer_type, exact)
    assert check.reason == reason and check.correct == (reason == "correct")


def test_parse_number_and_task_ids():
    assert parse_number(" $1,234.50 ") == Fraction(2469, 2) and parse_number("1e5") is None
    assert parse_task_id("test-hard-42") == ("test", "hard", 42)
    with pytest.raises(KeyError, match="ids look like"):
        parse_task_id("hard-42")
