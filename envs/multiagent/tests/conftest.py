"""Fixtures of the game env tests: the embedded default model's tokenizer (SmolLM2-135M-Instruct)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
