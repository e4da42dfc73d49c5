"""The policy interface the rollout driver talks to, and a scripted policy for tests and benchmarks.

A policy maps prompt token ids to generated token ids. The driver (:func:`agent_gym.rollout.run_episodes`)
only ever calls :meth:`Policy.generate`, so any engine fits behind it: Hugging Face transformers
(:class:`agent_gym.rollout.HFPolicy`), a scripted stand-in (:class:`ScriptedPolicy`), and later vLLM or
an OpenAI-compatible server.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["Generation", "Policy", "AsyncPolicy", "ScriptedPolicy", "FINISH_REASONS", "check_prompts", "default_stop_ids", "resolve_stop_ids"]

#: ``"stop"``: a stop id (end of turn / eos) ended the generation; ``"length"``: ``max_new_tokens`` did.
FINISH_REASONS = ("stop", "length")


@dataclass
class Generation:
    """What a policy generated for one prompt.

    Attributes:
        ids: the generated token ids, including the stop id that ended them (an agent env expects its
            end-of-turn token to be part of the action); never any padding.
        logprobs: one log-probability per id (the policy documents which distribution), or ``None``
            when the engine does not report them.
        finish_reason: ``"stop"`` or ``"length"`` (see :data:`FINISH_REASONS`).
    """

    ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str = "stop"

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}")
        if self.logprobs is not None and len(self.logprobs) != len(self.ids):
            raise ValueError(f"{len(self.logprobs)} logprobs for {len(self.ids)} ids; need one per id")


def default_stop_ids(tokenizer: Any, chat_template: str | None = None) -> list[int]:
    """The ids that end an assistant turn: the chat template's end-of-turn ids plus the tokenizer's eos.

    Every engine backend uses this default so that a turn ends on the same token whichever engine
    generated it (the env expects its end-of-turn token inside the action). ``chat_template``: the
    template the env renders with, where it is not the tokenizer's own (a jinja text or a built-in
    name, as the env's ``chat_template=`` takes it).

    Raises:
        ValueError: the tokenizer has neither an end-of-turn token nor an eos id.
    """
    from agent_gym.chat.template import ChatTemplate

    stop_ids = [int(t) for t in ChatTemplate(tokenizer, chat_template=chat_template).end_of_turn_ids]
    eos = tokenizer.eos_token_id
    if eos is not None and int(eos) not in stop_ids:
        stop_ids.append(int(eos))
    if not stop_ids:
        raise ValueError("no stop ids: the tokenizer has neither an end-of-turn token nor eos; pass stop_ids=")
    return stop_ids


def resolve_stop_ids(tokenizer: Any, stop_ids: Sequence[int] | None = None) -> list[int]:
    """``stop_ids`` as ints, or :func:`default_stop_ids` when ``None``: what a backend stops turns on.

    Raises:
        ValueError: ``stop_ids`` is empty (a turn would never end), or there is no default.
    """
    if stop_ids is None:
        return default_stop_ids(tokenizer)
    ids = [int(t) for t in stop_ids]
    if not ids:
        raise ValueError("stop_ids is empty: a turn would never end")
    return ids


def check_prompts(
    prompts: Sequence[Sequence[int]], max_new_tokens: int, *, vocab_size: int | None = None
) -> list[list[int]]:
    """The prompts as lists of Python ints, after the checks every backend makes before generating.

    Each prompt is checked as one array (its dtype, then its smallest and largest id), not id by id:
    a prompt is the whole context, so a per-id Python loop would cost every turn time proportional
    to the context (about 2 ms for 32k ids).

    Raises:
        ValueError: ``max_new_tokens < 1``, an empty prompt, a prompt that is not a flat sequence of
            integers (floats are refused, not truncated), or (with ``vocab_size``) an id outside
            ``[0, vocab_size)``.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    return [_prompt_ids(p, vocab_size) for p in prompts]


