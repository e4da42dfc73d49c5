"""Fixtures of the OpenEnv tests: a GSM8KTool server per module, the scripted token actions, the same env
made in process. (Helpers live in openenv_helpers.py, importable from the test modules: this folder is
put on sys.path here, since pytest runs with --import-mode=importlib.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The README's test command collects this folder too; without the adapter the whole folder is one skip.
pytest.importorskip("agent_gym_openenv", reason="the OpenEnv adapter's tests need it: pip install -e trainers/openenv "
                    "(bash .ci/openenv.sh installs it and runs them)")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from openenv_helpers import (  # noqa: E402
    ANSWER,
    CALL,
    ENV_ID,
    MAX_SESSIONS,
    WRONG,
    start_server,
    stop_server,
    wait_for_sessions,
)


@pytest.fixture(scope="session")
def tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session")
def actions(tokenizer):
    """Token actions by name: the calculator call, the right answer, a wrong answer (end of turn included)."""
    end = [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) + end

    return {"call": ids(CALL), "answer": ids(ANSWER), "wrong": ids(WRONG)}


@pytest.fixture(scope="session")
def make_local(tokenizer):
    """The served env made in process, as the server makes it."""
    import gymnasium as gym

    import agent_gym  # noqa: F401

    return lambda: gym.make(ENV_ID, tokenizer=tokenizer, split="test")


@pytest.fixture(scope="module")
def server():
    """A GSM8KTool server (test split, the default tokenizer, at most MAX_SESSIONS sessions)."""
    proc, url = start_server(ENV_ID, "--split", "test", "--max-sessions", str(MAX_SESSIONS))
    try:
        yield proc, url
    finally:
        stop_server(proc)


@pytest.fixture
def url(server):
    """The server's URL; each test starts and must end with no session open."""
    proc, url = server
    wait_for_sessions(url, active=0, open_envs=0)
    yield url
    assert proc.poll() is None, "the server process died"
    wait_for_sessions(url, active=0, open_envs=0)
    logged = "".join(proc.stderr_tail)
    assert "Traceback" not in logged, f"the server logged an error:\n{logged}"
