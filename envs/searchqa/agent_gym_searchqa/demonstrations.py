"""Search demonstrations for a supervised warm start on ``AgentR1/SearchQA-v0``.

A small instruction model given the env's prompt searches, but for the system prompt's example
(``Velmont Press``) rather than the question's names, and never answers (docs/performance.md), so an RL
run from it sees no reward to learn from. A generated question knows its chain
(:attr:`~agent_gym_searchqa.questions.SearchQATask.supporting_docs`: the passage of every entity on it,
start first), so an expert can be written down: search for the start name from the question; find the
chain's passage among the results; read the next name (or the answer) there, opening the passage when
the result's snippet is cut before it; search that name; and answer once the last passage states the
answer.

Every demonstration is *grounded*: the expert only ever types a name the context already shows (the
question, or a result it has read), and only opens an id a search showed it. :func:`search_turns`
runs the env's own tools to check this while it writes the turns, so a question whose chain the
search does not surface (the passage is not in the top ``k``) is skipped rather than demonstrated with
a name from nowhere.

``examples/sft_warmstart.py --env AgentR1/SearchQA-v0`` plays these through the env (so the tool
replies and token ids are the env's own) and fine-tunes on the assistant tokens.
"""

from __future__ import annotations

from typing import Any, Iterator

__all__ = ["demonstrations", "search_turns"]


def search_turns(env: Any, task: Any) -> tuple[list[str] | None, str]:
    """The assistant turns of one grounded demonstration of ``task`` on ``env`` (a ``SearchQAEnv``).

    Returns ``(turns, "kept")``, each turn the text the assistant writes (a call in the env's tool-call
    format, the last one ``<answer>...</answer>``), or ``(None, reason)``: ``no_chain`` (a question
    without supporting docs, e.g. from your own file), ``not_found`` (a search for a name on the chain
    does not return its passage), ``not_stated`` (neither the result nor the opened passage names the
    next step), ``too_many_turns`` (the turns do not fit the env's ``max_turns``).
    """
    world = getattr(env, "world", None)
    docs = list(getattr(task, "supporting_docs", ()) or ())
    if world is None or not docs or not task.golden_answers:
        return None, "no_chain"
    tools = env.corpus_tools
    hops = len(docs) if task.hops is None else int(task.hops)
    chain = docs[:hops]  # the passages read; a chain ending on an entity lists the answer's passage too
    names = [world.entities[d].name for d in chain]
    answer = task.golden_answers[0]
    turns: list[str] = []
    for k, (doc_id, name) in enumerate(zip(chain, names)):
        following = answer if k + 1 == len(chain) else names[k + 1]
        result = tools.search(name)
        if f"id: {doc_id} |" not in result:
            return None, "not_found"
        turns.append(env.parser.format_calls([{"name": "search", "arguments": {"query": name}}]))
        if following not in _result_of(result, doc_id):
            passage = tools.open_passage(doc_id)
            if following not in passage:
                return None, "not_stated"
            turns.append(env.parser.format_calls([{"name": "open", "arguments": {"doc_id": doc_id}}]))
    turns.append(f"<answer>{answer}</answer>")
    if len(turns) > env.max_turns:
        return None, "too_many_turns"
    return turns, "kept"


def _result_of(result: str, doc_id: str) -> str:
    """The part of a rendered search result that belongs to ``doc_id`` (its title line and snippet)."""
    start = result.index(f"id: {doc_id} |")
    end = result.find("\n[", start)
    return result[start:] if end < 0 else result[start:end]


def demonstrations(env: Any, *, offset: int, limit: int) -> Iterator[tuple[str, list[str] | None, str]]:
    """``(task_id, turns, outcome)`` for the generated questions ``offset`` .. ``offset + limit - 1`` of
    ``env``'s split and difficulty (ids ``"<split>-<difficulty>-<n>"``); ``turns`` is ``None`` when the
    question is skipped, ``outcome`` says why (:func:`search_turns`)."""
    if env.world is None:
        raise ValueError("demonstrations need the generated world's questions (their chains); leave out corpus= and questions=")
    for n in range(offset, offset + limit):
        task_id = f"{env.split}-{env.difficulty}-{n}"
        turns, outcome = search_turns(env, env.get_task(task_id))
        yield task_id, turns, outcome
