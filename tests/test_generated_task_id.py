"""GeneratedTaskId: the ``<split>-<variant>-<index>`` ids of the generated envs, made and read back."""

from __future__ import annotations

import pytest

from agent_gym.core.tasks import GeneratedTaskId

SPLITS = ("train", "test")
LEVELS = {"easy": 1, "medium": 2, "hard": 3}  # a mapping's keys are its variants, as the envs pass them


def parse(task_id: str) -> GeneratedTaskId:
    return GeneratedTaskId.parse(task_id, splits=SPLITS, variants=LEVELS, name="Demo task")


def test_str_makes_the_id_and_parse_reads_it_back():
    task_id = GeneratedTaskId("test", "hard", 42)
    assert str(task_id) == "test-hard-42"
    assert parse("test-hard-42") == task_id == ("test", "hard", 42)
    split, variant, index = parse("train-easy-0")
    assert (split, variant, index) == ("train", "easy", 0) and type(index) is int
    assert str(GeneratedTaskId("train", "L2", 17)) == "train-L2-17"


def test_leading_zeros_read_as_the_number():
    assert parse("train-medium-007") == ("train", "medium", 7)
    assert str(parse("train-medium-007")) == "train-medium-7"


@pytest.mark.parametrize(
    "bad",
    ["bogus", "train-easy", "train-easy-1-2", "dev-easy-1", "train-extreme-1", "train-easy--1", "train-easy-x",
     "train-easy-", "train-easy-²", "train-easy- 1", "Train-easy-1", ""],
)
def test_bad_ids_raise_key_error_naming_the_form_and_values(bad):
    with pytest.raises(KeyError) as err:
        parse(bad)
    assert err.value.args[0] == (
        f"no Demo task with id {bad!r}: ids look like 'train-easy-123' "
        "(<split>-<difficulty>-<number>, split in ('train', 'test'), difficulty in ('easy', 'medium', 'hard'))"
    )


def test_the_error_names_the_variant_as_the_env_calls_it():
    with pytest.raises(KeyError) as err:
        GeneratedTaskId.parse("train-2-17", splits=SPLITS, variants=("L1", "L2"), name="sum task", variant_name="level")
    assert err.value.args[0] == (
        "no sum task with id 'train-2-17': ids look like 'train-L1-123' "
        "(<split>-<level>-<number>, split in ('train', 'test'), level in ('L1', 'L2'))"
    )


def test_a_non_string_id_is_refused_with_the_same_error():
    with pytest.raises(KeyError, match="no Demo task with id 123: ids look like 'train-easy-123'"):
        parse(123)  # type: ignore[arg-type]


def test_check_passes_known_values_and_names_the_valid_ones_otherwise():
    GeneratedTaskId.check("test", "hard", splits=SPLITS, variants=LEVELS, env="Demo")
    with pytest.raises(ValueError) as err:
        GeneratedTaskId.check("test", "insane", splits=SPLITS, variants=LEVELS, env="Demo")
    assert str(err.value) == "unknown Demo difficulty 'insane'; known: easy, medium, hard"
    with pytest.raises(ValueError) as err:
        GeneratedTaskId.check("dev", "easy", splits=SPLITS, variants=LEVELS, env="Demo")
    assert str(err.value) == "unknown split 'dev' for Demo; known: train, test"


def test_check_takes_the_variant_as_the_caller_does():
    GeneratedTaskId.check("train", 2, splits=SPLITS, variants={1: "a", 2: "b"}, env="sum", variant_name="level")
    with pytest.raises(ValueError) as err:
        GeneratedTaskId.check("train", 7, splits=SPLITS, variants={1: "a", 2: "b"}, env="sum", variant_name="level")
    assert str(err.value) == "unknown sum level 7; known: 1, 2"
    with pytest.raises(ValueError, match=r"^unknown Demo difficulty \['easy'\]; known: easy, medium, hard$"):
        GeneratedTaskId.check("train", ["easy"], splits=SPLITS, variants=LEVELS, env="Demo")  # unhashable: still a ValueError
