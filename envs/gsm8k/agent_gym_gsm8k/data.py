"""Loading the GSM8K dataset (openai/gsm8k, config "main").

The original files ship with this package (``agent_gym_gsm8k/dataset/``: ``train.jsonl.gz`` and
``test.jsonl.gz``, gzip-compressed and byte for byte the upstream
https://github.com/openai/grade-school-math files once decompressed; MIT licence, ``LICENSE`` beside
them; Cobbe et al. 2021, arXiv:2110.14168), so nothing needs to be set up or downloaded.
:func:`load_gsm8k` takes the first source that is configured, in this order:

1. an explicit ``data_dir`` argument (the envs' ``data_dir=``, the CLI's ``--data-dir``);
2. the ``AGENT_GYM_GSM8K_DIR`` environment variable (an empty value counts as unset);
3. the packaged copy (the default: offline, no variable, no extra dependency).

The value of 1 or 2 is either a directory holding the original ``train.jsonl`` and ``test.jsonl``,
one JSON object ``{"question": ..., "answer": "...reasoning...\\n#### 18"}`` per line, or
``"hf://openai/gsm8k"`` (:data:`HUB_SOURCE`; generally ``hf://<dataset id>`` for a hub dataset laid out
like it: config ``"main"``, columns ``question`` and ``answer``), which loads the split from the
Hugging Face hub through ``datasets`` (the ``hub`` extra: ``pip install 'agent-r1-gym-gsm8k[hub]'``,
or ``pip install -e './envs/gsm8k[hub]'`` in a checkout). The hub is used only when asked for like this.
A configured source is authoritative: a missing folder or file there is a :class:`GSM8KNotFoundError`
naming the path, never a silent fall-back to the packaged copy.

Tasks get ids ``"<split>-<index>"`` in file (or hub row) order; the packaged copy and the original files
give identical tasks.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from agent_gym.core.grading import ANSWER_MARKER, after_marker

if TYPE_CHECKING:  # importlib.resources.abc is Python >= 3.11
    from importlib.abc import Traversable

__all__ = [
    "DATA_DIR_ENV_VAR",
    "HF_DATASET",
    "HUB_PREFIX",
    "HUB_SOURCE",
    "SPLITS",
    "GSM8KNotFoundError",
    "GSM8KTask",
    "load_gsm8k",
]

#: Environment variable naming the directory that holds ``train.jsonl`` and ``test.jsonl`` (or
#: :data:`HUB_SOURCE`).
DATA_DIR_ENV_VAR = "AGENT_GYM_GSM8K_DIR"
#: Hugging Face hub dataset id of GSM8K.
HF_DATASET = "openai/gsm8k"
#: Prefix of a ``data_dir`` / ``$AGENT_GYM_GSM8K_DIR`` value that names a hub dataset instead of a folder.
HUB_PREFIX = "hf://"
#: The ``data_dir`` value that loads GSM8K from the Hugging Face hub (needs ``datasets``).
HUB_SOURCE = HUB_PREFIX + HF_DATASET
#: Valid split names.
SPLITS: tuple[str, ...] = ("train", "test")

# The folder of this package that holds the packaged copy (<split>.jsonl.gz, LICENSE, README.md).
_PACKAGED_DIR = "dataset"
# What to run when the hub is asked for but `datasets` is missing (the extra "hub" of agent-r1-gym-gsm8k;
# spelled out because a checkout installs the package from ./envs/gsm8k, not by name).
_HUB_INSTALL = "pip install 'datasets>=2.18'"


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
            :func:`agent_gym.core.grading.normalize_number`.
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
    answer = after_marker(solution, first_line=False)
    if answer is None:
        raise ValueError(f"{where}: 'answer' has no '{ANSWER_MARKER} <final answer>' line")
    if not answer:
        raise ValueError(f"{where}: the final answer after '{ANSWER_MARKER}' is empty")
    return GSM8KTask(id=f"{split}-{index}", question=question, answer=answer, solution=solution)


def _parse_lines(lines: Iterable[str], *, split: str, where: str) -> tuple[GSM8KTask, ...]:
    """Parse the lines of a GSM8K JSONL file; ``where`` names the file in error messages."""
    tasks: list[GSM8KTask] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            # Tolerate blank lines (e.g. a trailing empty line added by an editor).
            continue
        at = f"{where}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{at}: malformed JSON line ({exc.msg})") from exc
        tasks.append(_parse_record(record, split=split, index=len(tasks), where=at))
    return tuple(tasks)


# The key includes mtime and size so an edited file is re-read instead of served stale from cache.
@functools.lru_cache(maxsize=16)
def _load_jsonl_cached(path: str, split: str, mtime_ns: int, size: int) -> tuple[GSM8KTask, ...]:
    """Parse a GSM8K JSONL file; cached per (resolved path, split, file version)."""
    with open(path, encoding="utf-8") as f:
        return _parse_lines(f, split=split, where=path)


def _packaged_file(split: str) -> Traversable:
    """The packaged, gzip-compressed copy of ``<split>.jsonl``."""
    return resources.files(__package__) / _PACKAGED_DIR / f"{split}.jsonl.gz"


@functools.lru_cache(maxsize=4)
def _load_packaged_cached(split: str) -> tuple[GSM8KTask, ...]:
    """Parse the packaged copy of a split (decompressed on the fly); cached per split."""
    resource = _packaged_file(split)
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        return _parse_lines(f, split=split, where=str(resource))


@functools.lru_cache(maxsize=4)
def _load_hf_cached(dataset_id: str, split: str) -> tuple[GSM8KTask, ...]:
    """Load a split from the Hugging Face hub; raises whatever ``datasets`` raises."""
    import datasets  # optional dependency, imported lazily so the package never requires it

    rows = datasets.load_dataset(dataset_id, "main", split=split)
    return tuple(
        _parse_record(row, split=split, index=i, where=f"{dataset_id}[{split}][{i}]")
        for i, row in enumerate(rows)
    )


def _not_found(split: str, tried: list[str]) -> GSM8KNotFoundError:
    """Build the single error message that says what was tried and every way to provide the data."""
    return GSM8KNotFoundError(
        f"GSM8K split {split!r} not found. Either set {DATA_DIR_ENV_VAR} (or pass "
        f"data_dir=/--data-dir) to a directory holding the original train.jsonl and test.jsonl "
        f"from {HF_DATASET}, or set neither to use the copy packaged with agent-r1-gym-gsm8k; "
        f"{HUB_SOURCE!r} in their place loads {HF_DATASET} from the Hugging Face hub "
        f"(needs `{_HUB_INSTALL}`). Tried: " + "; ".join(tried)
    )


def _load_hub(location: str, split: str, source: str) -> list[GSM8KTask]:
    dataset_id = location[len(HUB_PREFIX):].strip("/")
    if not dataset_id:
        raise ValueError(f"{source} is {location!r}: name the hub dataset, e.g. {HUB_SOURCE!r}")
    try:
        return list(_load_hf_cached(dataset_id, split))
    except ImportError as exc:
        tried = [f"{source} -> {location}: the `datasets` library is not installed ({_HUB_INSTALL})"]
        raise _not_found(split, tried) from exc
    except Exception as exc:  # offline, no hub access, auth, schema change: report and give up
        tried = [
            f"{source} -> datasets.load_dataset({dataset_id!r}, 'main', split={split!r}) failed: "
            f"{type(exc).__name__}: {exc}"
        ]
        raise _not_found(split, tried) from exc


def _load_dir(directory: str | os.PathLike[str], split: str, source: str) -> list[GSM8KTask]:
    path = (Path(directory).expanduser() / f"{split}.jsonl").resolve()
    try:
        st = path.stat()
    except OSError as exc:
        what = "does not exist" if not path.parent.exists() else "has no " + path.name
        tried = [f"{source} -> {path} is missing ({exc.strerror or exc}; the folder {what})"]
        raise _not_found(split, tried) from exc
    if not path.is_file():
        raise _not_found(split, [f"{source} -> {path} is not a file"])
    return list(_load_jsonl_cached(str(path), split, st.st_mtime_ns, st.st_size))


def _load_packaged(split: str) -> list[GSM8KTask]:
    resource = _packaged_file(split)
    if not resource.is_file():
        tried = [
            f"${DATA_DIR_ENV_VAR} is not set; the packaged copy {resource} is missing "
            "(reinstall agent-r1-gym-gsm8k: its wheel ships it)"
        ]
        raise _not_found(split, tried)
    return list(_load_packaged_cached(split))


def load_gsm8k(split: str, data_dir: str | os.PathLike[str] | None = None) -> list[GSM8KTask]:
    """Load one GSM8K split as a list of :class:`GSM8KTask`.

    Args:
        split: ``"train"`` (7473 problems) or ``"test"`` (1319 problems).
        data_dir: Directory holding ``<split>.jsonl``, or ``"hf://openai/gsm8k"`` (:data:`HUB_SOURCE`)
            to load the split from the Hugging Face hub with ``datasets``. Defaults to
            ``$AGENT_GYM_GSM8K_DIR`` (same two forms); when neither is set, the copy packaged with
            this package is used (offline).

    Returns:
        A fresh list (safe to shuffle or mutate); the parsed tasks are cached in-process, so
        repeated calls (one per environment instance) cost at most a ``stat`` and a list copy.

    Raises:
        ValueError: ``split`` is not a valid split, or a line of the file is malformed (the
            message names the file and 1-based line number).
        GSM8KNotFoundError: The data could not be found. A configured source (argument or
            environment variable) is authoritative: a missing ``<split>.jsonl`` there, or a failing
            hub, is an error naming the path (or dataset), not a silent fall-back.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown GSM8K split {split!r}; valid splits: {', '.join(SPLITS)}")

    if data_dir is not None:
        location: str | os.PathLike[str] | None = data_dir
        source = "data_dir argument"
    else:
        location = os.environ.get(DATA_DIR_ENV_VAR) or None
        source = f"${DATA_DIR_ENV_VAR}"
    if location is None:
        return _load_packaged(split)
    if isinstance(location, str) and location.startswith(HUB_PREFIX):
        return _load_hub(location, split, source)
    return _load_dir(location, split, source)
