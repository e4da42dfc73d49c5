"""OpenEnv for agent-r1-gym: any registered env served over OpenEnv's protocol, and its clients.

- :mod:`agent_gym_openenv.server`: ``create_app`` / ``serve`` (what ``agent-gym serve ID`` runs), built
  on openenv-core's ``HTTPEnvServer``: one env instance per websocket session, many sessions per server.
- :mod:`agent_gym_openenv.client`: ``AgentGymClient`` (openenv-core's ``EnvClient``, typed),
  ``RemoteEnv`` (a session as a ``gymnasium.Env`` returning what the env returns in process) and
  ``remote_env_factory`` (sessions spread over several servers).
- :mod:`agent_gym_openenv.models`: the wire types ``TokenAction``, ``ChatObservation``, ``EpisodeState``.
- :mod:`agent_gym_openenv.command`: the ``agent-gym serve`` subcommand (an ``agent_gym.commands`` entry point).

Names are imported lazily: ``import agent_gym_openenv`` alone does not import openenv-core (which
takes seconds: it imports gradio).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0.dev0"

_LAZY = {
    "create_app": "agent_gym_openenv.server",
    "serve": "agent_gym_openenv.server",
    "AgentGymEnvironment": "agent_gym_openenv.server",
    "DEFAULT_MAX_SESSIONS": "agent_gym_openenv.server",
    "AgentGymClient": "agent_gym_openenv.client",
    "RemoteEnv": "agent_gym_openenv.client",
    "ServerError": "agent_gym_openenv.client",
    "remote_env_factory": "agent_gym_openenv.client",
    "fetch_env_info": "agent_gym_openenv.client",
    "wait_for_server": "agent_gym_openenv.client",
    "TokenAction": "agent_gym_openenv.models",
    "ChatObservation": "agent_gym_openenv.models",
    "EpisodeState": "agent_gym_openenv.models",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agent_gym_openenv' has no attribute {name!r}")
