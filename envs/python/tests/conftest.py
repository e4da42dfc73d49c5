"""Fixtures of the GSM8KPython tests: the real GSM8K files and the embedded default model's tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The GSM8K jsonl files live in ../shared/data/gsm8k next to the checkout (never committed); an
# explicit AGENT_GYM_GSM8K_DIR wins.
os.environ.setdefault("AGENT_GYM_GSM8K_DIR", str(Path(__file__).resolve().parents[3].parent / "shared" / "data" / "gsm8k"))


@pytest.fixture(scope="session")
def tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
