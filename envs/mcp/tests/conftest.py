"""Fixtures of the MCPTask-v0 tests: tokenizers, and the check that no MCP server process outlives a test."""

from __future__ import annotations

import psutil
import pytest

pytest.importorskip("mcp", reason='the MCP SDK: pip install -e envs/mcp (or "agent-r1-gym[mcp]")')

#: Substrings of the command lines of the servers these tests start (the demo's, the test tree's kv server).
SERVER_MARKS = ("agent_gym_mcp.demo_server", "kv_server.py")


def server_processes() -> list[psutil.Process]:
    """This process's stdio MCP servers (an HTTP server a test starts itself is left out)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if "--http" not in cmdline and any(mark in part for part in cmdline for mark in SERVER_MARKS):
            found.append(child)
    return found


@pytest.fixture
def servers():
    """The function listing this process's stdio MCP server processes (:func:`server_processes`)."""
    return server_processes


@pytest.fixture(autouse=True)
def no_server_left_behind():
    from agent_gym.tools import mcp as agent_mcp

    before = {p.pid for p in server_processes()}
    yield
    assert agent_mcp.live_server_count() == 0
    # close() returns once the SDK saw each server exit; the reaping is the event loop's: a moment
    left = [p for p in server_processes() if p.pid not in before]
    _, alive = psutil.wait_procs(left, timeout=10)
    assert alive == []


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and chat template (the embedded default model's)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="session", params=("smollm2", "gemma3", "deepseek-r1-qwen"))
def family_tokenizer(request):
    """A real tokenizer of the template matrix (tests/conftest.py's): SmolLM2 embedded, Gemma 3 and
    DeepSeek-R1-Distill-Qwen from GGUF headers (cached; skipped where they cannot be had)."""
    from agent_gym.models.gguf import FamilyUnavailable, family_tokenizer as build

    try:
        return build(request.param)
    except FamilyUnavailable as exc:
        pytest.skip(f"{request.param} tokenizer unavailable (offline?): {exc}")
