"""Passages and questions: the generated world's, or your own Search-R1-format JSONL files.

Corpus: one JSON object a line, ``{"id": ..., "contents": ...}`` as Search-R1 (and FlashRAG) write
it, ``contents`` usually ``"Title"\\nText`` (the title on the first line, often in double quotes); a
``title`` field, where present, is the title and ``contents`` the text. Questions: one object a
line, ``{"question": ..., "golden_answers": [...]}`` with an optional ``id``. Either file may be
gzip-compressed (``.gz``). The whole corpus is read into memory, which suits up to a few hundred
thousand passages.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from agent_gym_searchqa.questions import SearchQATask, task_from_mapping
from agent_gym_searchqa.world import World

__all__ = ["Passage", "load_corpus", "load_questions", "world_passages"]


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


def _split_contents(contents: str) -> tuple[str, str]:
    """Search-R1's ``"Title"\\nText`` -> (title, text); one line -> (its first words, the line)."""
    head, sep, rest = contents.partition("\n")
    if not sep:
        return " ".join(contents.split()[:8]), contents
    return head.strip().strip('"').strip(), rest.strip()


def load_corpus(path: str | os.PathLike[str]) -> list[Passage]:
    """Passages from a JSONL file of ``{"id", "contents"}`` (optional ``title``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line is not an object, lacks ``id`` or ``contents``, or repeats an id (named).
    """
    passages: list[Passage] = []
    seen: set[str] = set()
    for number, record in _records(path, "corpus"):
        missing = [k for k in ("id", "contents") if k not in record]
        if missing:
            raise ValueError(f"{path}:{number}: a corpus line needs the keys id and contents; missing {missing}")
        doc_id, contents = str(record["id"]), str(record["contents"])
        if doc_id in seen:
            raise ValueError(f"{path}:{number}: the doc id {doc_id!r} appears twice; ids must be unique")
        seen.add(doc_id)
        if record.get("title"):
            title, text = str(record["title"]).strip(), contents
            first, sep, rest = text.partition("\n")
            if sep and first.strip().strip('"') == title:
                text = rest.strip()  # "Title\nText" with the title given again: keep the text once
        else:
            title, text = _split_contents(contents)
        passages.append(Passage(doc_id, title, text))
    if not passages:
        raise ValueError(f"the corpus file {path} holds no passages")
    return passages


def load_questions(path: str | os.PathLike[str], split: str = "train") -> list[SearchQATask]:
    """Questions from a JSONL file of ``{"question", "golden_answers"}`` (optional ``id``; without
    one, a question's id is ``"<split>-<n>"``, n counting from 0 in file order).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line lacks a field or has empty answers (file and line named), or the file is empty.
    """
    tasks: list[SearchQATask] = []
    for number, record in _records(path, "questions"):
        try:
            tasks.append(task_from_mapping(record, default_id=f"{split}-{len(tasks)}"))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None
    if not tasks:
        raise ValueError(f"the questions file {path} holds no questions")
    return tasks
