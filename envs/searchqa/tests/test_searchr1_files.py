"""Search-R1's question files load as they are: Parquet files in the layout of Search-R1's data scripts
(and of verl's re-processing of them), written here by pyarrow, played through the env."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.tools import HermesParser
from agent_gym_searchqa.corpus import load_questions, question_record

pa = pytest.importorskip("pyarrow", reason="pyarrow writes the Parquet files: pip install pyarrow (the [test] extra has it)")
import pyarrow.parquet as pq  # noqa: E402

# Search-R1's nq_search.py prefix, with the question at its end (what its `prompt` column holds).
PREFIX = ("Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
          "new information. ... For example, <answer> Beijing </answer>. Question: ")


def searchr1_row(index: int, question: str, answers: list[str], source: str, split: str = "test") -> dict:
    """One row as Search-R1's nq_search.py writes it: the source's id, question and golden_answers, and
    the columns it adds."""
    return {
        "id": f"{split}_{index}", "question": question, "golden_answers": answers, "data_source": source,
        "prompt": [{"role": "user", "content": PREFIX + question + "\n"}], "ability": "fact-reasoning",
        "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"split": split, "index": index},
    }


def verl_row(index: int, question: str, answers: list[str], source: str) -> dict:
    """One row as verl's preprocess_search_r1_dataset.py rewrites it: no question or golden_answers columns."""
    return {
        "data_source": f"searchR1_{source}",
        "prompt": [{"role": "system", "content": "You are a helpful and harmless assistant."},
                   {"role": "user", "content": PREFIX + question}],
        "ability": "fact-reasoning", "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
        "extra_info": {"index": index, "need_tools_kwargs": True, "question": question, "split": "train"},
    }


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def act(env, text: str) -> list[int]:
    return env.unwrapped.template.encode(text) + list(env.unwrapped.template.end_of_turn_ids)


@pytest.fixture
def corpus(tmp_path):
    rows = [
        {"id": "0", "contents": '"Zorblat Tower"\nZorblat Tower is a lighthouse built by Quenna Marsh in 1911.'},
        {"id": "1", "contents": '"Quenna Marsh"\nQuenna Marsh was an engineer born in Pellwick.'},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_search_r1_parquet_file_plays(tmp_path, corpus, tokenizer):
    path = write_parquet(tmp_path / "test.parquet", [
        searchr1_row(0, "Who built Zorblat Tower?", ["Quenna Marsh", "Q. Marsh"], "nq"),
        searchr1_row(1, "Where was the builder of Zorblat Tower born?", ["Pellwick"], "hotpotqa"),
    ])
    env = gym.make("AgentR1/SearchQA-v0", tokenizer=tokenizer, corpus=str(corpus), questions=str(path), split="test")
    tasks = list(env.unwrapped.tasks)
    assert [(t.id, t.question, t.golden_answers, t.difficulty) for t in tasks] == [
        ("test_0", "Who built Zorblat Tower?", ("Quenna Marsh", "Q. Marsh"), "nq"),
        ("test_1", "Where was the builder of Zorblat Tower born?", ("Pellwick",), "hotpotqa"),
    ]
    obs, info = env.reset(options={"task_id": "test_1"})
    assert info == {"task_id": "test_1", "context_tokens": len(obs["prompt_ids"]), "difficulty": "hotpotqa"}
    assert obs["messages"][-1]["content"].splitlines()[0] == "Question: Where was the builder of Zorblat Tower born?"
    call = HermesParser().format_calls([{"name": "search", "arguments": {"query": "Quenna Marsh"}}])
    obs, reward, terminated, truncated, info = env.step(act(env, call))
    assert obs["messages"][-1]["content"] == (
        "[1] id: 1 | Quenna Marsh\nQuenna Marsh was an engineer born in Pellwick.\n"
        "[2] id: 0 | Zorblat Tower\nZorblat Tower is a lighthouse built by Quenna Marsh in 1911.")
    obs, reward, terminated, truncated, info = env.step(act(env, "<answer>Pellwick</answer>"))
    assert (reward, terminated, truncated, info["answer_check"], info["difficulty"], info["tool_calls"]) == (
        1.0, True, False, "correct", "hotpotqa", 1)


def test_verl_s_rewritten_files_and_rows_without_ids(tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [
        verl_row(0, "Who built Zorblat Tower?", ["Quenna Marsh"], "nq"),
        verl_row(1, "Where was Quenna Marsh born?", ["Pellwick"], "nq"),
    ])
    tasks = load_questions(path, split="train")
    assert [(t.id, t.question, t.golden_answers, t.difficulty) for t in tasks] == [
        ("train-0", "Who built Zorblat Tower?", ("Quenna Marsh",), "searchR1_nq"),
        ("train-1", "Where was Quenna Marsh born?", ("Pellwick",), "searchR1_nq"),
    ]
    # The question read from the prompt alone (no question column, no extra_info.question):
    row = verl_row(0, "Who built Zorblat Tower?", ["Quenna Marsh"], "nq")
    del row["extra_info"]["question"]
    assert question_record(row) == {"question": "Who built Zorblat Tower?", "golden_answers": ["Quenna Marsh"],
                                    "difficulty": "searchR1_nq"}


def test_bad_parquet_rows_are_named(tmp_path):
    row = searchr1_row(0, "Who?", [], "nq")
    path = write_parquet(tmp_path / "bad.parquet", [searchr1_row(1, "Why?", ["x"], "nq"), row])
    with pytest.raises(ValueError, match=r"bad.parquet:row 2: golden_answers must be a non-empty list of strings"):
        load_questions(path)
    no_question = {"data_source": "nq", "prompt": [{"role": "user", "content": "Hello"}],
                   "reward_model": {"ground_truth": {"target": ["x"]}}}
    write_parquet(path, [no_question])
    with pytest.raises(ValueError, match=r"bad.parquet:row 1: a SearchQA task needs the keys question and golden_answers; "
                       r"missing \['question'\]"):
        load_questions(path)
    write_parquet(path, [])
    with pytest.raises(ValueError, match="holds no questions"):
        load_questions(tmp_path / "bad.parquet")
    with pytest.raises(FileNotFoundError, match="pass a JSONL or Parquet file"):
        load_questions(tmp_path / "none.parquet")
