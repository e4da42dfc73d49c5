"""agent_gym: Gymnasium environments for training LLM agents with reinforcement learning.

``import agent_gym`` registers every installed env package under the ``AgentR1`` namespace, so
``gym.make("AgentR1/GSM8KTool-v0")`` works (or ``gym.make("agent_gym:AgentR1/GSM8KTool-v0")`` without
the import). Importing this package is light: no torch, no transformers, no datasets.
"""

from __future__ import annotations

from typing import Any

from agent_gym.core import async_step as _async_step
from agent_gym.registry import NAMESPACE, discover_envs, list_envs, register_env

__version__ = "0.2.0.dev0"

# Public names re-exported lazily (PEP 562) so that the import stays fast.
_LAZY = {
    "AgentEnv": "agent_gym.core.env",
    "EnvReply": "agent_gym.core.env",
    "Grade": "agent_gym.core.env",
    "Turn": "agent_gym.core.env",
    "Observation": "agent_gym.core.types",
    "ResetInfo": "agent_gym.core.types",
    "StepInfo": "agent_gym.core.types",
    "ChatContextSpace": "agent_gym.core.spaces",
    "TokenSequence": "agent_gym.core.spaces",
    "ChatContext": "agent_gym.chat.context",
    "ChatTemplate": "agent_gym.chat.template",
    "check_no_drift": "agent_gym.chat.conformance",
    "DriftReport": "agent_gym.chat.conformance",
    "load_tokenizer": "agent_gym.models",
    "Tool": "agent_gym.tools",
    "tool": "agent_gym.tools",
    "EnvSnapshot": "agent_gym.core.snapshot",
    "SnapshotError": "agent_gym.core.snapshot",
    "fork": "agent_gym.core.snapshot",
    "restore": "agent_gym.core.snapshot",
    "replay": "agent_gym.rollout.replay",
    "Trajectory": "agent_gym.trajectory",
    "StepRecord": "agent_gym.trajectory",
}

__all__ = ["NAMESPACE", "discover_envs", "list_envs", "register_env", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agent_gym' has no attribute {name!r}")


# `await env.astep(...)` on what gym.make returns (gymnasium's wrappers have no async step).
_async_step.install()
discover_envs()
