"""The bm25s index is built once per corpus and found again: in this process, and on disk by a hash
of the corpus content (builds are counted; nothing is timed)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym_searchqa import index as index_module
from agent_gym_searchqa.corpus import Passage
from agent_gym_searchqa.index import STATS, clear_memory_cache, corpus_key, index_dir, load_or_build

PASSAGES = [
    Passage("a", "Velmont Press", "Velmont Press is a publishing house founded by Ivo Dadov."),
    Passage("b", "Ivo Dadov", "Ivo Dadov was born in Karth."),
    Passage("c", "Karth", "Karth is a city in Morvania."),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty disk cache and no index kept in this process."""
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    clear_memory_cache()
    yield tmp_path
    clear_memory_cache()


def test_a_second_env_on_the_same_corpus_loads_the_index(cache, tokenizer):
    before = STATS.copy()
    gym.make("AgentR1/SearchQA-v0", tokenizer=tokenizer)
    assert STATS["built"] - before["built"] == 1 and STATS["loaded"] == before["loaded"]
    key = gym.make("AgentR1/SearchQA-v0", tokenizer=tokenizer, difficulty="hard").unwrapped.index.key
    assert STATS["built"] - before["built"] == 1 and STATS["memory"] - before["memory"] == 1  # kept in memory
    folder = index_dir(key)
    assert folder.is_dir() and folder.parent == cache / "searchqa"
    clear_memory_cache()  # as a new process would: the disk cache only
    gym.make("AgentR1/SearchQA-v0", tokenizer=tokenizer, split="test")
    assert STATS["built"] - before["built"] == 1 and STATS["loaded"] - before["loaded"] == 1
    assert not [p for p in folder.parent.iterdir() if ".tmp" in p.name]  # no temporary folder left


def test_the_key_is_the_content(cache):
    assert corpus_key(PASSAGES) == corpus_key(list(PASSAGES))
    edited = [*PASSAGES[:2], Passage("c", "Karth", "Karth is a city in Morvania!")]
    assert corpus_key(edited) != corpus_key(PASSAGES)
    shifted = [Passage("a", "Velmont Press", "Velmont Press is"), Passage("b", "", "")]
    assert corpus_key(shifted) != corpus_key([Passage("a", "Velmont Press", "Velmont Press"), Passage("b", "is", "")])
    before = STATS.copy()
    load_or_build(PASSAGES)
    load_or_build(edited)
    assert STATS["built"] - before["built"] == 2


def test_no_cache_and_a_damaged_cache(cache, monkeypatch):
    before = STATS.copy()
    load_or_build(PASSAGES, cache=False)
    assert not (cache / "searchqa").exists() and STATS["built"] - before["built"] == 1
    index = load_or_build(PASSAGES)
    clear_memory_cache()
    for file in index_dir(index.key).iterdir():
        file.write_text("not an index")
    again = load_or_build(PASSAGES)  # rebuilt and replaced, not an error
    assert STATS["built"] - before["built"] == 3
    assert [h.passage.id for h in again.search("Karth city", 1)] == ["c"]


def test_search_ranks_with_bm25s_and_skips_unrelated_passages(cache):
    index = load_or_build(PASSAGES)
    assert isinstance(index.retriever, index_module.bm25s.BM25)
    hits = index.search("Who founded Velmont Press?", 3)
    assert hits[0].passage.id == "a" and all(h.score > 0 for h in hits)
    assert [h.passage.id for h in index.search("Dadov born", 2)] == ["b", "a"]
    assert index.search("zzzz qqqq", 3) == [] and index.search("the of", 3) == []
    assert len(index.search("Karth", 100)) == 2  # k beyond the corpus: every matching passage


def test_top_rows_keeps_the_best_positive_scores_ties_in_row_order():
    import numpy as np

    from agent_gym_searchqa.index import top_rows

    scores = np.array([0.0, 2.0, 5.0, 2.0, 0.0, 2.0, 1.0], dtype=np.float32)
    assert top_rows(scores, 2) == [(2, 5.0), (1, 2.0)]
    assert top_rows(scores, 3) == [(2, 5.0), (1, 2.0), (3, 2.0)]  # three tie at 2.0: the lowest rows first
    assert top_rows(scores, 10) == [(2, 5.0), (1, 2.0), (3, 2.0), (5, 2.0), (6, 1.0)]  # zeros left out
    assert top_rows(np.zeros(4, dtype=np.float32), 3) == []
