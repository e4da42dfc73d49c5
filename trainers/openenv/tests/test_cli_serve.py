"""``agent-gym serve``: the command this adapter adds to the core CLI (its ``agent_gym.commands`` entry
point), listed and documented there; its mistakes end with one ``agent-gym: error:`` line and exit status
2, before or instead of serving: a bad env argument (found when the server builds its probe env), a port
in use."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from openenv_helpers import AGENT_GYM, ENV_ID, REPO_ROOT

from agent_gym.cli.main import build_parser, main
from agent_gym.commands import COMMAND_GROUP


def test_the_adapter_declares_the_command():
    (ep,) = [ep for ep in entry_points(group=COMMAND_GROUP) if ep.name == "serve"]
    assert ep.value == "agent_gym_openenv.command:add_parser"
    assert ep.dist is not None and ep.dist.metadata["Name"] == "agent-r1-gym-openenv"


def test_serve_is_listed_and_explained(capsys):
    assert "  serve " in build_parser().description
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--host", "--port", "--env-kwarg", "--tokenizer", "--max-sessions", "pip install -e trainers/openenv"):
        assert option in text
    assert "(default: 127.0.0.1)" in text and "(default: 8000)" in text and "(default: train)" in text


def test_help_does_not_import_openenv_core():
    """The entry point loads a module that leaves openenv-core (seconds: gradio) to the command's run."""
    code = "import sys; from agent_gym.cli.main import build_parser; build_parser(); print(sorted(m for m in sys.modules if m.split('.')[0] in ('openenv', 'gradio', 'agent_gym_openenv')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['agent_gym_openenv', 'agent_gym_openenv.command']"


def test_without_openenv_core_serve_says_what_to_install(monkeypatch, capsys):
    """The adapter is installed but the server cannot be imported (openenv-core missing)."""
    monkeypatch.setitem(sys.modules, "agent_gym_openenv.server", None)
    assert main(["serve", "AgentR1/GSM8K-v0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("agent-gym: error: serve needs the OpenEnv adapter: pip install -e trainers/openenv (")


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AGENT_GYM, "serve", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
    )


def test_bad_env_kwarg_fails_at_start():
    done = serve(ENV_ID, "--split", "test", "--port", "0", "--env-kwarg", "colour=red")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"agent-gym: error: {ENV_ID} takes no argument 'colour'. It takes: tokenizer, few_shot, split, data_dir, "
                     "prompt_dir, max_turns, max_context_tokens, max_action_tokens, tools, tool_sources, tool_format, mcp_servers, chat_template, render_mode"]
    assert done.stdout == ""  # it never listened


def test_port_in_use_fails_clearly(server):
    _, url = server
    port = url.rsplit(":", 1)[1]
    done = serve(ENV_ID, "--split", "test", "--port", port)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"agent-gym: error: cannot listen on 127.0.0.1:{port}: Address already in use"