def _prompt_ids(prompt: Sequence[int], vocab_size: int | None) -> list[int]:
    try:
        ids = np.asarray(prompt)
    except (ValueError, TypeError, OverflowError):  # ragged nesting
        raise ValueError("a prompt must be a flat sequence of token ids, got a ragged nested one") from None
    if ids.ndim == 1 and ids.size == 0:
        raise ValueError("every prompt needs at least one token")
    if ids.ndim != 1:
        raise ValueError(f"a prompt must be a flat sequence of token ids, got an array of shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise ValueError(f"prompt ids must be integer token ids, got {ids.dtype} values such as {ids[:1].tolist()[0]!r}")
    if vocab_size is not None and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        raise ValueError(f"prompt holds ids outside the vocabulary [0, {vocab_size}): {bad[:5].tolist()}")
    return ids.tolist()


@runtime_checkable
class Policy(Protocol):
    """Anything that turns a batch of prompts (token ids) into generations.

    ``generate`` is the only method the rollout driver needs. Engines that serve requests one at a
    time over a network (vLLM's async engine, OpenAI-compatible servers) will additionally implement
    :class:`AsyncPolicy`'s ``agenerate`` so that a future async driver can keep many episodes in
    flight; it is optional and nothing in the synchronous driver calls it.
    """

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[Generation]:
        """Generate a continuation of every prompt; returns one :class:`Generation` per prompt, in order."""
        ...


@runtime_checkable
class AsyncPolicy(Protocol):
    """The optional async half of a policy (implemented by server-backed engines, later)."""

    async def agenerate(self, prompt: Sequence[int], *, max_new_tokens: int) -> Generation:
        """Generate a continuation of one prompt without blocking the event loop."""
        ...


class ScriptedPolicy:
    """A policy that answers from a script instead of a model (for tests and benchmarks).

    ``script(conversation, turn)`` returns the assistant's reply:

    - a ``str`` is encoded with the tokenizer's chat template (special tokens in it are recognised,
      none are added) and the template's end-of-turn ids are appended, which is exactly the token
      path a real model's reply takes;
    - a sequence of ints is returned verbatim (nothing appended), to test odd actions.

    ``conversation`` is the 0-based index of the conversation a prompt belongs to, in order of first
    appearance; ``turn`` is the 1-based turn within it (the env's ``info["turn"]`` after the step).
    The policy sees only token ids, so it recognises a continuation by its prefix: a prompt that
    starts with an earlier prompt plus the ids generated for it continues that conversation; any
    other prompt opens a new one. With :func:`agent_gym.rollout.run_episodes`, conversation ``i`` is
    episode ``i`` (the driver fills free slots in episode order and lists prompts in slot order).
    An env that rewrites its context (``info["new_segment"]``) breaks the prefix, so its next prompt
    counts as a new conversation.

    Replies longer than ``max_new_tokens`` are cut and reported with ``finish_reason="length"``.

    Args:
        tokenizer: a Hugging Face tokenizer, a model name/path, or ``None`` for the default model's.
        script: ``(conversation, turn) -> str | Sequence[int]``.
        logprob: when not ``None``, every generated id gets this log-probability (default: no logprobs).
        max_remembered: how many open conversations to remember; the oldest are forgotten first
            (finished episodes are never continued, but the policy cannot tell they are finished).

    Attributes:
        calls: how many times :meth:`generate` was called.
        generated_tokens: total ids returned so far.
        outputs: every generation returned, in order (for tests; cleared by :meth:`reset`).
    """

    def __init__(
        self,
        tokenizer: Any,
        script: Callable[[int, int], "str | Sequence[int]"],
        *,
        logprob: float | None = None,
        max_remembered: int = 10_000,
    ):
        # Imported here so that `import agent_gym.rollout` stays free of transformers.
        from agent_gym.chat.template import ChatTemplate
        from agent_gym.models import load_tokenizer

        self.tokenizer = load_tokenizer(tokenizer)
        self.template = ChatTemplate(self.tokenizer)
        self.script = script
        self.logprob = logprob
        self.max_remembered = int(max_remembered)
        self.stop_ids = list(self.template.end_of_turn_ids)
        self.reset()

    def reset(self) -> None:
        """Forget every conversation (the next prompt is conversation 0 again)."""
        # (length, prefix hash) of a history (prompt + generated ids) -> (the history, the
        # [(conversation, turn)] waiting on it, oldest first: conversations identical so far share it).
        self._open: OrderedDict[tuple[int, int], tuple[tuple[int, ...], list[tuple[int, int]]]] = OrderedDict()
        self._lengths: Counter[int] = Counter()  # lengths of the remembered histories
        self._conversations = 0
        self.calls = 0
        self.generated_tokens = 0
        self.outputs: list[Generation] = []

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[Generation]:
        """One scripted reply per prompt (see the class docstring for how replies are chosen)."""
        self.calls += 1
        results = []
        for prompt in prompts:
            prompt = [int(t) for t in prompt]
            conversation, turn = self._locate(prompt)
            reply = self.script(conversation, turn)
            if isinstance(reply, str):
                ids = self.template.encode(reply) + self.stop_ids
            else:
                ids = [int(t) for t in reply]
            finish = "stop" if self.stop_ids and ids[-len(self.stop_ids):] == self.stop_ids else "length"
            if len(ids) > max_new_tokens:
                ids, finish = ids[:max_new_tokens], "length"
            logprobs = None if self.logprob is None else [float(self.logprob)] * len(ids)
            generation = Generation(ids=ids, logprobs=logprobs, finish_reason=finish)
            self._remember(tuple(prompt + ids), conversation, turn)
            self.generated_tokens += len(ids)
            self.outputs.append(generation)
            results.append(generation)
        return results

    def _locate(self, prompt: list[int]) -> tuple[int, int]:
        """(conversation, turn) of a prompt: continue the conversation whose history it extends."""
        # Prefix hashes make each remembered length an O(1) probe, so a prompt costs O(its length +
        # remembered lengths) however many finished conversations linger. Longest history first:
        # the latest turn of a conversation is the one that continues.
        hashes = _prefix_hashes(prompt)
        for length in sorted((n for n in self._lengths if n <= len(prompt)), reverse=True):
            entry = self._open.get((length, hashes[length]))
            if entry is None or list(entry[0]) != prompt[:length]:  # absent, or a hash collision
                continue
            conversation, turn = entry[1].pop(0)
            if not entry[1]:
                self._forget((length, hashes[length]))
            return conversation, turn + 1
        conversation = self._conversations
        self._conversations += 1
        return conversation, 1

    def _remember(self, history: tuple[int, ...], conversation: int, turn: int) -> None:
        key = (len(history), _prefix_hashes(history)[-1])
        entry = self._open.get(key)
        if entry is None or entry[0] != history:
            if entry is not None:  # a hash collision: the newer history wins
                self._forget(key)
            entry = (history, [])
            self._open[key] = entry
            self._lengths[len(history)] += 1
        entry[1].append((conversation, turn))
        self._open.move_to_end(key)
        while len(self._open) > self.max_remembered:
            self._forget(next(iter(self._open)))

    def _forget(self, key: tuple[int, int]) -> None:
        del self._open[key]
        self._lengths[key[0]] -= 1
        if not self._lengths[key[0]]:
            del self._lengths[key[0]]


_HASH_MOD = (1 << 61) - 1
_HASH_BASE = 1_000_003


def _prefix_hashes(ids: Sequence[int]) -> list[int]:
    """Polynomial hashes of every prefix of ``ids``: ``out[k]`` hashes ``ids[:k]``."""
    out = [0] * (len(ids) + 1)
    h = 0
    for k, t in enumerate(ids, start=1):
        h = (h * _HASH_BASE + t + 1) % _HASH_MOD
        out[k] = h
    return out
