"""Registration and entry-point discovery (see the package docstring)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import gymnasium as gym

__all__ = ["ENTRY_POINT_GROUP", "NAMESPACE", "EnvCard", "register_env", "discover_envs", "list_envs", "make_error_message"]

#: The entry-point group env packages register under.
ENTRY_POINT_GROUP = "agent_gym.envs"
#: The gymnasium namespace of every env id.
NAMESPACE = "AgentR1"

_CARDS: dict[str, "EnvCard"] = {}
_DISCOVERED = False


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
    **kwargs: Any,
) -> EnvCard:
    """Register ``AgentR1/<name>`` with gymnasium (``name`` like ``"GSM8K-v0"``).

    Args:
        name: the id without namespace; a full ``AgentR1/...`` id is accepted too.
        entry_point: ``"module:Class"``; imported only when the env is made.
        description: one line for ``agent-gym list``.
        tools: names of the tools the env offers (for the listing).
        package: the distribution that provides the env.
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
        # checker stays on so that gym.make validates observations against the chat-context space.
        gym.register(id=env_id, entry_point=entry_point, kwargs=dict(kwargs), disable_env_checker=False)
    return card


def discover_envs(*, force: bool = False) -> list[str]:
    """Call the registration function of every installed env package (once per process).

    A broken plugin does not break the others: its error is reported as a warning naming it.
    Returns the ids known afterwards.
    """
    global _DISCOVERED
    if _DISCOVERED and not force:
        return sorted(_CARDS)
    _DISCOVERED = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            register = ep.load()
            register()
        except Exception as exc:  # noqa: BLE001 - one bad plugin must not hide the others
            warnings.warn(
                f"agent_gym: env package entry point {ep.name!r} ({ep.value}) failed to register: "
                f"{type(exc).__name__}: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )
    return sorted(_CARDS)


def list_envs() -> list[EnvCard]:
    """Cards of every registered env, sorted by id."""
    discover_envs()
    return [_CARDS[k] for k in sorted(_CARDS)]


def make_error_message(env_id: str, exc: BaseException) -> str:
    """The one-line message for a ``TypeError`` that ``gym.make(env_id, ...)`` raised (a constructor
    argument the env does not take), e.g. ``"AgentR1/GSM8K-v0: AgentEnv.__init__() got an unexpected
    keyword argument 'colour'"``.

    gymnasium appends every kwarg to the constructor's message (a tokenizer's whole repr among them);
    that part is dropped, and the env id leads instead. Every command line and server reports a bad env
    argument through this function, so they all say it the same way.
    """
    message = str(exc).split(" was raised from the environment creator", 1)[0]
    return f"{env_id}: {' '.join(message.split())}"
