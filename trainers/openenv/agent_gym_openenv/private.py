"""Every private name of openenv-core that agent_gym_openenv uses, in one module, behind one check.

openenv-core's ``EnvClient`` is subclassed through three abstract methods with private names, and its
error handling and websocket are reachable only through private ones. Only this module names them: the
client subclasses :class:`EnvClientBridge` (its hooks under public names) and reaches the connection
through :func:`send`, :func:`receive`, :func:`websocket` and :func:`forget_websocket`
(``tests/test_private.py`` fails on any other module that touches a private name of openenv-core).
Before the first of them is used, :func:`check` runs once, when the first bridge client is created: it
raises :class:`UnsupportedOpenEnv` when the installed openenv-core is outside :data:`TESTED_OPENENV`
(naming the installed version and the ``pip install`` that gets a tested one), or when a method below is
gone from ``EnvClient`` (naming it). The instance attribute (row 7) is set by ``EnvClient.__init__``; each
access goes through :func:`_get`, which names it in the same error when it is gone. The server
(:mod:`agent_gym_openenv.server`) uses public names only.

What is used (``EnvClient``: ``openenv.core.env_client.EnvClient``; "hook": ours, called by openenv-core;
"override": ours replaces openenv-core's; "call" / "attribute": openenv-core's, used by ours):

==  ==============================  ========  ==================================================  ===========
#   private name                    how       used by (through)                                   openenv
==  ==============================  ========  ==================================================  ===========
1   EnvClient._step_payload         hook      client.AgentGymClient.encode_action                 0.3.0
2   EnvClient._parse_result         hook      client.AgentGymClient.decode_result                 0.3.0
3   EnvClient._parse_state          hook      client.AgentGymClient.decode_state                  0.3.0
4   EnvClient._send_and_receive     override  client.AgentGymClient.exchange                      0.3.0
5   EnvClient._send                 call      client.AgentGymClient.exchange (send)               0.3.0
6   EnvClient._receive              call      client.AgentGymClient.exchange (receive)            0.3.0
7   EnvClient._ws                   attribute client.AgentGymClient._last_message (websocket,     0.3.0
                                              forget_websocket), client.RemoteEnv.__del__
                                              (websocket)
==  ==============================  ========  ==================================================  ===========

Why:

==  ========================================================================================================
#   why
==  ========================================================================================================
1   ``EnvClient``'s abstract method: how an action goes on the wire (``{"token_ids": [...]}`` or
    ``{"text": ...}``). Every typed OpenEnv client defines it; openenv-core calls it in ``step``.
2   Abstract: a reply's ``data`` as a ``StepResult`` of this package's ``ChatObservation``.
3   Abstract: the ``state`` reply as this package's ``EpisodeState``.
4   openenv-core's raises a bare ``RuntimeError`` with the message and code as text, dropping the
    validation errors; ours raises :class:`~agent_gym_openenv.client.ServerError` with ``code`` and
    ``errors``, and, when the server refused the session (``CAPACITY_REACHED``) and closed the connection,
    which a send may find closed already, the error of the message it sent before closing.
5   openenv-core's own send (it connects first when not connected), for row 4.
6   openenv-core's own receive (with the client's ``message_timeout_s``), for row 4.
7   The websocket (``None`` when not connected): row 4 reads the message the server sent before it closed
    the connection and then drops the dead connection, so the next call reconnects; ``RemoteEnv.__del__``
    closes a session left open only when there is a connection.
==  ========================================================================================================

Tested release: 0.3.0, the only 0.3 release; :data:`TESTED_OPENENV` is the pin of
trainers/openenv/pyproject.toml.
"""

from __future__ import annotations

import abc
from typing import Any, TypeVar

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

__all__ = [
    "TESTED_OPENENV",
    "TESTED_RELEASES",
    "PRIVATE_METHODS",
    "PRIVATE_ATTRIBUTES",
    "PRIVATE_NAMES",
    "UnsupportedOpenEnv",
    "check",
    "installed_openenv_version",
    "EnvClientBridge",
    "send",
    "receive",
    "websocket",
    "forget_websocket",
]

#: The openenv-core releases this adapter supports (the pin of trainers/openenv/pyproject.toml).
TESTED_OPENENV = ">=0.3.0,<0.4"
#: The releases the tests have passed with.
TESTED_RELEASES = ("0.3.0",)
#: Rows 1-6: methods of ``EnvClient`` (checked on the class).
PRIVATE_METHODS = ("_step_payload", "_parse_result", "_parse_state", "_send_and_receive", "_send", "_receive")
#: Row 7: attributes ``EnvClient.__init__`` sets (checked on an instance, at each access).
PRIVATE_ATTRIBUTES = ("_ws",)
PRIVATE_NAMES = PRIVATE_METHODS + PRIVATE_ATTRIBUTES

