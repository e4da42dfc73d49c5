"""``agent-gym serve`` in the core CLI: listed, documented, and a clear error where the OpenEnv adapter
(trainers/openenv) is not installed. The server itself is tested in trainers/openenv/tests."""

from __future__ import annotations

import sys

import pytest

from agent_gym.cli.main import build_parser, main


def test_serve_is_listed_and_explained(capsys):
    assert "  serve " in build_parser().description
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--host", "--port", "--env-kwarg", "--tokenizer", "--max-sessions", "pip install -e trainers/openenv"):
        assert option in text
    assert "(default: 127.0.0.1)" in text and "(default: 8000)" in text and "(default: train)" in text


def test_serve_without_the_adapter_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "agent_gym_openenv", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "agent_gym_openenv.server", None)
    assert main(["serve", "AgentR1/GSM8K-v0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("agent-gym: error: serve needs the OpenEnv adapter: pip install -e trainers/openenv")
