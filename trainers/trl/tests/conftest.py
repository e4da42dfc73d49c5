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

# Before torch loads: one thread per core, and OpenMP threads that sleep while they wait. Spinning is
# about 15% faster on an idle machine but several times slower once other work starts beside the tests
# (a check at start-up cannot see work that starts later), and these tests are not benchmarks.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
configure_cpu_threads()

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (the default model and SmolLM2-135M-Instruct share it)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
