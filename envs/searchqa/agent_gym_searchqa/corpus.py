"""Passages and questions: the generated world's, or your own Search-R1-format files.

Corpus: one JSON object a line, ``{"id": ..., "contents": ...}`` as Search-R1 (and FlashRAG) write
it, ``contents`` usually ``"Title"\\nText`` (the title on the first line, often in double quotes); a
``title`` field, where present, is the title and ``contents`` the text. Questions: one object a
line, ``{"question": ..., "golden_answers": [...]}`` with an optional ``id``, or a Parquet file as
Search-R1's data scripts write it (:func:`question_record`: ``question`` / ``golden_answers`` where
the row has them, else ``prompt`` and ``reward_model.ground_truth.target``; ``data_source`` names the
row's difficulty). A JSONL file may be gzip-compressed (``.gz``). The whole corpus is read into
memory, which suits up to a few hundred thousand passages; a bigger one goes behind a retrieval
server (:mod:`agent_gym_searchqa.server`).
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Mapping

from agent_gym_searchqa.questions import SearchQATask, task_from_mapping
from agent_gym_searchqa.world import World

__all__ = ["Passage", "load_corpus", "load_questions", "question_record", "split_contents", "world_passages"]


@dataclass(frozen=True)
class Passage:
    """One retrievable document: its id, title and text."""

    id: str
    title: str
    text: str


def world_passages(world: World) -> list[Passage]:
    """The passages of a generated world, in id order."""
    return [Passage(doc_id, title, text) for doc_id, title, text in world.documents()]


def _open_text(path: Path) -> IO[str]:
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def _records(path: str | os.PathLike[str], what: str) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` of each non-blank line; ``ValueError`` naming the file and line."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{what} file {file} does not exist (pass a JSONL file, one JSON object a line)")
    with _open_text(file) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{file}:{number}: not a JSON object ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{file}:{number}: expected a JSON object, got {type(record).__name__}")
            yield number, record


def _parquet_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict]]:
    """``(row number from 1, row)`` of a Parquet file (pyarrow, imported here only)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"questions file {file} does not exist (pass a JSONL or Parquet file)")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"reading {file} needs pyarrow: pip install pyarrow (or pip install 'agent-r1-gym-searchqa[parquet]')"
        ) from None
    table = pq.read_table(file)
    for number, row in enumerate(table.to_pylist(), 1):
        yield number, row


def _prompt_question(prompt: Any) -> str | None:
    """The question inside a Search-R1 prompt: the text after the last ``Question:`` of its last user
    message (its data scripts write ``... Question: {question}\\n``)."""
    if not isinstance(prompt, (list, tuple)):
        return None
    users = [m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str) or "Question:" not in users[-1]:
        return None
    return users[-1].rsplit("Question:", 1)[1].strip() or None


def question_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """A question row of Search-R1's files as :func:`~agent_gym_searchqa.questions.task_from_mapping` takes it.

    Search-R1's data scripts (``nq_search.py``, ``qa_search_train_merge.py``) keep the source's ``id``,
    ``question`` and ``golden_answers`` and add ``data_source``, ``prompt`` (the chat, the question at
    the end of its user message), ``ability``, ``reward_model`` (``{"style", "ground_truth": {"target":
    [...]}}``) and ``extra_info`` (``{"split", "index"}``); verl's ``preprocess_search_r1_dataset.py``
    keeps only the added columns, with the question in ``extra_info.question``. So: the question is
    ``question``, else ``extra_info.question``, else read from ``prompt``; the answers are
    ``golden_answers``, else ``reward_model.ground_truth.target``; ``data_source``, where there is one,
    is the task's difficulty (results then split by dataset). Other columns are ignored.
    """
    record: dict[str, Any] = {key: row[key] for key in ("id", "difficulty", "hops", "supporting_docs") if row.get(key) is not None}
    extra_info = row.get("extra_info")
    extra: Mapping[str, Any] = extra_info if isinstance(extra_info, Mapping) else {}
    question = row.get("question") or extra.get("question") or _prompt_question(row.get("prompt"))
    if question is not None:
        record["question"] = question
    answers = row.get("golden_answers")
    if answers is None:
        reward_model = row.get("reward_model")
        truth = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
        answers = truth.get("target") if isinstance(truth, Mapping) else truth
    if answers is not None:
        record["golden_answers"] = answers
    if "difficulty" not in record and row.get("data_source"):
        record["difficulty"] = str(row["data_source"])
    return record


def split_contents(contents: str) -> tuple[str, str]:
    """Search-R1's ``"Title"\\nText`` -> (title, text); one line -> (its first words, the line)."""
    head, sep, rest = contents.partition("\n")
    if not sep:
        return " ".join(contents.split()[:8]), contents
    return head.strip().strip('"').strip(), rest.strip()


def corpus_records(path: str | os.PathLike[str]) -> Iterator[tuple[str, str, Any]]:
    """``(id, contents, title)`` of each line of a Search-R1 JSONL corpus (``.gz`` too), streamed: nothing
    but the ids seen is kept. ``title`` is the line's ``title`` field as it is (``None`` without one).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not an object, lacks ``id`` or ``contents``, or repeats an id (file and line named).
    """
    seen: set[str] = set()
    for number, record in _records(path, "corpus"):
        missing = [k for k in ("id", "contents") if k not in record]
        if missing:
            raise ValueError(f"{path}:{number}: a corpus line needs the keys id and contents; missing {missing}")
        doc_id, contents = str(record["id"]), str(record["contents"])
        if doc_id in seen:
            raise ValueError(f"{path}:{number}: the doc id {doc_id!r} appears twice; ids must be unique")
        seen.add(doc_id)
        yield doc_id, contents, record.get("title")


def load_corpus(path: str | os.PathLike[str]) -> list[Passage]:
    """Passages from a JSONL file of ``{"id", "contents"}`` (optional ``title``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not an object, lacks ``id`` or ``contents``, or repeats an id (named).
    """
    passages: list[Passage] = []
    for doc_id, contents, raw_title in corpus_records(path):
        if raw_title:
            title, text = str(raw_title).strip(), contents
            first, sep, rest = text.partition("\n")
            if sep and first.strip().strip('"') == title:
                text = rest.strip()  # "Title\nText" with the title given again: keep the text once
        else:
            title, text = split_contents(contents)
        passages.append(Passage(doc_id, title, text))
    if not passages:
        raise ValueError(f"the corpus file {path} holds no passages")
    return passages


def load_questions(path: str | os.PathLike[str], split: str = "train") -> list[SearchQATask]:
    """Questions from a JSONL file of ``{"question", "golden_answers"}`` (optional ``id``) or a Parquet
    file in Search-R1's layout (``.parquet``; :func:`question_record`). Without an id, a question's id
    is ``"<split>-<n>"``, n counting from 0 in file order.

    Raises:
        FileNotFoundError: no such file.
        ImportError: a Parquet file without pyarrow installed (the message names the install).
        ValueError: a line or row lacks a field or has empty answers (file and line or row named), or
            the file is empty.
    """
    parquet = Path(path).suffix == ".parquet"
    rows = _parquet_records(path) if parquet else _records(path, "questions")
    where = "row " if parquet else ""
    tasks: list[SearchQATask] = []
    for number, record in rows:
        try:
            tasks.append(task_from_mapping(question_record(record), default_id=f"{split}-{len(tasks)}"))
        except ValueError as exc:
            raise ValueError(f"{path}:{where}{number}: {exc}") from None
    if not tasks:
        raise ValueError(f"the questions file {path} holds no questions")
    return tasks
