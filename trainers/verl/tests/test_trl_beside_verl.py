"""verl's actors build their model with trl 1.x installed beside verl (the TRL adapter's trl).

verl's ``apply_monkey_patch`` imports trl's ``AutoModelForCausalLMWithValueHead`` whenever trl is
importable; trl 1.x has none, so without ``agent_gym_verl.patches.guard_trl_value_head_patch`` the FSDP
actors of a run fail at start-up (seen on an H200 with verl 0.9.1 + trl 1.16.0). Runs against the real
verl and the real trl of the verl 0.9 CI virtualenv; skipped where trl is not installed (verl 0.7.0's pins,
datasets < 4.1, exclude trl 1.x).
"""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed next to verl")


@pytest.fixture
def verl_check():
    """verl's monkey-patch module; verl's own ``is_trl_available`` is restored afterwards, in both places."""
    from verl.models.transformers import monkey_patch
    from verl.utils import import_utils

    saved = monkey_patch.is_trl_available, import_utils.is_trl_available
    yield monkey_patch
    monkey_patch.is_trl_available, import_utils.is_trl_available = saved


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def test_verl_builds_its_model_beside_trl_once_guarded(verl_check):
    from verl.utils import import_utils

    from agent_gym_verl import compat, patches

    patches.guard_trl_value_head_patch()  # keeps verl's own check (whether or not the hook ran already)
    is_trl_available = import_utils.verl_is_trl_available

    has_class = compat.trl_has_value_head_model()
    if has_class:
        pytest.skip("this trl still has AutoModelForCausalLMWithValueHead: verl's patch works unguarded")
    # the failure the guard exists for: verl's own check says yes, the import then fails
    assert is_trl_available()
    verl_check.is_trl_available = is_trl_available  # verl's own check in place again
    with pytest.raises(ImportError, match="AutoModelForCausalLMWithValueHead"):
        verl_check.apply_monkey_patch(tiny_llama(), use_remove_padding=False)

    patches.guard_trl_value_head_patch()
    # both the module that binds the name at import and verl's own definition (for later importers)
    assert verl_check.is_trl_available is compat.trl_has_value_head_model
    assert import_utils.is_trl_available is compat.trl_has_value_head_model
    model = tiny_llama()
    verl_check.apply_monkey_patch(model, use_remove_padding=False)  # no ImportError
    assert model.config.vocab_size == 128


def test_the_worker_hook_applies_the_guard(verl_check):
    """The module the run scripts load in every verl process (VERL_USE_EXTERNAL_MODULES) guards on import."""
    import importlib

    from agent_gym_verl import compat, fast_logprobs

    verl_check.is_trl_available = lambda: True
    importlib.reload(fast_logprobs)
    assert verl_check.is_trl_available is compat.trl_has_value_head_model


def test_the_hook_guards_from_inside_import_verl():
    """In a fresh process, as in a Ray worker: ``import verl`` runs the hook, which guards before verl's model
    code is imported, and importing the adapter's compat or patches module first works as well (no import cycle)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "agent_gym_verl.fast_logprobs"}
    for first in ("import verl", "import agent_gym_verl.compat", "import agent_gym_verl.patches"):
        code = (f"{first}\nfrom verl.models.transformers import monkey_patch\n"
                "print(monkey_patch.is_trl_available.__module__, monkey_patch.is_trl_available())")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-2:] == ["agent_gym_verl.compat", "False"], done.stdout
