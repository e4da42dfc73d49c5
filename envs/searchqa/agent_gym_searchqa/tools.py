"""The ``search`` and ``open`` tools over one env's index, and the executor that names their errors.

Every result is capped: a search shows at most ``top_k`` passages, each as its id, title and the first
``snippet_chars`` characters of its text; ``open`` shows one passage, cut at ``max_passage_chars``;
and the env's executor cuts any tool message at ``max_result_chars``. Retrieved text reaches the
policy as tool turns (env tokens, masked in training). Results are rendered by the jinja2 templates
``searchqa_results.j2`` and ``searchqa_passage.j2`` (swap them with ``prompt_dir=``).

Bad input is a tool error the policy reads and the env counts, never an exception out of ``step``:
an empty query (kind ``empty_query``) or an id the corpus does not hold (kind ``unknown_doc_id``).

With a retrieval server (``remote``, :mod:`agent_gym_searchqa.remote`) ``search`` asks the server (an async
tool: the searches of episodes in flight share requests) and its failures are tool errors too (kinds
``retriever_*``); Search-R1's protocol has no look-up by id, so ``open`` shows the passages that this
episode's searches returned (the server sends them whole; :attr:`CorpusTools.retrieved`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_gym.core.prompts import PromptTemplates
from agent_gym.tools import Tool, ToolError, tool

from agent_gym_searchqa.corpus import Passage
from agent_gym_searchqa.index import SearchIndex

if TYPE_CHECKING:
    from agent_gym_searchqa.remote import RemoteHit, RetrieverClient

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


_SEARCH_DOC = """Search the encyclopedia. Returns the best-matching passages: their ids, titles and beginnings.

        Args:
            query: A few words to look for, such as a name or a title.
        """


class CorpusTools:
    """``search(query)`` and ``open(doc_id)`` over ``index``, or over a retrieval server (``remote``).

    Args:
        index: the passages and their BM25 index (``None`` with ``remote``).
        prompts: the env's templates (the result formats).
        top_k: passages per search.
        snippet_chars: characters of each passage's text a search shows.
        max_passage_chars: characters of a passage ``open`` shows.
        remote: the client of a ``/retrieve`` server to search instead of ``index``.
    """

    def __init__(self, index: SearchIndex | None, prompts: PromptTemplates, *, top_k: int, snippet_chars: int,
                 max_passage_chars: int, remote: RetrieverClient | None = None):
        if (index is None) == (remote is None):
            raise ValueError("CorpusTools searches either a local index or a retrieval server: pass exactly one")
        for name, value in (("top_k", top_k), ("snippet_chars", snippet_chars), ("max_passage_chars", max_passage_chars)):
            if int(value) < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.index = index
        self.prompts = prompts
        self.top_k = int(top_k)
        self.snippet_chars = int(snippet_chars)
        self.max_passage_chars = int(max_passage_chars)
        self.remote = remote
        #: With ``remote``: the passages this episode's searches returned, by id (what ``open`` can show);
        #: the env empties it at every reset and keeps it in its snapshots.
        self.retrieved: dict[str, Passage] = {}

    def tools(self) -> list[Tool]:
        """The two tools, bound to this corpus."""
        if self.remote is None:
            return [tool(self.search, name="search"), tool(self.open_passage, name="open")]
        # The client's own timeout answers first (a retriever_timeout); the executor's is the backstop.
        backstop = 2 * self.remote.timeout_s + self.remote.window_s + 5.0
        return [tool(self.asearch, name="search", timeout_s=backstop), tool(self.open_passage, name="open")]

    def _passage(self, doc_id: str) -> Passage | None:
        if self.remote is not None:
            return self.retrieved.get(doc_id)
        assert self.index is not None
        return self.index.by_id.get(doc_id)

    def problem(self, name: str, arguments: dict[str, Any]) -> SearchInputError | None:
        """The input error of a call with validated ``arguments`` (``None``: it can run)."""
        if name == "search" and not str(arguments.get("query", "")).strip():
            return SearchInputError(
                "empty_query", 'the query is empty: search with a few words, e.g. a name or a title: {"query": "Velmont Press"}'
            )
        if name == "open":
            doc_id = str(arguments.get("doc_id", "")).strip()
            if self._passage(doc_id) is None and self.remote is not None:
                return SearchInputError(
                    "unknown_doc_id",
                    f"no passage with the id {doc_id!r} was found by a search of this question: "
                    "open an id exactly as a search result shows it (after 'id:'), after that search",
                )
            if self._passage(doc_id) is None:
                return SearchInputError(
                    "unknown_doc_id",
                    f"no passage has the id {doc_id!r}: use an id exactly as a search result shows it (after 'id:')",
                )
        return None

    def search(self, query: str) -> str:
        error = self.problem("search", {"query": query})
        if error is not None:
            raise error
        if self.remote is not None:
            return self._render_remote(query, self.remote.search(query.strip(), self.top_k))
        assert self.index is not None
        return self._render(query, [h.passage for h in self.index.search(query, self.top_k)])

    async def asearch(self, query: str) -> str:
        error = self.problem("search", {"query": query})
        if error is not None:
            raise error
        if self.remote is None:
            return self.search(query)
        return self._render_remote(query, await self.remote.asearch(query.strip(), self.top_k))

    search.__doc__ = asearch.__doc__ = _SEARCH_DOC  # one schema description, whichever is the tool

    def _render_remote(self, query: str, hits: list[RemoteHit]) -> str:
        passages = [Passage(h.id, h.title, h.text) for h in hits[: self.top_k]]  # a server may send more than asked
        self.retrieved.update((p.id, p) for p in passages)
        return self._render(query, passages)

    def _render(self, query: str, passages: list[Passage]) -> str:
        results = [
            {"rank": rank, "id": p.id, "title": p.title, "snippet": _cut(p.text, self.snippet_chars)}
            for rank, p in enumerate(passages, 1)
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
        passage = self._passage(doc_id.strip())
        assert passage is not None  # problem() refused an unknown id
        return self.prompts.render(
            "searchqa_passage.j2", id=passage.id, title=passage.title, text=_cut(passage.text, self.max_passage_chars)
        )
