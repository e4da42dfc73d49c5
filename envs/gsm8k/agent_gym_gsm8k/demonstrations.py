"""Calculator demonstrations from GSM8K's own solutions, for a supervised tool-use warm start.

Every GSM8K solution marks its arithmetic with calculator annotations, ``48/2 = <<48/2=24>>24``: the
dataset's authors put them there for a calculator. :func:`calculator_turns` turns one solution into a
tool-use demonstration in the shape :meth:`agent_gym.AgentEnv.tool_demonstration` and
``TOOL_DEMONSTRATION`` use: the calls of each assistant turn, then the closing answer. Played through
``AgentR1/GSM8KTool-v0`` (``examples/sft_warmstart.py`` does, through :func:`demonstrations`), each demonstration becomes
the exact token ids of an episode, its tool replies computed by the env's own calculator.

Small models such as SmolLM2-135M-Instruct make no tool call from the instructions alone; a short
supervised pass on these episodes gives an RL run on ``GSM8KTool-v0`` multi-turn episodes to learn from.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

__all__ = ["calculator_turns", "demonstrations", "strip_annotations"]

# <<expression=result>>; the expression is everything up to the last "=" (results hold no "=").
_ANNOTATION = re.compile(r"<<([^<>]*)=([^<>=]*)>>")


def strip_annotations(solution: str) -> str:
    """``solution`` without its ``<<expression=result>>`` calculator annotations (the text a reader sees)."""
    return _ANNOTATION.sub("", solution)


def calculator_turns(solution: str, max_turns: int = 5) -> tuple[list[list[dict[str, Any]]], str] | None:
    """One GSM8K solution as a calculator demonstration: ``(turns, answer)``.

    Each annotation becomes one ``calculate`` call in its own assistant turn, in the order written;
    ``answer`` is the solution without annotations (its reasoning, then ``#### <number>``). When there
    are more annotations than ``max_turns - 1`` turns allow (the last turn must be the answer), the
    calls are spread over the ``max_turns - 1`` turns, several calls in a turn, keeping their order.

    Returns ``None`` for a solution without annotations or without a ``####`` line: nothing to show.

    >>> turns, answer = calculator_turns("Half is 48/2 = <<48/2=24>>24.\\n#### 24")
    >>> turns
    [[{'name': 'calculate', 'arguments': {'expression': '48/2'}}]]
    >>> answer
    'Half is 48/2 = 24.\\n#### 24'
    """
    if max_turns < 2:
        raise ValueError(f"max_turns must be >= 2 (one call turn and the answer), got {max_turns}")
    if "####" not in solution:
        return None
    calls = [
        {"name": "calculate", "arguments": {"expression": expression.strip()}}
        for expression, _ in _ANNOTATION.findall(solution)
        if expression.strip()
    ]
    if not calls:
        return None
    n_turns = min(len(calls), max_turns - 1)
    # Spread the calls as evenly as possible; earlier turns take the extra ones.
    per_turn = [len(calls) // n_turns + (1 if i < len(calls) % n_turns else 0) for i in range(n_turns)]
    turns: list[list[dict[str, Any]]] = []
    start = 0
    for size in per_turn:
        turns.append(calls[start : start + size])
        start += size
    return turns, strip_annotations(solution).strip()


def demonstrations(env: Any, *, offset: int, limit: int) -> Iterator[tuple[str, list[str] | None, str]]:
    """``(task_id, turns, outcome)`` for the problems ``offset`` .. ``offset + limit - 1`` of ``env``'s
    split (a ``GSM8KToolEnv``): ``turns`` are the assistant's texts (each turn's calls in the env's
    tool-call format, then the answer) and ``outcome`` is ``"kept"``, or ``None`` with
    ``"no_annotations"`` for a solution without calculator annotations."""
    for index in range(offset, min(offset + limit, len(env.tasks))):
        task = env.tasks[index]
        demo = calculator_turns(task.solution, max_turns=env.max_turns)
        if demo is None:
            yield task.id, None, "no_annotations"
            continue
        turns, answer = demo
        yield task.id, [env.parser.format_calls(calls) for calls in turns] + [answer], "kept"
