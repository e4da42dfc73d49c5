"""Multi-hop question answering with a search tool over a local corpus (``agent_gym_searchqa``).

Registered on ``import agent_gym`` through the ``agent_gym.envs`` entry point :func:`register`:

- ``AgentR1/SearchQA-v0``: ``search(query)`` and ``open(doc_id)`` over a BM25 index (bm25s) of a
  generated fictional encyclopedia (default) or of your own Search-R1-format corpus; the answer goes
  in ``<answer>...</answer>``; reward 1.0 for an exact match after SQuAD normalisation.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``AgentR1/SearchQA-v0`` (an import string only: cheap)."""
    from agent_gym.registry import register_env

    register_env(
        "SearchQA-v0",
        "agent_gym_searchqa.env:SearchQAEnv",
        description="Multi-hop QA with search/open tools over a local BM25 corpus, up to 8 turns; exact-match reward",
        tools=("search", "open"),
        package="agent-r1-gym-searchqa",
    )
