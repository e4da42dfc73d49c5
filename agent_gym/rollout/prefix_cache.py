"""Reuse of attention key/value states across generate calls for :class:`~agent_gym.rollout.HFPolicy`.

An agent env appends to its context, so turn t+1's prompt starts with turn t's prompt and the ids
generated for it (the no-drift invariant makes that exact), and every episode of an env opens with the
same system prompt. ``model.generate`` on its own reads every prompt from the first token on each
call: on a 2-core CPU, a 5-turn GSM8KTool episode spends most of its time prefilling contexts that
were already computed. :class:`PrefixCache` keeps the key/value states of recent sequences (prompt
plus generated ids) and hands back the longest prefix it holds for a new prompt, so only the new
tokens are run through the model.

The states of a causal model for the first k tokens of a sequence depend on those k tokens only, so a
cached prefix is valid for any prompt that shares it, whatever batch or padding computed it (up to
floating-point rounding of the kernels, as with any change of batch shape).

Only models whose every layer attends over the whole context keep one tensor per layer that can be cut
at any length; :func:`supports_prefix_cache` says when that holds (sliding-window and hybrid
architectures, such as Gemma 3, are run without the cache).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["PrefixCache", "supports_prefix_cache", "cache_keyword", "cache_layers", "make_cache"]


@dataclass
class _Entry:
    ids: np.ndarray  # int64, the tokens whose states are held
    layers: list[tuple[Any, Any]]  # per layer (keys, values), each [1, heads, len(ids), head_dim]
    nbytes: int


def supports_prefix_cache(model: Any) -> bool:
    """Whether ``model``'s cache is one full-attention key/value tensor per layer (cut at any length)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        return False
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return False
    model_type = getattr(text, "model_type", "")
    # State-space and recurrent families keep a state that cannot be cut at a token boundary.
    return not any(name in model_type for name in ("mamba", "rwkv", "jamba", "falcon_h1", "recurrent", "xlstm"))


def cache_keyword(model: Any) -> str:
    """The name of the forward argument that takes a cache: ``cache`` (transformers 5.2x) or
    ``past_key_values`` (earlier releases)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers ``DynamicCache`` of any 4.4x-5.x release."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return [(k, v) for k, v in cache]  # a legacy tuple of tuples


def make_cache(layers: Sequence[tuple[Any, Any]]) -> Any:
    """A ``DynamicCache`` holding ``layers`` (no copy)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(ddp_cache_data=list(layers))
    except TypeError:  # releases before ddp_cache_data
        return DynamicCache.from_legacy_cache(tuple(layers))  # type: ignore[attr-defined]  # gone in transformers 5


class PrefixCache:
    """The key/value states of recent sequences, looked up by longest common prefix.

    Args:
        max_bytes: the most memory the held states may take; the least recently used entries are
            dropped beyond it (an entry larger than the budget is not kept).

    Attributes:
        hits_tokens: prompt tokens whose states came from the cache, over all lookups.
        prefill_tokens: prompt tokens that had to be run through the model.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self._bytes = 0
        self.hits_tokens = 0
        self.prefill_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def longest_prefix(self, ids: np.ndarray, limit: int) -> tuple[int, list[tuple[Any, Any]] | None]:
        """The longest cached prefix of ``ids``, at most ``limit`` tokens: ``(k, layers)`` with the
        states of ``ids[:k]`` (views into the entry, never to be written), or ``(0, None)``."""
        best_key, best = None, 0
        for key, entry in self._entries.items():
            n = min(limit, len(entry.ids), len(ids))
            if n <= best:
                continue
            diff = np.flatnonzero(entry.ids[:n] != ids[:n])
            k = int(diff[0]) if diff.size else n
            if k > best:
                best_key, best = key, k
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        entry = self._entries[best_key]
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in entry.layers]

    def put(self, ids: np.ndarray, layers: list[tuple[Any, Any]]) -> None:
        """Hold the states of ``ids`` (``layers`` must not be views of a tensor that changes later).

        An entry whose ids are a prefix of ``ids`` (the same episode one turn earlier) is dropped: the
        new one answers every lookup the old one could."""
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if nbytes > self.max_bytes or len(ids) == 0:
            return
        for key in [k for k, e in self._entries.items() if len(e.ids) <= len(ids) and np.array_equal(e.ids, ids[: len(e.ids)])]:
            self._drop(key)
        while self._entries and self._bytes + nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[self._next_key] = _Entry(ids=np.array(ids, dtype=np.int64), layers=layers, nbytes=nbytes)
        self._next_key += 1
        self._bytes += nbytes

    def _drop(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).nbytes

