"""Fixtures of the GSM8KPython tests: the embedded default model's tokenizer (GSM8K ships with its package)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
