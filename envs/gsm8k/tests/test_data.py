"""Tests for agent_gym_gsm8k.data (loading GSM8K) and the prompt templates."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jinja2
import pytest

from agent_gym_gsm8k import data as gsm8k_data
from agent_gym_gsm8k.data import (
    DATA_DIR_ENV_VAR,
    SPLITS,
    GSM8KNotFoundError,
    GSM8KTask,
    load_gsm8k,
)

PACKAGE_DIR = Path(gsm8k_data.__file__).resolve().parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"


@pytest.fixture
def packaged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real GSM8K rows come from the copy packaged with agent-r1-gym-gsm8k: no variable may override it."""
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)


@pytest.fixture(scope="module")
def real_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the original train.jsonl and test.jsonl: the packaged files, decompressed."""
    folder = tmp_path_factory.mktemp("gsm8k")
    for split in SPLITS:
        raw = gzip.decompress((PACKAGE_DIR / "dataset" / f"{split}.jsonl.gz").read_bytes())
        (folder / f"{split}.jsonl").write_bytes(raw)
    return folder


def _write_jsonl(path: Path, records: list[dict[str, str]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


# --- real data ---------------------------------------------------------------------------------


def test_real_split_sizes_and_first_task(packaged: None) -> None:
    test = load_gsm8k("test")
    train = load_gsm8k("train")
    assert len(test) == 1319
    assert len(train) == 7473
    first = test[0]
    assert isinstance(first, GSM8KTask)
    assert first.id == "test-0"
    assert first.question.startswith("Janet")
    assert first.answer == "18"
    assert first.solution.rstrip().endswith("#### 18")
    assert train[41].id == "train-41"
    assert [t.id for t in test[:3]] == ["test-0", "test-1", "test-2"]
    assert len({t.id for t in train}) == len(train)


def test_real_answers_are_raw_strings_after_marker(packaged: None) -> None:
    tasks = load_gsm8k("train")
    # Raw answers are kept as written: some use thousands commas, a few are negative.
    assert any("," in t.answer for t in tasks)
    assert any(t.answer.startswith("-") for t in tasks)
    for t in tasks:
        assert t.answer == t.answer.strip()
        assert t.solution.rsplit("####", 1)[1].strip() == t.answer


def test_env_var_is_used_and_loading_is_cached(
    real_data_dir: Path, packaged: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # How long loading takes is measured by benchmarks/gsm8k_load.py; here, what is parsed and when.
    from_package = load_gsm8k("train")
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(real_data_dir))
    gsm8k_data._load_jsonl_cached.cache_clear()
    parsed: list[str] = []
    parse_lines = gsm8k_data._parse_lines

    def counting_parse_lines(lines, *, split, where):  # the real parser, counted
        parsed.append(where)
        return parse_lines(lines, split=split, where=where)

    monkeypatch.setattr(gsm8k_data, "_parse_lines", counting_parse_lines)
    tasks = load_gsm8k("train")
    assert len(tasks) == 7473
    assert tasks == from_package  # the folder's original file and the packaged copy give the same tasks
    assert parsed == [str((real_data_dir / "train.jsonl").resolve())]
    # Cached: a second call is a stat plus a list copy (nothing parsed again), and returns an independent list.
    again = load_gsm8k("train")
    assert parsed == [str((real_data_dir / "train.jsonl").resolve())]
    assert again == tasks and again is not tasks
    again.clear()
    assert len(load_gsm8k("train")) == 7473


# --- error handling ----------------------------------------------------------------------------


def test_bad_split_lists_valid_splits() -> None:
    with pytest.raises(ValueError, match="valid splits: train, test"):
        load_gsm8k("validation", "/nonexistent")


def test_missing_dir_error_names_both_ways_and_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(GSM8KNotFoundError) as excinfo:
        load_gsm8k("test", missing)
    message = str(excinfo.value)
    assert DATA_DIR_ENV_VAR in message
    assert "openai/gsm8k" in message
    assert str(missing / "test.jsonl") in message
    assert "the folder does not exist" in message
    assert "set neither to use the copy packaged with agent-r1-gym-gsm8k" in message
    assert isinstance(excinfo.value, FileNotFoundError)


def test_missing_split_file_in_env_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_jsonl(tmp_path / "train.jsonl", [{"question": "q", "answer": "a\n#### 1"}])
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path))
    assert len(load_gsm8k("train")) == 1
    with pytest.raises(GSM8KNotFoundError, match="test.jsonl is missing") as excinfo:
        load_gsm8k("test")
    assert f"${DATA_DIR_ENV_VAR} -> {(tmp_path / 'test.jsonl').resolve()} is missing" in str(excinfo.value)
    assert "the folder has no test.jsonl" in str(excinfo.value)


def test_hub_without_datasets_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)

    def _no_hub(dataset_id: str, split: str) -> tuple[GSM8KTask, ...]:
        raise ImportError("No module named 'datasets'")

    # Simulate "datasets not installed" even where it is, so the test never touches the network.
    monkeypatch.setattr(gsm8k_data, "_load_hf_cached", _no_hub)
    with pytest.raises(GSM8KNotFoundError) as excinfo:
        load_gsm8k("test", "hf://openai/gsm8k")
    message = str(excinfo.value)
    assert DATA_DIR_ENV_VAR in message and "openai/gsm8k" in message
    assert "not installed" in message and "pip install 'datasets>=2.18'" in message


def test_hub_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def _offline(dataset_id: str, split: str) -> tuple[GSM8KTask, ...]:
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(gsm8k_data, "_load_hf_cached", _offline)
    monkeypatch.setenv(DATA_DIR_ENV_VAR, "hf://openai/gsm8k")
    with pytest.raises(GSM8KNotFoundError, match="ConnectionError: hub unreachable") as excinfo:
        load_gsm8k("train")
    assert f"${DATA_DIR_ENV_VAR} -> datasets.load_dataset('openai/gsm8k', 'main', split='train')" in str(excinfo.value)


@pytest.mark.parametrize(
    ("bad_line", "match"),
    [
        ('{"question": "q", "answer": "a\\n#### 2"', "malformed JSON"),
        ('["not", "an", "object"]', "expected a JSON object"),
        ('{"question": "q"}', "'question' and 'answer'"),
        ('{"question": "q", "answer": "no marker"}', "no '####"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, bad_line: str, match: str) -> None:
    good = json.dumps({"question": "q", "answer": "a\n#### 1"})
    (tmp_path / "test.jsonl").write_text(f"{good}\n{good}\n{bad_line}\n{good}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=match) as excinfo:
        load_gsm8k("test", tmp_path)
    assert f"{(tmp_path / 'test.jsonl').resolve()}:3" in str(excinfo.value)


def test_small_file_parsing_and_cache_invalidation(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    _write_jsonl(
        path,
        [{"question": "Q0", "answer": "r\n#### 1,000"}, {"question": "Q1", "answer": "#### -3"}],
    )
    tasks = load_gsm8k("test", tmp_path)
    assert tasks == [
        GSM8KTask(id="test-0", question="Q0", answer="1,000", solution="r\n#### 1,000"),
        GSM8KTask(id="test-1", question="Q1", answer="-3", solution="#### -3"),
    ]
    # Rewriting the file (different size) must not be served from the stale cache.
    _write_jsonl(path, [{"question": "Q0 changed", "answer": "#### 2"}])
    assert [t.question for t in load_gsm8k("test", tmp_path)] == ["Q0 changed"]


# --- templates ---------------------------------------------------------------------------------

CALCULATE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


@pytest.mark.parametrize("keep_trailing_newline", [False, True])
def test_templates_render_without_trailing_newline(keep_trailing_newline: bool) -> None:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=keep_trailing_newline,
    )
    system = env.get_template("gsm8k_system.j2").render()
    user = env.get_template("gsm8k_user.j2").render(question="  How many eggs?\n")
    tool_system = env.get_template("gsm8k_tool_system.j2").render(tools=[CALCULATE_SCHEMA])
    for text in (system, user, tool_system):
        assert text == text.strip()
        assert "#### <number>" in text
    assert user.startswith("How many eggs?")
    assert "<tools>\n" + json.dumps(CALCULATE_SCHEMA, sort_keys=True) + "\n</tools>" in tool_system
    example_call = '{"name": "calculate", "arguments": {"expression": "2 + 3 * 4"}}'
    assert f"<tool_call>\n{example_call}\n</tool_call>" in tool_system
