"""Observation and action spaces for chat-based agent environments.

An agent env's action is the token sequence the policy generated, and its observation is the chat
context the policy continues from. Both are variable-length, so neither fits gymnasium's fixed-shape
``Box``; these two spaces follow gymnasium's ``Space`` contract (``contains``, ``sample``, seeding)
so that ``gymnasium.utils.env_checker.check_env`` and generic tooling work on them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from gymnasium import spaces

from agent_gym.core.types import Observation

__all__ = ["TokenSequence", "ChatContextSpace", "MESSAGE_ROLES"]

#: Roles a chat message may have (OpenAI chat format).
MESSAGE_ROLES = ("system", "user", "assistant", "tool")


class TokenSequence(spaces.Space[np.ndarray]):
    """A variable-length 1-D sequence of token ids in ``[0, vocab_size)``.

    Elements are ``np.ndarray`` of dtype ``int64`` and length ``0 .. max_length``. ``contains`` also
    accepts a list of ints (the canonical action may come from any generation engine).

    Args:
        vocab_size: number of distinct token ids (``len(tokenizer)``).
        max_length: longest sequence in the space.
        min_length: shortest sequence ``sample`` produces (``contains`` accepts down to 0).
        seed: seed for ``sample``.
    """

    def __init__(self, vocab_size: int, max_length: int, *, min_length: int = 1, seed: int | None = None):
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        if max_length < 0 or min_length < 0 or min_length > max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length=} {max_length=}")
        self.vocab_size = int(vocab_size)
        self.max_length = int(max_length)
        self.min_length = int(min_length)
        super().__init__(shape=None, dtype=np.int64, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """A random sequence with uniformly random length and ids (``mask``/``probability`` unsupported)."""
        if mask is not None or probability is not None:
            raise NotImplementedError("TokenSequence.sample does not support mask or probability")
        length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        return self.np_random.integers(0, self.vocab_size, size=length, dtype=np.int64)

    def contains(self, x: Any) -> bool:
        if isinstance(x, (list, tuple)):
            if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in x):
                return False
            x = np.asarray(x, dtype=np.int64)
        if not isinstance(x, np.ndarray) or x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
            return False
        if len(x) > self.max_length:
            return False
        return bool(len(x) == 0 or (x.min() >= 0 and x.max() < self.vocab_size))

    def __repr__(self) -> str:
        return f"TokenSequence(vocab_size={self.vocab_size}, max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, TokenSequence)
            and other.vocab_size == self.vocab_size
            and other.max_length == self.max_length
        )


class ChatContextSpace(spaces.Space[Observation]):
    """The observation of an agent env: a chat context plus the exact ids the policy continues from.

    An element is a dict with

    - ``"messages"``: list of OpenAI-format messages (``role`` in :data:`MESSAGE_ROLES`, string
      ``content``; assistant messages may carry ``tool_calls``, tool messages ``tool_call_id``);
    - ``"tools"``: list of OpenAI function schemas offered to the policy (may be empty);
    - ``"prompt_ids"``: ``np.ndarray`` of int64 token ids, length ``1 .. max_length``, each in
      ``[0, vocab_size)``.

    ``sample`` draws a random well-formed context (random text content, random ids); it exists for
    generic tooling and checkers, not to produce meaningful conversations.
    """

    def __init__(self, vocab_size: int, max_length: int, *, seed: int | None = None):
        self.vocab_size = int(vocab_size)
        self.max_length = int(max_length)
        self._ids = TokenSequence(vocab_size, max_length, min_length=1)
        super().__init__(shape=None, dtype=None, seed=seed)

    def seed(self, seed: int | None = None) -> int | list[int] | dict[str, int]:
        result = super().seed(seed)
        self._ids.seed(int(self.np_random.integers(0, 2**31 - 1)))
        return result

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> Observation:
        if mask is not None or probability is not None:
            raise NotImplementedError("ChatContextSpace.sample does not support mask or probability")
        alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz 0123456789"))
        n_messages = int(self.np_random.integers(1, 5))
        messages: list[dict[str, Any]] = []
        for i in range(n_messages):
            role = "system" if i == 0 else ("user", "assistant")[i % 2]
            text = "".join(self.np_random.choice(alphabet, size=int(self.np_random.integers(0, 32))))
            messages.append({"role": role, "content": text})
        return {"messages": messages, "tools": [], "prompt_ids": self._ids.sample()}

    def contains(self, x: Any) -> bool:
        if not isinstance(x, Mapping) or set(x) != {"messages", "tools", "prompt_ids"}:
            return False
        ids = x["prompt_ids"]
        if not isinstance(ids, np.ndarray) or len(ids) == 0 or not self._ids.contains(ids):
            return False
        if not isinstance(x["tools"], Sequence) or not all(_is_tool_schema(t) for t in x["tools"]):
            return False
        return isinstance(x["messages"], Sequence) and all(_is_message(m) for m in x["messages"])

    def __repr__(self) -> str:
        return f"ChatContextSpace(vocab_size={self.vocab_size}, max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, ChatContextSpace)
            and other.vocab_size == self.vocab_size
            and other.max_length == self.max_length
        )


def _is_message(m: Any) -> bool:
    return (
        isinstance(m, Mapping)
        and m.get("role") in MESSAGE_ROLES
        and isinstance(m.get("content"), str)
    )


def _is_tool_schema(t: Any) -> bool:
    return (
        isinstance(t, Mapping)
        and t.get("type") == "function"
        and isinstance(t.get("function"), Mapping)
        and isinstance(t["function"].get("name"), str)
    )
