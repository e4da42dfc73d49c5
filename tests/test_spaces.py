"""TokenSequence and ChatContextSpace: contains/sample really work."""

from __future__ import annotations

import numpy as np
import pytest

from agent_gym.core.spaces import ChatContextSpace, TokenSequence


def test_token_sequence_contains():
    space = TokenSequence(vocab_size=100, max_length=5)
    assert space.contains(np.array([0, 99, 5]))
    assert space.contains([1, 2, 3])
    assert space.contains(np.array([], dtype=np.int64))
    assert not space.contains(np.array([100]))  # out of vocabulary
    assert not space.contains(np.array([-1]))
    assert not space.contains(np.arange(6))  # too long
    assert not space.contains(np.array([[1, 2]]))  # 2-D
    assert not space.contains(np.array([1.5]))  # not integer
    assert not space.contains([1, True])  # bools are not token ids
    assert not space.contains("hello")


def test_token_sequence_sample_is_seeded_and_valid():
    a, b = TokenSequence(50, 8, seed=3), TokenSequence(50, 8, seed=3)
    samples_a = [a.sample() for _ in range(20)]
    samples_b = [b.sample() for _ in range(20)]
    for x, y in zip(samples_a, samples_b):
        assert np.array_equal(x, y)
        assert a.contains(x) and 1 <= len(x) <= 8 and x.dtype == np.int64


def test_token_sequence_rejects_bad_bounds():
    with pytest.raises(ValueError, match="vocab_size must be >= 1"):
        TokenSequence(0, 4)
    with pytest.raises(ValueError, match="min_length <= max_length"):
        TokenSequence(10, 2, min_length=3)


def test_chat_context_space_contains_and_sample():
    space = ChatContextSpace(vocab_size=100, max_length=16, seed=0)
    obs = {"messages": [{"role": "user", "content": "hi"}], "tools": [], "prompt_ids": np.array([1, 2])}
    assert space.contains(obs)
    assert not space.contains({**obs, "prompt_ids": np.array([], dtype=np.int64)})  # nothing to continue from
    assert not space.contains({**obs, "prompt_ids": [1, 2]})  # ids must be an ndarray
    assert not space.contains({**obs, "messages": [{"role": "robot", "content": "x"}]})
    assert not space.contains({**obs, "messages": [{"role": "user", "content": 3}]})
    assert not space.contains({**obs, "tools": [{"type": "function"}]})
    assert not space.contains({**obs, "extra": 1})
    for _ in range(20):
        assert space.contains(space.sample())
    space.seed(7)
    first = space.sample()
    space.seed(7)
    assert np.array_equal(space.sample()["prompt_ids"], first["prompt_ids"])
