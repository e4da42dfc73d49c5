"""``agent-gym serve`` in the core CLI: a clear error where the OpenEnv adapter (trainers/openenv) is
not installed. The adapter adds the command (its options and help are tested in
trainers/openenv/tests/test_cli_serve.py, with the adapter installed), and the server itself is tested
in trainers/openenv/tests."""

from __future__ import annotations

import sys

from agent_gym.cli.main import main


def test_serve_without_the_adapter_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "agent_gym_openenv", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "agent_gym_openenv.server", None)
    assert main(["serve", "AgentR1/GSM8K-v0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("agent-gym: error: serve needs the OpenEnv adapter: pip install -e trainers/openenv")
