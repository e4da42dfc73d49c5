"""Making an env from its id: :func:`make_env`, the one call every part of the library makes it with.

``gym.make(env_id, **kwargs)`` with the errors a user can act on: an id that is not registered names
the closest registered id and the env packages that failed to register (the registry, which knows
them, installs that check with :func:`set_resolver` on ``import agent_gym``); an argument the
constructor does not take names the arguments it does take (:func:`make_error_message`).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import gymnasium as gym

from agent_gym.core.arguments import constructor_kwarg_names, unknown_kwarg_message

__all__ = ["NAMESPACE", "UnknownEnvError", "env_class", "env_kwarg_names", "make_env", "make_error_message", "set_resolver"]

#: The gymnasium namespace of every env id.
NAMESPACE = "AgentR1"


class UnknownEnvError(gym.error.NameNotFound, ValueError):
    """No env of this id is registered in this process; the message names the fix."""


def _unregistered(env_id: str) -> None:
    raise UnknownEnvError(
        f"{env_id} is not registered in this process; install its env package and `import agent_gym` "
        "(which registers every installed one), then `agent-gym list` shows it"
    )


_resolve: Callable[[str], None] = _unregistered


def set_resolver(resolve: Callable[[str], None]) -> None:
    """What :func:`make_env` calls for an id not in gymnasium's registry: it registers the id, or raises
    :class:`UnknownEnvError` saying why it cannot (the registry's discovery of env packages)."""
    global _resolve
    _resolve = resolve


def make_env(env_id: str, /, **kwargs: Any) -> Any:
    """``gym.make(env_id, **kwargs)``: a registered env, in gymnasium's wrappers.

    Raises:
        UnknownEnvError: ``env_id`` is not registered (also a ``ValueError`` and gymnasium's
            ``NameNotFound``); the message names the closest id and the packages that failed to register.
        TypeError: the constructor does not take one of ``kwargs``, in :func:`make_error_message`'s words.
    """
    if env_id not in gym.registry:
        _resolve(env_id)
    try:
        return gym.make(env_id, **kwargs)
    except TypeError as exc:
        raise TypeError(make_error_message(env_id, exc)) from None


def env_class(env_id: str) -> Any:
    """The class (or creator) registered as ``env_id`` (a bare id is tried under ``AgentR1/`` too), or
    ``None`` when no such id is registered or its entry point does not import."""
    for candidate in (env_id, f"{NAMESPACE}/{env_id}"):
        try:
            entry = gym.spec(candidate).entry_point
        except gym.error.Error:
            continue
        if isinstance(entry, str):
            try:
                return gym.envs.registration.load_env_creator(entry)
            except Exception:  # noqa: BLE001 - the message falls back to the constructor's own words
                return None
        return entry
    return None


def env_kwarg_names(env: Any) -> list[str] | None:
    """The keyword arguments the constructor of ``env`` (a class, or a registered env id) takes, in
    signature order (see :func:`agent_gym.core.arguments.constructor_kwarg_names`).

    ``None`` when that cannot be known: no such env, a creator that is not a class, an unreadable
    signature, or a ``**kwargs`` that reaches ``object`` (it takes anything).
    """
    cls = env_class(env) if isinstance(env, str) else env
    if not isinstance(cls, type):
        return None
    return constructor_kwarg_names(cls)


_UNEXPECTED = re.compile(r"got an unexpected keyword argument '([^']+)'")


def make_error_message(env_id: str, exc: BaseException) -> str:
    """The one-line message for a ``TypeError`` that ``gym.make(env_id, ...)`` raised.

    For a constructor argument the env does not take, it names the arguments the env does take and the
    closest one (see :func:`unknown_kwarg_message`), e.g. ``"AgentR1/GSM8K-v0 takes no argument
    'colour'; It takes: tokenizer, split, ..."``. Other TypeErrors keep their own words, with the env id
    leading. gymnasium appends every kwarg to the constructor's message (a tokenizer's whole repr among
    them); that part is dropped. Every command line and server reports a bad env argument through this
    function, so they all say it the same way.
    """
    message = " ".join(str(exc).split(" was raised from the environment creator", 1)[0].split())
    if message.startswith((f"{env_id} takes no argument ", f"{env_id}: ")):
        return message  # already said in these words (e.g. by a wrapped factory)
    match = _UNEXPECTED.search(message)
    if match is not None:
        accepted = env_kwarg_names(env_id)
        # A name the constructor chain does take was rejected deeper inside (a bug, not a user's
        # argument): its own words say more than the list would.
        if accepted is not None and match.group(1) not in accepted:
            return unknown_kwarg_message(env_id, match.group(1), accepted)
    return f"{env_id}: {message}"
