"""Tool sources (agent_gym.tools.source): any object of the ToolSource protocol plugs into any env, and the
env drives it through the protocol alone (MCP's MCPToolset is one implementation, tested in test_mcp.py).

A real env (GSM8KTool-v0 with the default model's tokenizer) and an in-process source whose tool keeps a
counter per episode: the calls the env makes on the source are recorded and checked in order.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.core.snapshot import SnapshotError
from agent_gym.models import load_tokenizer
from agent_gym.tools import PARSERS, calculator, tool
from agent_gym.tools.source import ToolSource, collect_sources


class CounterSource:
    """A tool ``tick`` that counts its calls in the running episode, and a log of the lifecycle calls."""

    def __init__(self, stateful: bool = True):
        self.log: list[str] = []
        self.count = 0
        self.stateful = stateful

        @tool
        def tick() -> str:
            """Count one more call in this episode."""
            self.count += 1
            return f"tick {self.count}"

        self._tools = [tick]

    @property
    def tools(self) -> list[Any]:
        return self._tools

    def start_episode(self) -> None:
        self.log.append("start")
        self.count = 0

    def end_episode(self) -> None:
        self.log.append("end")

    def fork_blocker(self) -> str | None:
        self.log.append("fork_blocker")
        return "the counter lives in this process" if self.stateful else None

    def close(self) -> None:
        self.log.append("close")


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def act(tok: Any, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


def tick(tok: Any) -> list[int]:
    return act(tok, PARSERS["hermes"]().format_calls([{"name": "tick", "arguments": {}}]))


def test_a_source_is_driven_through_the_protocol(tok):
    source = CounterSource()
    assert isinstance(source, ToolSource)
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test", max_turns=3, tool_sources=[source])
    obs, _ = env.reset(seed=0)
    assert [t["function"]["name"] for t in obs["tools"]] == ["calculate", "tick"]  # after the env's own tools
    assert source.log == ["start"]
    obs, _, terminated, truncated, info = env.step(tick(tok))
    assert info["tool_outputs"] == ["tick 1"] and obs["messages"][-1]["content"] == "tick 1"
    assert not (terminated or truncated) and info["tool_calls"] == 1 and source.log == ["start"]
    with pytest.raises(SnapshotError, match="the counter lives in this process"):
        agent_gym.fork(env, 1)
    _, _, terminated, truncated, _ = env.step(act(tok, "#### 18"))
    assert terminated and source.log == ["start", "fork_blocker", "end"]
    env.reset(seed=1)
    env.step(tick(tok))
    assert source.count == 1  # a fresh count in the new episode
    env.close()
    assert source.log == ["start", "fork_blocker", "end", "start", "close"]


def test_a_source_without_state_can_be_forked(tok):
    source = CounterSource(stateful=False)
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test", max_turns=3, tool_sources=[source])
    env.reset(seed=0)
    env.step(tick(tok))
    [copy] = agent_gym.fork(env, 1)  # made with the same arguments: it shares the source
    assert source.log == ["start", "fork_blocker"]
    _, _, _, _, info = copy.step(tick(tok))
    assert info["tool_outputs"] == ["tick 2"]  # the shared counter: why a stateful source blocks forks
    copy.close()
    env.close()
    assert source.log == ["start", "fork_blocker", "close", "close"]


def test_anything_else_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"tool_sources takes ToolSource objects .*; a single tool goes in tools=\[\.\.\.\]"):
        collect_sources([calculator])
    with pytest.raises(TypeError, match="got dict"):
        collect_sources([{"command": ["python", "server.py"]}])  # type: ignore[list-item]
    assert collect_sources(()) == []
