"""How long Python's cyclic garbage collector ran while a block of code ran.

A rollout process that has imported torch, transformers (and vLLM) holds hundreds of thousands of
long-lived objects; a full (generation-2) collection walks all of them and stops every thread of the
process while it does, env steps and the inference engine's output handling included: with
transformers and torch imported, a few hundred milliseconds on a small CPU.
:class:`GCTimer` measures that cost for a run, so that a stall can be told apart from slow env code;
``gc.freeze()`` after start-up (moving what exists into a generation the collector never scans) is the
usual remedy, and the benchmarks offer it as ``--gc-freeze``.

The collector is process-wide: a timer counts every collection of the process while it is active,
whichever thread triggered it (finalizers run by a collection included), and none of another process
(vLLM's EngineCore runs in its own). Counts accumulate if a timer is used again.
"""

from __future__ import annotations

import gc
import time
from types import TracebackType
from typing import Any

__all__ = ["GCTimer"]


class GCTimer:
    """Context manager: wall time spent in garbage collections while active, by generation.

    Example::

        with GCTimer() as timer:
            run()
        print(timer.seconds, timer.collections[2], timer.longest_s)
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        """Total wall time inside collections."""
        self.longest_s = 0.0
        """The longest single collection."""
        self.collections = [0, 0, 0]
        """Collections finished, per generation (index 2: full collections)."""
        self._started: float | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:  # registered while a collection was already running
            return
        spent = time.perf_counter() - self._started
        self._started = None
        self.seconds += spent
        self.longest_s = max(self.longest_s, spent)
        generation = int(info.get("generation", 2))
        self.collections[min(max(generation, 0), 2)] += 1

    def __enter__(self) -> "GCTimer":
        if self._callback in gc.callbacks:
            raise RuntimeError("this GCTimer is already active")
        self._started = None
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:  # someone cleared gc.callbacks: nothing left to remove, and no error to hide
            pass

    def as_stats(self) -> dict[str, Any]:
        """``gc_s``, ``gc_longest_s``, ``gc_collections`` (per generation) and ``gc_full_collections``,
        for a stats dict."""
        return {
            "gc_s": self.seconds,
            "gc_longest_s": self.longest_s,
            "gc_collections": list(self.collections),
            "gc_full_collections": self.collections[2],
        }
