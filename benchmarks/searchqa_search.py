#!/usr/bin/env python3
"""SearchQA's retrieval cost: bm25s index build time and search latency on a ~10k-passage corpus.

The corpus is the generated world at twice the default size (about 10,080 passages, seeded). It prints:

- ``world``: generating the passages;
- ``build``: tokenizing and indexing them with bm25s (``agent_gym_searchqa.index``, no cache);
- ``save`` / ``load``: writing the index to a folder and reading it back (what a second env does);
- ``search p50 / p95``: one ``SearchIndex.search(query, k)`` call, over queries that are entity names
  and generated questions (what a policy writes), after a few warm-up calls;
- ``tool p50 / p95``: the ``search`` tool as the policy sees it (search + snippets + the jinja2 result).

Nothing is asserted; the figures depend on the machine.

    python benchmarks/searchqa_search.py --scale 2 --queries 500 --k 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import bm25s

from agent_gym.core.prompts import PromptTemplates
from agent_gym_searchqa.corpus import world_passages
from agent_gym_searchqa.index import SearchIndex, load_or_build
from agent_gym_searchqa.questions import DIFFICULTIES, generate_question
from agent_gym_searchqa.tools import CorpusTools
from agent_gym_searchqa.world import WORLD_SEED, generate_world


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=2.0, help="world size, 1 = 5,040 passages (default 2)")
    parser.add_argument("--queries", type=int, default=500, help="search calls to time (default 500)")
    parser.add_argument("--k", type=int, default=3, help="passages per search (default 3)")
    args = parser.parse_args()

    world, world_s = timed(generate_world, WORLD_SEED, args.scale)
    passages = world_passages(world)
    index, build_s = timed(lambda: load_or_build(passages, cache=False))
    with tempfile.TemporaryDirectory() as folder:
        _, save_s = timed(lambda: index.retriever.save(folder, show_progress=False))
        _, load_s = timed(lambda: bm25s.BM25.load(folder, show_progress=False))
    print(f"corpus: {len(passages)} passages (world seed {WORLD_SEED}, scale {args.scale:g})")
    print(f"world {world_s * 1000:.0f} ms, build {build_s * 1000:.0f} ms, save {save_s * 1000:.0f} ms, load {load_s * 1000:.0f} ms")

    names = [e.name for e in world.entities.values()]
    questions = [generate_question(world, "train", d, n).question for d in DIFFICULTIES for n in range(100)]
    queries = [(names[i * 7919 % len(names)] if i % 2 else questions[i % len(questions)]) for i in range(args.queries)]
    tools = CorpusTools(SearchIndex(passages, index.retriever, index.key), PromptTemplates("agent_gym_searchqa"),
                        top_k=args.k, snippet_chars=200, max_passage_chars=1000)
    for query in queries[:20]:  # warm-up
        tools.search(query)
    search = [timed(index.search, q, args.k)[1] * 1000 for q in queries]
    tool = [timed(tools.search, q)[1] * 1000 for q in queries]
    for label, values in (("search", search), ("tool", tool)):
        print(f"{label} ({len(values)} queries, k={args.k}): p50 {statistics.median(values):.2f} ms, "
              f"p95 {percentile(values, 0.95):.2f} ms, max {max(values):.2f} ms")


if __name__ == "__main__":
    main()
