"""Fixtures of the TRL adapter's tests: real trl, real envs, the embedded SmolLM2 on CPU."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# The README's test command collects this folder too; without the adapter the whole folder is one skip.
# (find_spec, not importorskip: importing trl loads torch, which must wait for the thread settings below.)
_missing = [name for name in ("trl", "agent_gym_trl") if importlib.util.find_spec(name) is None]
if _missing:
    pytest.skip(f"the TRL adapter's tests need {' and '.join(_missing)}: pip install -e trainers/trl "
                "(bash .ci/trl.sh installs it and runs them)", allow_module_level=True)

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


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (the default model and SmolLM2-135M-Instruct share it)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()
