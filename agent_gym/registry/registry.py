"""Registration and entry-point discovery (see the package docstring)."""

from __future__ import annotations

import difflib
import sys
import threading
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import gymnasium as gym

from agent_gym.core.arguments import unknown_kwarg_message
from agent_gym.core.make import NAMESPACE, UnknownEnvError, env_class, env_kwarg_names, make_env, make_error_message, set_resolver

__all__ = [
    "ENTRY_POINT_GROUP", "NAMESPACE", "EnvCard", "register_env", "discover_envs", "require_env", "list_envs",
    "make_error_message", "env_class", "env_kwarg_names", "unknown_kwarg_message", "make_env", "UnknownEnvError",
]

#: The entry-point group env packages register under.
ENTRY_POINT_GROUP = "agent_gym.envs"

_CARDS: dict[str, "EnvCard"] = {}
_DISCOVERED = False
# Threads of one process may import agent_gym at once (an agent-loop worker's executor threads): the
# first runs discovery, the others wait for it instead of seeing a half-registered registry.
_DISCOVERY_LOCK = threading.RLock()
#: entry point name -> why its registration failed (the last discovery that tried it)
_FAILED: dict[str, str] = {}


@dataclass(frozen=True)
class EnvCard:
    """What ``agent-gym list`` shows about an env."""

    id: str
    entry_point: str
    description: str
    tools: tuple[str, ...] = ()
    package: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


def register_env(
    name: str,
    entry_point: str,
    *,
    description: str,
    tools: tuple[str, ...] | list[str] = (),
    package: str | None = None,
    env_checker: bool = True,
    **kwargs: Any,
) -> EnvCard:
    """Register ``AgentR1/<name>`` with gymnasium (``name`` like ``"GSM8K-v0"``).

    Args:
        name: the id without namespace; a full ``AgentR1/...`` id is accepted too.
        entry_point: ``"module:Class"``; imported only when the env is made.
        description: one line for ``agent-gym list``.
        tools: names of the tools the env offers (for the listing).
        package: the distribution that provides the env.
        env_checker: wrap the env in gymnasium's passive checker (its first ``reset`` and ``step``
            validated against the spaces); ``False`` for an env whose ``reset`` and ``step`` wait on
            something outside (the checker runs them synchronously).
        kwargs: default constructor arguments (``gym.make`` arguments override them).
    """
    env_id = name if name.startswith(f"{NAMESPACE}/") else f"{NAMESPACE}/{name}"
    if env_id in _CARDS and _CARDS[env_id].entry_point != entry_point:
        raise ValueError(
            f"{env_id} is already registered by {_CARDS[env_id].package or _CARDS[env_id].entry_point}; "
            f"refusing to replace it with {entry_point}"
        )
    card = EnvCard(env_id, entry_point, description, tuple(tools), package, dict(kwargs))
    _CARDS[env_id] = card
    if env_id not in gym.registry:
        # Episode limits are the env's own (turns, tokens): no TimeLimit wrapper, and the passive
        # checker stays on (unless env_checker=False) so that gym.make validates observations against the
        # chat-context space.
        gym.register(id=env_id, entry_point=entry_point, kwargs=dict(kwargs), disable_env_checker=not env_checker)
    return card


def discover_envs(*, force: bool = False) -> list[str]:
    """Call the registration function of every installed env package (once per process).

    A broken plugin does not break the others: its error is reported as a warning naming it (and where
    its module came from), and remembered for :func:`require_env`. ``force=True`` runs every
    registration function again (registering an id twice with the same entry point is a no-op).
    Returns the ids known afterwards.
    """
    global _DISCOVERED
    with _DISCOVERY_LOCK:
        if _DISCOVERED and not force:
            return sorted(_CARDS)
        _DISCOVERED = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                register = ep.load()
                register()
            except Exception as exc:  # noqa: BLE001 - one bad plugin must not hide the others
                _FAILED[ep.name] = f"{type(exc).__name__}: {exc}{_module_origin(ep.module)}"
                warnings.warn(
                    f"agent_gym: env package entry point {ep.name!r} ({ep.value}) failed to register: {_FAILED[ep.name]}",
                    RuntimeWarning,
                    stacklevel=2,
                )
            else:
                _FAILED.pop(ep.name, None)
        return sorted(_CARDS)


def _module_origin(module_name: str) -> str:
    """Where the imported module of an entry point came from, for a failed registration's message."""
    module = sys.modules.get(module_name)
    if module is None:
        return ""
    if getattr(module, "__file__", None) is None and hasattr(module, "__path__"):
        return (f" [{module_name!r} was imported as a namespace package from {list(module.__path__)}: a folder of "
                "that name without __init__.py, earlier on sys.path, hides the installed package]")
    return f" [{module_name!r} from {getattr(module, '__file__', None)}]"


def require_env(env_id: str) -> None:
    """Make sure ``env_id`` is registered in this process before ``gym.make``.

    If it is not, discovery runs once more (a registration that failed transiently, e.g. while another
    thread was importing the same package, then succeeds); if it still is not, raises :class:`~agent_gym.core.make.UnknownEnvError` (gymnasium's
    ``NameNotFound``) naming the registered ids, the closest one and every env package whose
    registration failed, and why.
    """
    if env_id in gym.registry:
        return
    discover_envs(force=True)
    if env_id in gym.registry:
        return
    known = ", ".join(sorted(_CARDS)) or "none"
    close = difflib.get_close_matches(env_id, list(_CARDS), n=1)
    guess = f"; did you mean {close[0]}?" if close else ""
    if _FAILED:
        hint = "; env packages that failed to register here: " + "; ".join(
            f"{name!r}: {why}" for name, why in sorted(_FAILED.items()))
    else:
        hint = ("; is its env package installed? install it (`pip install agent-r1-gym-<family>`, or "
                "`pip install -e envs/<family>` in a checkout) and `agent-gym list` shows it")
    raise UnknownEnvError(f"{env_id} is not registered in this process (registered: {known}){guess}{hint}")


def list_envs() -> list[EnvCard]:
    """Cards of every registered env, sorted by id."""
    discover_envs()
    return [_CARDS[k] for k in sorted(_CARDS)]


set_resolver(require_env)  # make_env registers a missing id through discovery, or says why it cannot