ActT = TypeVar("ActT")
ObsT = TypeVar("ObsT")
StateT = TypeVar("StateT")

PIP_FIX = f"pip install 'openenv-core{TESTED_OPENENV}'"

_checked: list[str | None] = []  # the version the check passed with, once it has


class UnsupportedOpenEnv(RuntimeError):
    """The installed openenv-core is outside the tested range, or lacks a private name the adapter uses."""


def installed_openenv_version() -> str | None:
    """The installed openenv-core's version (its distribution metadata, else ``openenv.__version__``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openenv-core")
    except PackageNotFoundError:
        import openenv

        return getattr(openenv, "__version__", None)


def _missing(owner: Any, name: str, version: str | None) -> UnsupportedOpenEnv:
    shown = f"openenv-core {version}" if version is not None else "the installed openenv-core"
    kind = owner.__name__ if isinstance(owner, type) else type(owner).__name__
    return UnsupportedOpenEnv(
        f"{shown}'s {kind} has no {name}, a private name agent-r1-gym-openenv uses (agent_gym_openenv.private); "
        f"the adapter is tested with openenv-core{TESTED_OPENENV}: {PIP_FIX}"
    )


def check(target: Any = None, *, installed: str | None = None) -> str | None:
    """Check ``installed`` (default: the installed openenv-core) and ``target`` (default: ``EnvClient``).

    With both defaults the check runs once per process; later calls return at once.

    Returns:
        the version checked (``None``: unknown, a source tree without metadata: only the names are checked).

    Raises:
        UnsupportedOpenEnv: the version is outside :data:`TESTED_OPENENV`, or ``target`` lacks a method of
            the table.
    """
    default = target is None and installed is None
    if default and _checked:
        return _checked[0]
    version = installed if installed is not None else installed_openenv_version()
    if version is not None:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            supported = SpecifierSet(TESTED_OPENENV).contains(Version(version), prereleases=True)
        except InvalidVersion:
            supported = False
        if not supported:
            raise UnsupportedOpenEnv(
                f"agent-r1-gym-openenv supports openenv-core{TESTED_OPENENV} (tested: {', '.join(TESTED_RELEASES)}); "
                f"openenv-core {version} is installed: {PIP_FIX}"
            )
    owner = EnvClient if target is None else target
    for name in PRIVATE_METHODS:
        if not callable(getattr(owner, name, None)):
            raise _missing(owner, name, version)
    if default:
        _checked.append(version)
    return version


def _get(obj: Any, name: str) -> Any:
    """``obj.<name>`` for a name of the table, or the check's error naming it."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise _missing(obj, name, installed_openenv_version()) from None


class EnvClientBridge(EnvClient[ActT, ObsT, StateT]):
    """``EnvClient`` with its private hooks (rows 1-4) under public names; :func:`check` runs at the first
    construction, before openenv-core can call a hook (and before its abstract methods are looked at)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        check()
        return super().__new__(cls)

    @abc.abstractmethod
    def encode_action(self, action: ActT) -> dict[str, Any]:
        """Row 1: an action as the ``data`` of a ``step`` message."""

    @abc.abstractmethod
    def decode_result(self, payload: Any) -> StepResult[ObsT]:
        """Row 2: the ``data`` of a ``reset`` or ``step`` reply as a ``StepResult``."""

    @abc.abstractmethod
    def decode_state(self, payload: Any) -> StateT:
        """Row 3: the ``data`` of a ``state`` reply."""

    async def exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Row 4: send ``message``, return the reply (openenv-core's own unless a subclass replaces it)."""
        reply: dict[str, Any] = await EnvClient._send_and_receive(self, message)
        return reply

    def _step_payload(self, action: ActT) -> dict[str, Any]:
        return self.encode_action(action)

    def _parse_result(self, payload: Any) -> StepResult[ObsT]:
        return self.decode_result(payload)

    def _parse_state(self, payload: Any) -> StateT:
        return self.decode_state(payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        return await self.exchange(message)


async def send(client: EnvClient, message: dict[str, Any]) -> None:
    """Row 5: openenv-core's send (connects first when not connected)."""
    await _get(client, "_send")(message)


async def receive(client: EnvClient) -> dict[str, Any]:
    """Row 6: openenv-core's receive (waits at most the client's ``message_timeout_s``)."""
    reply: dict[str, Any] = await _get(client, "_receive")()
    return reply


def websocket(client: Any) -> Any:
    """Row 7: the client's websocket, ``None`` when it is not connected."""
    return _get(client, "_ws")


def forget_websocket(client: Any) -> None:
    """Row 7: drop a dead connection (the next call connects again)."""
    _get(client, "_ws")
    client._ws = None
