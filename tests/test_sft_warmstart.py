"""examples/sft_warmstart.py: GSM8K calculator and SearchQA search demonstrations played through the env,
and a short supervised run on them with the real SmolLM2-135M-Instruct on CPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "sft_warmstart.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sft_warmstart", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sft = _load()


def _spans(tokenizer, ids: list[int], mask: list[int]) -> list[tuple[int, str]]:
    """The sequence cut where the mask changes, each piece decoded: (mask value, text)."""
    spans: list[tuple[int, str]] = []
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or mask[i] != mask[start]:
            spans.append((mask[start], tokenizer.decode(ids[start:i])))
            start = i
    return spans


def test_first_training_problem_becomes_an_exact_three_turn_episode(tokenizer) -> None:
    examples, outcome = sft.build_demonstrations(tokenizer, limit=1, max_length=2048, progress=False)
    assert dict(outcome) == {"kept": 1}
    ids, mask = examples[0]
    spans = _spans(tokenizer, ids, mask)
    assert spans[0][0] == 0 and spans[0][1].startswith("<|im_start|>system\nYou are a careful math tutor.")
    assert spans[0][1].endswith("<|im_start|>assistant\n")
    assert spans[1:] == [
        (1, '<tool_call>\n{"name": "calculate", "arguments": {"expression": "48/2"}}\n</tool_call><|im_end|>'),
        (0, "\n<|im_start|>tool\n24<|im_end|>\n<|im_start|>assistant\n"),  # the env's calculator replied
        (1, '<tool_call>\n{"name": "calculate", "arguments": {"expression": "48+24"}}\n</tool_call><|im_end|>'),
        (0, "\n<|im_start|>tool\n72<|im_end|>\n<|im_start|>assistant\n"),
        (1, "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72<|im_end|>"),
    ]
    # The sequence is the env's own token path: re-encoding the decoded text gives other ids nowhere.
    assert tokenizer.decode(ids) == "".join(text for _, text in spans)


def test_dropped_demonstrations_are_counted_by_reason(tokenizer) -> None:
    # Of the first 40 training problems one (train-29) has no calculator annotation; a max_length below
    # the system prompt's length drops every other one as too long.
    examples, outcome = sft.build_demonstrations(tokenizer, limit=40, max_length=200, progress=False)
    assert examples == []
    assert dict(outcome) == {"no_annotations": 1, "too_long": 39}


@pytest.mark.slow
def test_a_short_cpu_run_saves_a_model_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "sft"
    args = ["--out", str(out), "--limit", "2", "--offset", "5", "--max-steps", "1", "--batch-size", "1"]
    assert sft.main([*args, "--device", "cpu", "--no-progress"]) == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["demonstrations"] == {"kept": 2}
    assert summary["problems"] == 2 and summary["offset"] == 5 and summary["env_id"] == "AgentR1/GSM8KTool-v0"
    assert summary["steps"] == 1 and summary["device"] == "cpu"
    assert 0.0 < summary["loss_first"] < 5.0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers == 30
    assert AutoTokenizer.from_pretrained(out).eos_token == "<|im_end|>"


def test_bad_arguments_are_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        sft.parse_args(["--out", "x", "--batch-size", "0"])
    assert "--batch-size must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sft.parse_args(["--out", "x", "--offset", "-1"])
    assert "--offset must be >= 0" in capsys.readouterr().err
