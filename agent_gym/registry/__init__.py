"""Env registration under the ``AgentR1`` namespace and discovery of installed env packages.

An env package declares an entry point in the group ``agent_gym.envs`` that names a zero-argument
function; ``import agent_gym`` calls every such function once, and each calls :func:`register_env`
for its ids. Registration stores only import strings, so discovery imports no heavy code.
"""

from agent_gym.registry.registry import (
    ENTRY_POINT_GROUP,
    NAMESPACE,
    EnvCard,
    discover_envs,
    env_class,
    env_kwarg_names,
    UnknownEnvError,
    list_envs,
    make_env,
    make_error_message,
    register_env,
    require_env,
    unknown_kwarg_message,
)

__all__ = [
    "ENTRY_POINT_GROUP", "NAMESPACE", "EnvCard", "discover_envs", "env_class", "env_kwarg_names", "list_envs",
    "make_env", "make_error_message", "register_env", "require_env", "unknown_kwarg_message", "UnknownEnvError",
]
