"""The ``search`` and ``open`` tools over one env's index, and the executor that names their errors.

Every result is capped: a search shows at most ``top_k`` passages, each as its id, title and the first
``snippet_chars`` characters of its text; ``open`` shows one passage, cut at ``max_passage_chars``;
and the env's executor cuts any tool message at ``max_result_chars``. Retrieved text reaches the
policy as tool turns (env tokens, masked in training). Results are rendered by the jinja2 templates
``searchqa_results.j2`` and ``searchqa_passage.j2`` (swap them with ``prompt_dir=``).

Bad input is a tool error the policy reads and the env counts, never an exception out of ``step``:
an empty query (kind ``empty_query``) or an id the corpus does not hold (kind ``unknown_doc_id``).
"""

from __future__ import annotations

from typing import Any

from agent_gym.core.prompts import PromptTemplates
from agent_gym.tools import Tool, ToolError, tool

from agent_gym_searchqa.index import SearchIndex

__all__ = ["CorpusTools", "SearchInputError"]


class SearchInputError(ToolError):
    """Bad input to ``search`` or ``open``; ``kind`` is the error kind counted in ``info`` (the tool
    executor reports a ToolError's kind)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message, kind=kind)


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with ``...`` when cut."""
    if len(text) <= limit:
        return text
    head = text[: max(0, limit - 3)]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "..."


class CorpusTools:
    """``search(query)`` and ``open(doc_id)`` over ``index``.

    Args:
        index: the passages and their BM25 index.
        prompts: the env's templates (the result formats).
        top_k: passages per search.
        snippet_chars: characters of each passage's text a search shows.
        max_passage_chars: characters of a passage ``open`` shows.
    """

    def __init__(self, index: SearchIndex, prompts: PromptTemplates, *, top_k: int, snippet_chars: int, max_passage_chars: int):
        for name, value in (("top_k", top_k), ("snippet_chars", snippet_chars), ("max_passage_chars", max_passage_chars)):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.index = index
        self.prompts = prompts
        self.top_k = int(top_k)
        self.snippet_chars = int(snippet_chars)
        self.max_passage_chars = int(max_passage_chars)

    def tools(self) -> list[Tool]:
        """The two tools, bound to this corpus."""
        return [tool(self.search, name="search"), tool(self.open_passage, name="open")]

    def problem(self, name: str, arguments: dict[str, Any]) -> SearchInputError | None:
        """The input error of a call with validated ``arguments`` (``None``: it can run)."""
        if name == "search" and not str(arguments.get("query", "")).strip():
            return SearchInputError(
                "empty_query", 'the query is empty: search with a few words, e.g. a name or a title: {"query": "Velmont Press"}'
            )
        if name == "open":
            doc_id = str(arguments.get("doc_id", "")).strip()
            if doc_id not in self.index.by_id:
                return SearchInputError(
                    "unknown_doc_id",
                    f"no passage has the id {doc_id!r}: use an id exactly as a search result shows it (after 'id:')",
                )
        return None

    def search(self, query: str) -> str:
        """Search the encyclopedia. Returns the best-matching passages: their ids, titles and beginnings.

        Args:
            query: A few words to look for, such as a name or a title.
        """
        error = self.problem("search", {"query": query})
        if error is not None:
            raise error
        hits = self.index.search(query, self.top_k)
        results = [
            {"rank": rank, "id": h.passage.id, "title": h.passage.title, "snippet": _cut(h.passage.text, self.snippet_chars)}
            for rank, h in enumerate(hits, 1)
        ]
        return self.prompts.render("searchqa_results.j2", query=query.strip(), results=results)

    def open_passage(self, doc_id: str) -> str:
        """Open one passage by its id (as a search result shows it) and read its whole text.

        Args:
            doc_id: The passage id from a search result.
        """
        error = self.problem("open", {"doc_id": doc_id})
        if error is not None:
            raise error
        passage = self.index.by_id[doc_id.strip()]
        return self.prompts.render(
            "searchqa_passage.j2", id=passage.id, title=passage.title, text=_cut(passage.text, self.max_passage_chars)
        )
