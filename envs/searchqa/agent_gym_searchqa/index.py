"""BM25 search over passages with ``bm25s``, the index built once and cached on disk.

Why cached: every env (and every worker process of a trainer) needs the same index; building it is
the slow part (seconds for a big corpus), loading it is milliseconds. The cache key is a sha256 of the
corpus content (every passage's id, title and text, in order) and of the indexing settings, so an edited
corpus gets a new index and an unchanged one is found again from any process. Indexes live under
``agent_gym.models.cache_dir() / "searchqa"`` (``~/.cache/agent_gym``; ``AGENT_GYM_CACHE`` moves it),
one folder each, written to a temporary folder and renamed into place so that a reader never sees a
half-written index. Where the cache cannot be written, the index is built in memory and used anyway.

Within a process the loaded indexes are kept too (:func:`clear_memory_cache` forgets them), so the
many envs of one rollout share one. :data:`STATS` counts builds and loads (tests check the reuse).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np

from agent_gym_searchqa.corpus import Passage

__all__ = ["INDEX_VERSION", "STATS", "Hit", "SearchIndex", "clear_memory_cache", "index_dir", "load_or_build", "top_rows"]

#: Bumped when what is indexed, or how, changes: old cached indexes are then not reused.
INDEX_VERSION = 1
#: ``STATS["built"]``, ``STATS["loaded"]`` (from disk), ``STATS["memory"]`` (kept in this process).
STATS: Counter[str] = Counter()

_STOPWORDS = "en"
_MEMORY: dict[str, SearchIndex] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Hit:
    """One search result: the passage and its BM25 score (higher is better)."""

    passage: Passage
    score: float


def top_rows(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` best ``(row, score)`` of a score per passage, best first, passages scoring 0 left out; equal
    scores in row order.

    Why not bm25s's own top-k: it partitions the whole score array, which takes about half a second at a
    million passages when most scores are 0 (a query of rare words), and breaks ties arbitrarily; here only
    the passages that share a word with the query are looked at, and the order is the same in every process
    (the in-process index and ``agent-gym serve-retriever`` rank alike).
    """
    rows = np.flatnonzero(scores > 0)  # ascending
    if len(rows) > k:
        values = scores[rows]
        kth = np.partition(values, len(values) - k)[len(values) - k]  # the k-th best score
        above, tied = rows[values > kth], rows[values == kth]
        rows = np.concatenate([above, tied[: k - len(above)]])
    found = scores[rows]
    order = np.lexsort((rows, -found))
    return [(int(rows[i]), float(found[i])) for i in order]


def _tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords=_STOPWORDS, return_ids=False, show_progress=False)


class SearchIndex:
    """A bm25s index over ``passages`` (their title and text)."""

    def __init__(self, passages: Sequence[Passage], retriever: bm25s.BM25, key: str):
        self.passages = list(passages)
        self.by_id = {p.id: p for p in self.passages}
        self.retriever = retriever
        self.key = key

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` passages for ``query`` (best first); passages that share no word with the
        query (score 0) are left out, so a query of unknown words finds nothing."""
        tokens = _tokenize([query])
        if not tokens[0] or not self.retriever.get_tokens_ids(tokens[0]):
            return []
        rows = top_rows(self.retriever.get_scores(tokens[0]), max(1, int(k)))
        return [Hit(self.passages[row], score) for row, score in rows]


def corpus_key(passages: Sequence[Passage]) -> str:
    """The sha256 of the corpus content and the index settings, bm25s's version included (the cache key)."""
    # bm25s's own version too: an index saved by another release is rebuilt rather than trusted.
    settings = f"searchqa-v{INDEX_VERSION}-bm25s-{bm25s.__version__}-stopwords={_STOPWORDS}\n"
    digest = hashlib.sha256(settings.encode())
    for p in passages:
        for part in (p.id, p.title, p.text):
            encoded = part.encode()
            digest.update(len(encoded).to_bytes(8, "big"))  # lengths first: no two corpora hash alike by shifting text
            digest.update(encoded)
    return digest.hexdigest()


def index_dir(key: str) -> Path:
    """Where the index of the corpus with this key is cached."""
    from agent_gym.models import cache_dir

    return cache_dir() / "searchqa" / f"bm25s-{key[:32]}"


def _build(passages: Sequence[Passage]) -> bm25s.BM25:
    retriever = bm25s.BM25()
    tokens = bm25s.tokenize([f"{p.title}\n{p.text}" for p in passages], stopwords=_STOPWORDS, show_progress=False)
    retriever.index(tokens, show_progress=False)
    STATS["built"] += 1
    return retriever


def _save(retriever: bm25s.BM25, target: Path) -> None:
    """Write the index next to ``target`` and rename it into place (a concurrent writer may win)."""
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}-{threading.get_ident()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        retriever.save(str(tmp), show_progress=False)
        os.replace(tmp, target)
    except OSError:
        pass  # not writable, or another process renamed its copy first: this one is used from memory
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_or_build(passages: Sequence[Passage], *, cache: bool = True) -> SearchIndex:
    """The index of ``passages``: kept in this process, else loaded from the disk cache, else built
    (and saved there). ``cache=False`` always builds and neither reads nor writes the disk cache."""
    key = corpus_key(passages)
    if not cache:
        return SearchIndex(passages, _build(passages), key)
    with _LOCK:
        if key in _MEMORY:
            STATS["memory"] += 1
            return _MEMORY[key]
        folder = index_dir(key)
        retriever = None
        if folder.is_dir():
            try:
                retriever = bm25s.BM25.load(str(folder), show_progress=False)
                STATS["loaded"] += 1
            except (OSError, ValueError, KeyError):
                retriever = None  # a damaged cache entry: rebuilt below and replaced
                shutil.rmtree(folder, ignore_errors=True)
        if retriever is None:
            retriever = _build(passages)
            _save(retriever, folder)
        index = _MEMORY[key] = SearchIndex(passages, retriever, key)
        return index


def clear_memory_cache() -> None:
    """Forget the indexes kept in this process (the disk cache stays)."""
    with _LOCK:
        _MEMORY.clear()
