"""The one env pool: idle envs kept between episodes, so a trainer makes each env once, not per episode.

Making an agent env costs a chat template, a tokenizer lookup and the env's task source (GSM8K's split,
a corpus index); a trainer plays thousands of episodes of the same few kinds. :class:`EnvPool` keeps the
envs an episode has finished with, keyed by what makes two envs interchangeable (env id, constructor
arguments, tokenizer), and hands one back to the next episode of that kind. The verl agent loop and
the TRL rollout both take their envs from it.

An env whose episode failed is in an unknown state: :meth:`EnvPool.lease` closes it instead of keeping
it. :class:`EnvPoolProtocol` is what a rollout needs of a pool (``reserve``, ``lease``, ``close``);
:class:`EnvPool` is its in-process implementation, :class:`agent_gym.rollout.ray_pool.RayEnvPools` the one
whose envs live in Ray workers, and the TRL adapter takes either. Example::

    pool = EnvPool(tokenizer)
    with pool.lease("AgentR1/GSM8KTool-v0", {"split": "train"}) as env:
        trajectory = await play_episode(env, generate, task_id="train-7")
    pool.close()
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import defaultdict
from typing import Any, ContextManager, Iterator, Mapping, NamedTuple, Protocol, runtime_checkable

from agent_gym.core.make import make_env

__all__ = ["EnvPool", "EnvPoolProtocol", "PoolKey"]


@runtime_checkable
class EnvPoolProtocol(Protocol):
    """Where a rollout takes the env of each episode from, in process or in remote workers.

    A batch's episodes play at once: :meth:`reserve` says how many of one kind (env id and arguments)
    it holds before they start, :meth:`lease` gives one episode its env (back to the pool when the block
    ends, closed when it raises), :meth:`close` ends what the pool holds.
    """

    def reserve(self, env_id: str, kwargs: Mapping[str, Any] | None, episodes: int) -> None:
        """Make room for ``episodes`` episodes of this kind at once."""
        ...

    def lease(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> ContextManager[Any]:
        """The env of one episode of this kind."""
        ...

    def close(self) -> None:
        """Close the idle envs (or end the workers)."""
        ...


class PoolKey(NamedTuple):
    """What makes two envs interchangeable: the env id, the constructor arguments (as sorted JSON) and
    the tokenizer (by identity: two tokenizers may render the same messages differently)."""

    env_id: str
    kwargs_json: str
    tokenizer_id: int


class EnvPool:
    """Idle envs by :class:`PoolKey`, made with ``gym.make(env_id, tokenizer=tokenizer, **kwargs)``.

    Args:
        tokenizer: the tokenizer every env is made with (the trainer's model's).
        max_idle: the most idle envs kept per key (more are closed when released); ``None``: no limit.
    """

    def __init__(self, tokenizer: Any = None, *, max_idle: int | None = None):
        self.tokenizer = tokenizer
        self.max_idle = max_idle
        self._idle: dict[PoolKey, list[Any]] = defaultdict(list)
        self._lock = threading.Lock()  # verl may run agent loops of one worker on several threads
        self.made = 0  # envs made by gym.make (a pool that works makes few)

    def key(self, env_id: str, kwargs: Mapping[str, Any], tokenizer: Any = None) -> PoolKey:
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        return PoolKey(env_id, json.dumps(dict(kwargs), sort_keys=True, default=str), id(tokenizer))

    def acquire(self, env_id: str, kwargs: Mapping[str, Any] | None = None, *, tokenizer: Any = None) -> tuple[PoolKey, Any]:
        """An idle env of this kind, else a new one; with its key, for :meth:`release`.

        Args:
            env_id: a registered env id.
            kwargs: its constructor arguments (the tokenizer apart).
            tokenizer: this tokenizer instead of the pool's (a pool shared by several models).

        Returns:
            The env's :class:`PoolKey` (for :meth:`release`) and the env.

        Raises:
            the registry's error naming any env package that failed to register, or ``gym.make``'s.
        """
        kwargs = dict(kwargs or {})
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        key = self.key(env_id, kwargs, tokenizer)
        with self._lock:
            idle = self._idle[key]
            if idle:
                return key, idle.pop()
        env = make_env(env_id, tokenizer=tokenizer, **kwargs)
        self.made += 1
        return key, env

    def release(self, key: PoolKey, env: Any) -> None:
        """Keep ``env`` (its episode ended normally) for the next episode of its kind, or close it if
        ``max_idle`` envs of that kind are idle already."""
        with self._lock:
            idle = self._idle[key]
            if self.max_idle is None or len(idle) < self.max_idle:
                idle.append(env)
                return
        env.close()

    def reserve(self, env_id: str, kwargs: Mapping[str, Any] | None, episodes: int) -> None:
        """Nothing to do in process: :meth:`acquire` makes an env whenever none of its kind is idle."""

    @contextlib.contextmanager
    def lease(self, env_id: str, kwargs: Mapping[str, Any] | None = None, *, tokenizer: Any = None) -> Iterator[Any]:
        """An env for one episode: released to the pool when the block ends normally, closed when it raises."""
        key, env = self.acquire(env_id, kwargs, tokenizer=tokenizer)
        try:
            yield env
        except BaseException:
            env.close()  # state unknown: never reused
            raise
        self.release(key, env)

    def __iter__(self) -> Iterator[PoolKey]:
        """The keys that have idle envs."""
        with self._lock:
            return iter([key for key, envs in self._idle.items() if envs])

    def __getitem__(self, key: PoolKey) -> list[Any]:
        """The idle envs of ``key`` (a copy: acquire and release change the pool)."""
        with self._lock:
            return list(self._idle.get(key, []))

    def idle(self) -> int:
        """How many envs are idle in the pool."""
        with self._lock:
            return sum(len(envs) for envs in self._idle.values())

    def close(self) -> None:
        """Close every idle env (leased ones are closed or released by their lease); the pool stays usable."""
        with self._lock:
            envs = [env for idle in self._idle.values() for env in idle]
            self._idle.clear()
        for env in envs:
            env.close()

    clear = close
