"""The one test of an installed release against a tested range, for the modules that lean on another
library's private parts (gymnasium's wrappers in ``core/async_step.py``, vLLM's engine in
``rollout/vllm.py``): each states its range once, as pip writes it, and refuses a release outside it.
"""

from __future__ import annotations

import re

__all__ = ["in_tested_range"]

_BOUND = re.compile(r"^(>=|<)(\d+)\.(\d+)$")


def in_tested_range(version: str, tested: str) -> bool:
    """Whether ``version``'s ``major.minor`` lies in ``tested`` (``">=1.0,<1.5"``: the lowest minor
    release included, the first untested one excluded). An unreadable version is not in any range.

    Raises:
        ValueError: ``tested`` is not of that form (a bug of the caller's constant, never the user's).
    """
    bounds = [_BOUND.match(part.strip()) for part in tested.split(",")]
    if len(bounds) != 2 or None in bounds or [b[1] for b in bounds if b] != [">=", "<"]:
        raise ValueError(f"a tested range reads '>=MAJOR.MINOR,<MAJOR.MINOR', got {tested!r}")
    lowest, beyond = ((int(b[2]), int(b[3])) for b in bounds if b)
    match = re.match(r"(\d+)\.(\d+)", version)
    return match is not None and lowest <= (int(match[1]), int(match[2])) < beyond
