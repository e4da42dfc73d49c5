"""The keyword arguments an env's constructor takes, and the message for one it does not.

Env constructors form a chain: each subclass names its own arguments and passes ``**kwargs`` on with
``super().__init__(**kwargs)``, down to :class:`agent_gym.AgentEnv`, whose ``__init__`` ends the chain
(it is marked with :func:`ends_kwargs_chain` and refuses what is left with :func:`unknown_kwarg_message`).
So the accepted names are knowable from the signatures alone, and ``gym.make``, the CLI and every server
can all answer a misspelt argument with the list and the closest name.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Sequence, TypeVar

__all__ = ["constructor_kwarg_names", "ends_kwargs_chain", "kwarg_hint", "unknown_kwarg_message"]

_F = TypeVar("_F", bound=Callable[..., Any])
_CHAIN_END = "__agent_gym_kwargs_chain_end__"


def ends_kwargs_chain(init: _F) -> _F:
    """Mark an ``__init__`` whose ``**kwargs`` are refused, not passed on (the walk stops there)."""
    setattr(init, _CHAIN_END, True)
    return init


def constructor_kwarg_names(cls: type) -> list[str] | None:
    """The keyword arguments ``cls(...)`` takes, in signature order: the class's own ``__init__`` first,
    then, while an ``__init__`` passes ``**kwargs`` on, those of the next base along the MRO that defines
    one, until an ``__init__`` without ``**kwargs`` or one marked with :func:`ends_kwargs_chain`.

    ``None`` when that cannot be known: an unreadable signature, or a ``**kwargs`` that reaches
    ``object`` (it takes anything as far as the signatures tell).
    """
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            return None
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            return None
        forwards = False
        for i, param in enumerate(params):
            if i == 0 or param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                continue  # self, and what cannot be given by name
            if param.kind is param.VAR_KEYWORD:
                forwards = not getattr(init, _CHAIN_END, False)
            elif param.name not in names:
                names.append(param.name)
        if not forwards:
            return names
    return names


def kwarg_hint(name: str, accepted: Sequence[str]) -> str:
    """``"; did you mean 'x'? It takes: a, b, ..."`` (the guess only when one is close, by
    :func:`difflib.get_close_matches`)."""
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
    guess = f"; did you mean {close[0]!r}?" if close else "."
    return f"{guess} It takes: {', '.join(accepted)}"


def unknown_kwarg_message(owner: str, name: str, accepted: Sequence[str]) -> str:
    """``"<owner> takes no argument 'name'; did you mean 'x'? It takes: a, b, ..."``."""
    return f"{owner} takes no argument {name!r}{kwarg_hint(name, accepted)}"
