"""The verifiable reward: the database's end state against the goal's, and the information the user
asked for against what the agent told it. No model judges anything.

- :func:`db_diff`: the rows that differ between the expected and the actual state, in words (empty:
  the states are equal). Equality is of every table's rows, so how the agent got there (one return
  call for two items or two calls) does not matter, only what the shop's data ends as.
- :func:`missing_info`: the pieces of information (``["amount", "45.00"]``, ``["word", "shipped"]``)
  that no message of the agent to the user contains. An amount counts when any number in a message
  equals it (``$45``, ``45.00`` and ``45.0`` all do; thousands separators are read); a word counts as
  a whole word, any case.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Mapping, Sequence

from agent_gym_customer_service.domain import SCHEMA

__all__ = ["db_diff", "missing_info"]

_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def _key(table: str, row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in SCHEMA[table][1])


def db_diff(expected: Mapping[str, Sequence[Mapping[str, Any]]], actual: Mapping[str, Sequence[Mapping[str, Any]]], limit: int = 8) -> list[str]:
    """The differences, at most ``limit`` of them: ``"orders #W1: status is 'pending', expected 'cancelled'"``."""
    out: list[str] = []
    for table in SCHEMA:
        want = {_key(table, r): r for r in expected.get(table, [])}
        got = {_key(table, r): r for r in actual.get(table, [])}
        for key in sorted(set(want) | set(got), key=str):
            name = f"{table} {'/'.join(map(str, key))}"
            if key not in got:
                out.append(f"{name}: missing")
            elif key not in want:
                out.append(f"{name}: unexpected row")
            else:
                out.extend(
                    f"{name}: {col} is {got[key][col]!r}, expected {want[key][col]!r}"
                    for col in SCHEMA[table][0] if got[key][col] != want[key][col]
                )
    return out[:limit]


def _amounts(text: str) -> set[Decimal]:
    found = set()
    for match in _NUMBER.findall(text):
        try:
            found.add(Decimal(match.replace(",", "")))
        except InvalidOperation:  # pragma: no cover - the pattern only matches numbers
            continue
    return found


def missing_info(expected: Iterable[Sequence[str]], messages: Iterable[str]) -> list[str]:
    """The expected values that none of ``messages`` states (empty: everything asked for was told)."""
    texts = list(messages)
    amounts = set().union(*(_amounts(t) for t in texts)) if texts else set()
    joined = "\n".join(texts)
    missing = []
    for kind, value in expected:
        if kind == "amount":
            told = Decimal(value) in amounts
        else:
            told = re.search(rf"\b{re.escape(value)}\b", joined, flags=re.IGNORECASE) is not None
        if not told:
            missing.append(value)
    return missing
