"""Env state as data: a snapshot of a whole episode, restored in a fresh env (here or in another process).

``snap = env.unwrapped.snapshot()`` returns an :class:`EnvSnapshot`: plain, picklable data (the task,
the chat context's ids and messages, the turn and counters, the env's random generator, the state of
its game or tools). ``restore(env, snap)`` (or ``env.unwrapped.restore(snap)`` on an env that was reset
once) on a fresh env of the same id and arguments continues the episode identically: the same next
``prompt_ids``, the same rewards and ``info`` for the same actions. :func:`fork` gives ``n`` such envs.

What an env holds besides the base class's state it declares, so that nothing is copied by guesswork:

- ``episode_state``: a class attribute naming the instance attributes that hold the episode (a game's
  board, its counters); they are deep-copied;
- tools with state implement ``snapshot_state() -> Any`` and ``restore_state(state)`` (a stateful
  Python sandbox records its cells and re-runs them in a fresh session, checking each output);
- an env or tool that cannot be copied says why in ``fork_blocker() -> str | None``; ``snapshot`` then
  raises :class:`SnapshotError` with that reason. A silent wrong copy is never made.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvSnapshot", "SnapshotError", "fork", "make_like", "restore", "snapshot"]


class SnapshotError(RuntimeError):
    """The env cannot be snapshot or restored (the message says why and what to do)."""


@dataclass(frozen=True)
class EnvSnapshot:
    """The state of one episode of an :class:`~agent_gym.core.env.AgentEnv` (picklable data only)."""

    env_id: str | None
    """The registered id of the env it was taken from (``None``: not made by ``gym.make``)."""
    env_class: str
    """The env's class, ``module.QualName``: a snapshot is restored only into the same class."""
    task: Any
    """The episode's task object (deep-copied)."""
    context: dict[str, Any]
    """The chat context: ``ids``, ``messages``, ``tools``, ``segment``, ``awaiting_env``, ``last_action``."""
    turn: int
    counts: dict[str, int]
    error_kinds: dict[str, int]
    done: bool
    rng_state: dict[str, Any] | None
    """The env's ``np_random`` bit generator state."""
    env_state: dict[str, Any] = field(default_factory=dict)
    """The attributes the env names in ``episode_state``."""
    tool_state: dict[str, Any] = field(default_factory=dict)
    """Tool name -> what its ``snapshot_state()`` returned."""

    def to_bytes(self) -> bytes:
        """The snapshot pickled (what crosses a pipe to another process)."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def from_bytes(data: bytes) -> EnvSnapshot:
        snap = pickle.loads(data)
        if not isinstance(snap, EnvSnapshot):
            raise TypeError(f"not an EnvSnapshot: {type(snap).__name__}")
        return snap


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _env_id(base: Any) -> str | None:
    spec = getattr(base, "spec", None)
    return None if spec is None else str(spec.id)


def snapshot(base: Any) -> EnvSnapshot:
    """The snapshot of ``base`` (an unwrapped agent env) mid-episode (see the module docstring).

    Raises:
        SnapshotError: no episode was started, or the env or a tool cannot be copied (the reason).
    """
    if getattr(base, "context", None) is None or getattr(base, "task", None) is None:
        raise SnapshotError(f"{_env_id(base) or type(base).__name__}: no episode to snapshot; call reset() first")
    blocker = base.fork_blocker()
    if blocker:
        raise SnapshotError(f"{_env_id(base) or type(base).__name__} cannot be snapshot: {blocker}")
    ctx = base.context
    missing = [name for name in base.episode_state if not hasattr(base, name)]
    if missing:
        raise SnapshotError(f"{type(base).__name__}.episode_state names {missing}, which the env does not have")
    return EnvSnapshot(
        env_id=_env_id(base),
        env_class=_class_name(base),
        task=copy.deepcopy(base.task),
        context={
            "ids": list(ctx.ids),
            "messages": copy.deepcopy(ctx.messages),
            "tools": copy.deepcopy(ctx.tools),
            "segment": ctx.segment,
            "awaiting_env": ctx._awaiting_env,
            "last_action": list(getattr(ctx, "_last_action", None) or []) or None,
        },
        turn=int(base._turn),
        counts=dict(base._counts),
        error_kinds=dict(base._error_kinds),
        done=bool(base._done),
        rng_state=copy.deepcopy(base.np_random.bit_generator.state) if base._np_random is not None else None,
        env_state={name: copy.deepcopy(getattr(base, name)) for name in base.episode_state},
        tool_state={t.name: t.snapshot_state() for t in base.tools if callable(getattr(t, "snapshot_state", None))},
    )


def restore_into(base: Any, snap: EnvSnapshot) -> None:
    """Put ``snap``'s episode into ``base`` (an unwrapped agent env of the same class and id).

    Raises:
        SnapshotError: another class or env id, or a tool whose state cannot be rebuilt (the reason).
    """
    import numpy as np

    from agent_gym.chat.context import ChatContext

    if not isinstance(snap, EnvSnapshot):
        raise TypeError(f"restore takes an EnvSnapshot (env.unwrapped.snapshot()), got {type(snap).__name__}")
    if snap.env_class != _class_name(base) or (snap.env_id is not None and _env_id(base) not in (None, snap.env_id)):
        raise SnapshotError(
            f"a snapshot of {snap.env_id or snap.env_class} cannot be restored into {_env_id(base) or _class_name(base)}: "
            "make the env with the same id and arguments"
        )
    tools = {t.name: t for t in base.tools}
    for name, state in snap.tool_state.items():
        if name not in tools or not callable(getattr(tools[name], "restore_state", None)):
            raise SnapshotError(f"the snapshot holds the state of tool {name!r}, which this env has no way to restore")
        try:
            tools[name].restore_state(state)
        except Exception as exc:  # noqa: BLE001 - any failure to rebuild is the restore's failure, said as one
            raise SnapshotError(f"tool {name!r} could not rebuild its state: {exc}") from exc
    ctx = ChatContext(base.template)
    c = snap.context
    ctx.ids, ctx.messages, ctx.tools = list(c["ids"]), copy.deepcopy(c["messages"]), copy.deepcopy(c["tools"])
    ctx.segment, ctx._awaiting_env = int(c["segment"]), bool(c["awaiting_env"])
    if c["last_action"] is not None:
        ctx._last_action = list(c["last_action"])
    base.task = copy.deepcopy(snap.task)
    base.context = ctx
    base._turn = snap.turn
    base._counts = dict(snap.counts)
    base._error_kinds = dict(snap.error_kinds)
    base._done = snap.done
    if snap.rng_state is not None:
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = copy.deepcopy(snap.rng_state)
        base._np_random = rng
    for name, value in snap.env_state.items():
        setattr(base, name, copy.deepcopy(value))


def restore(env: Any, snap: EnvSnapshot) -> Any:
    """Restore ``snap`` into ``env`` (what ``gym.make`` returns, or an unwrapped env) and return ``env``.

    Unlike ``env.unwrapped.restore(snap)`` alone, this also tells gymnasium's wrappers that an episode is
    under way, so ``env.step`` works on a fresh env that was never reset.
    """
    from agent_gym.core.async_step import mark_reset

    env.unwrapped.restore(snap)
    mark_reset(env, snap.turn)
    return env


def make_like(env: Any) -> Any:
    """A fresh env of ``env``'s id and arguments (``gym.make`` with its spec's kwargs; the tokenizer object
    itself is passed on: ``gym.make(spec)`` would deep-copy it for every env).

    Raises:
        SnapshotError: ``env`` was not made by ``gym.make``.
    """
    from agent_gym.core.make import make_env

    spec = env.unwrapped.spec
    if spec is None:
        raise SnapshotError(f"{type(env.unwrapped).__name__} was not made by gym.make: make it with gym.make to fork it")
    return make_env(spec.id, **dict(spec.kwargs))


def fork(env: Any, n: int) -> list[Any]:
    """``n`` fresh envs (``gym.make`` with ``env``'s id and arguments) continuing ``env``'s episode.

    ``env`` itself is left as it is; the forks share nothing with it or with each other.

    Raises:
        SnapshotError: the env cannot be copied (the reason), or was not made by ``gym.make``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    snap = env.unwrapped.snapshot()
    return [restore(make_like(env), snap) for _ in range(n)]
