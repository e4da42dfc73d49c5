"""Fixtures of the TRL adapter's tests: real trl, real envs, the embedded SmolLM2 on CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# TRL warns on every GRPOTrainer built with rollout_func that the hook is experimental.
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# The helpers module (_trl_support): pytest's importlib import mode does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_gym.cpu import configure_cpu_threads  # noqa: E402

# Before torch loads: one thread per core, sleeping (not spinning) OpenMP waits on a busy machine.
configure_cpu_threads()

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (the default model and SmolLM2-135M-Instruct share it)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
