"""``agent-gym export-verl`` as the installed verl adapter adds it to the core CLI: through the
``agent_gym.commands`` entry point its pyproject declares, listed in ``--help``, with the adapter's own
options and one-line errors. Needs the adapter installed (pip install -e trainers/verl); verl itself
is not imported."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import pytest

from _mcp_support import mcp_demo_servers
from agent_gym.cli.main import main
from agent_gym.commands import COMMAND_GROUP

_DECLARED = {ep.name: ep for ep in entry_points(group=COMMAND_GROUP)}
pytestmark = pytest.mark.skipif(
    "export-verl" not in _DECLARED, reason="the verl adapter is not installed (pip install -e trainers/verl)"
)

#: What CountdownEnv's constructor chain takes, in signature order.
COUNTDOWN_ARGS = ("tokenizer, difficulty, split, few_shot, prompt_dir, max_turns, max_context_tokens, max_action_tokens, "
                  "tools, tool_sources, tool_format, mcp_servers, chat_template, render_mode")


def test_the_adapter_declares_the_command():
    ep = _DECLARED["export-verl"]
    assert ep.value == "agent_gym_verl.export:add_parser"
    assert ep.dist is not None and ep.dist.metadata["Name"] == "agent-r1-gym-verl"


def test_help_lists_export_verl_and_export_model(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    commands = text.split("positional arguments:", 1)[1].split("options:", 1)[0].split()
    for command in ("list", "play", "eval", "new-env", "export-verl", "export-model"):
        assert command in commands


def test_export_verl_help_is_the_adapters_own(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export-verl", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: agent-gym export-verl")
    assert "--mode {concat,step}" in text and "--tokenizer" in text


def test_export_verl_bad_tokenizer_is_one_line(tmp_path, capsys):
    code = main(["export-verl", "AgentR1/Countdown-v0", "--out", str(tmp_path), "--limit", "2", "--tokenizer", "./nope"])
    assert code == 2
    assert capsys.readouterr().err == "agent-gym export-verl: error: no such file or folder: ./nope\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args,message",
    [
        (["--env-kwargs", '{"difficulty": "easy"}', "--env-kwarg", "difficulty=hard"],
         "--env-kwargs gives difficulty='easy' and --env-kwarg gives difficulty='hard'; give it once"),
        (["--env-kwargs", '{"max_turns": 2}', "--env-kwarg", "max_turns=\"2\""],
         "--env-kwargs gives max_turns=2 and --env-kwarg gives max_turns='2'; give it once"),
        (["--env-kwargs", '{"flag": true}', "--env-kwarg", "flag=1"],
         "--env-kwargs gives flag=True and --env-kwarg gives flag=1; give it once"),
        (["--env-kwarg", "oops"], "--env-kwarg expects KEY=VALUE with a Python identifier as KEY, got 'oops'"),
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object, got '[1]'"),
        (["--env-kwarg", "colour=red"], "AgentR1/Countdown-v0 takes no argument 'colour'. It takes: " + COUNTDOWN_ARGS),
        (["--env-kwarg", "dificulty=easy"],
         "AgentR1/Countdown-v0 takes no argument 'dificulty'; did you mean 'difficulty'? It takes: " + COUNTDOWN_ARGS),
    ],
)
def test_export_verl_env_kwarg_mistakes_are_one_line(args, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export-verl", "AgentR1/Countdown-v0", "--split", "test", "--limit", "2", "--out", str(out), *args]) == 2
    assert capsys.readouterr().err == f"agent-gym export-verl: error: {message}\n"
    assert not out.exists()


def test_export_verl_help_documents_both_forms(capsys):
    with pytest.raises(SystemExit):
        main(["export-verl", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--env-kwarg KEY=VALUE extra env constructor argument, repeatable; VALUE is read as JSON" in text
    assert "--env-kwargs JSON the same arguments as one JSON object" in text


def test_export_verl_writes_mcp_task_rows_and_leaves_no_server(tmp_path, capsys):
    """MCPTask-v0's demo: its tools come from an MCP server (a stdio process) that the export starts to
    list them; the rows name them, and the process is gone when the command returns."""
    pytest.importorskip("agent_gym_mcp", reason="the MCPTask-v0 env package (pip install -e envs/mcp)")
    import psutil
    import pyarrow.parquet as pq

    from agent_gym.tools import mcp as agent_mcp

    out = tmp_path / "out"
    args = ["export-verl", "AgentR1/MCPTask-v0", "--split", "test", "--limit", "2", "--out", str(out), "--mode", "step",
            "--env-kwarg", "max_turns=3"]
    assert main(args) == 0
    assert capsys.readouterr().out == f"AgentR1/MCPTask-v0 [test] -> {out / 'test.parquet'} (2 rows)\n"
    rows = pq.read_table(out / "test.parquet").to_pylist()
    assert [r["extra_info"]["task_id"] for r in rows] == ["test-0", "test-1"]
    assert rows[0]["prompt"][1] == {"role": "user", "content": "What do 6 flanges cost, in dollars?"}
    assert rows[0]["reward_model"] == {"style": "rule", "ground_truth": "102"}
    assert {r["agent_name"] for r in rows} == {"agent_gym_step"} and {r["env_id"] for r in rows} == {"AgentR1/MCPTask-v0"}
    assert rows[0]["extra_info"]["env_kwargs"] == '{"max_turns": 3, "split": "test"}'
    assert [t["function"]["name"] for t in json.loads(rows[0]["extra_info"]["tools"])] == ["stock", "price"]
    assert agent_mcp.live_server_count() == 0
    assert psutil.wait_procs(mcp_demo_servers(), timeout=10)[1] == []


def test_an_adapter_module_that_cannot_load_names_the_install(capsys, monkeypatch):
    """The adapter is installed, but its export module cannot be imported: the command says what to install."""
    import sys

    monkeypatch.setitem(sys.modules, "agent_gym_verl.export", None)
    assert main(["export-verl", "AgentR1/GSM8K-v0", "--out", "x"]) == 2
    assert "export-verl needs the verl adapter: pip install -e trainers/verl" in capsys.readouterr().err
