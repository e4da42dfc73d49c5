"""Loading the GSM8K dataset (openai/gsm8k, config "main").

The data is never bundled with this package. :func:`load_gsm8k` looks for it in this order:

1. an explicit ``data_dir`` argument (the CLI's ``--data-dir``);
2. the ``AGENT_GYM_GSM8K_DIR`` environment variable;
3. the Hugging Face hub through the optional ``datasets`` library.

A directory (1 or 2) must hold the original ``train.jsonl`` and ``test.jsonl`` files, one JSON
object ``{"question": ..., "answer": "...reasoning...\\n#### 18"}`` per line.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DATA_DIR_ENV_VAR",
    "HF_DATASET",
    "SPLITS",
    "GSM8KNotFoundError",
    "GSM8KTask",
    "load_gsm8k",
]

#: Environment variable naming the directory that holds ``train.jsonl`` and ``test.jsonl``.
DATA_DIR_ENV_VAR = "AGENT_GYM_GSM8K_DIR"
#: Hugging Face hub dataset id used as the last-resort source.
HF_DATASET = "openai/gsm8k"
#: Valid split names.
SPLITS: tuple[str, ...] = ("train", "test")

# Separator between the reference reasoning and the final answer in GSM8K's "answer" field.
_ANSWER_MARKER = "####"


class GSM8KNotFoundError(FileNotFoundError):
    """Raised when a GSM8K split cannot be found in any of the configured sources."""


@dataclass(frozen=True)
class GSM8KTask:
    """One GSM8K problem.

    Attributes:
        id: ``"<split>-<index>"``, where index is the 0-based record position in the split
            (equal to the line index of the original JSONL file and the row of the hub dataset).
        question: The problem statement.
        answer: The raw final answer: the text after the last ``####`` of the reference, stripped
            (e.g. ``"18"``, ``"-3"``, ``"1,080"``). Not normalised; compare through
            :func:`agent_gym_gsm8k.reward.normalize_number`.
        solution: The full reference answer field: step-by-step reasoning (with GSM8K's
            ``<<a*b=c>>`` calculator annotations) ending in the ``#### <answer>`` line.
    """

    id: str
    question: str
    answer: str
    solution: str


def _parse_record(record: object, *, split: str, index: int, where: str) -> GSM8KTask:
    """Validate one raw record and turn it into a :class:`GSM8KTask`.

    ``where`` names the record's origin (file and line) for error messages.
    """
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question")
    solution = record.get("answer")
    if not isinstance(question, str) or not isinstance(solution, str):
        raise ValueError(f"{where}: expected string fields 'question' and 'answer'")
    if _ANSWER_MARKER not in solution:
        raise ValueError(f"{where}: 'answer' has no '{_ANSWER_MARKER} <final answer>' line")
    answer = solution.rsplit(_ANSWER_MARKER, 1)[1].strip()
    if not answer:
        raise ValueError(f"{where}: the final answer after '{_ANSWER_MARKER}' is empty")
    return GSM8KTask(id=f"{split}-{index}", question=question, answer=answer, solution=solution)


# The key includes mtime and size so an edited file is re-read instead of served stale from cache.
@functools.lru_cache(maxsize=16)
def _load_jsonl_cached(path: str, split: str, mtime_ns: int, size: int) -> tuple[GSM8KTask, ...]:
    """Parse a GSM8K JSONL file; cached per (resolved path, split, file version)."""
    tasks: list[GSM8KTask] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                # Tolerate blank lines (e.g. a trailing empty line added by an editor).
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: malformed JSON line ({exc.msg})") from exc
            tasks.append(_parse_record(record, split=split, index=len(tasks), where=where))
    return tuple(tasks)


@functools.lru_cache(maxsize=4)
def _load_hf_cached(split: str) -> tuple[GSM8KTask, ...]:
    """Load a split from the Hugging Face hub; raises whatever ``datasets`` raises."""
    import datasets  # optional dependency, imported lazily so the package never requires it

    rows = datasets.load_dataset(HF_DATASET, "main", split=split)
    return tuple(
        _parse_record(row, split=split, index=i, where=f"{HF_DATASET}[{split}][{i}]")
        for i, row in enumerate(rows)
    )


def _not_found(split: str, tried: list[str]) -> GSM8KNotFoundError:
    """Build the single error message that explains both ways of providing the data."""
    return GSM8KNotFoundError(
        f"GSM8K split {split!r} not found. Either set {DATA_DIR_ENV_VAR} (or pass "
        f"data_dir=/--data-dir) to a directory holding the original train.jsonl and test.jsonl "
        f"from {HF_DATASET}, or install `datasets` with access to the Hugging Face hub to load "
        f"{HF_DATASET}. Tried: " + "; ".join(tried)
    )


def load_gsm8k(split: str, data_dir: str | os.PathLike[str] | None = None) -> list[GSM8KTask]:
    """Load one GSM8K split as a list of :class:`GSM8KTask`.

    Args:
        split: ``"train"`` (7473 problems) or ``"test"`` (1319 problems).
        data_dir: Directory holding ``<split>.jsonl``. Defaults to ``$AGENT_GYM_GSM8K_DIR``;
            when neither is set, the split is loaded from the Hugging Face hub with ``datasets``.

    Returns:
        A fresh list (safe to shuffle or mutate); the parsed tasks are cached in-process, so
        repeated calls (one per environment instance) cost a ``stat`` and a list copy.

    Raises:
        ValueError: ``split`` is not a valid split, or a line of the file is malformed (the
            message names the file and 1-based line number).
        GSM8KNotFoundError: The data could not be found. When a directory is configured (argument
            or environment variable) it is authoritative: a missing ``<split>.jsonl`` there is an
            error naming the missing path, not a silent fallback to the network.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}; valid splits: {', '.join(SPLITS)}")

    tried: list[str] = []
    if data_dir is not None:
        directory: str | os.PathLike[str] | None = data_dir
        source = "data_dir argument"
    else:
        directory = os.environ.get(DATA_DIR_ENV_VAR) or None
        source = f"${DATA_DIR_ENV_VAR}"

    if directory is not None:
        path = (Path(directory).expanduser() / f"{split}.jsonl").resolve()
        try:
            st = path.stat()
        except OSError as exc:
            tried.append(f"{source} -> {path} is missing ({exc.strerror or exc})")
            raise _not_found(split, tried) from exc
        if not path.is_file():
            tried.append(f"{source} -> {path} is not a file")
            raise _not_found(split, tried)
        return list(_load_jsonl_cached(str(path), split, st.st_mtime_ns, st.st_size))

    tried.append(f"${DATA_DIR_ENV_VAR} is not set")
    try:
        return list(_load_hf_cached(split))
    except ImportError as exc:
        tried.append("the `datasets` library is not installed")
        raise _not_found(split, tried) from exc
    except Exception as exc:  # offline, no hub access, auth, schema change: report and give up
        tried.append(
            f"datasets.load_dataset({HF_DATASET!r}, 'main') failed: {type(exc).__name__}: {exc}"
        )
        raise _not_found(split, tried) from exc
