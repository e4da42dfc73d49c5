"""Fixtures of the AgentProgram-v0 tests: the default model's tokenizer."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and chat template (the embedded default model's)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
