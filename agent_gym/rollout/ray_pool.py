"""Env workers on Ray: envs live in remote worker processes, episodes are driven from the trainer's loop.

One Python process steps its envs on one core; a rollout of thousands of tool-using episodes (a
sandbox, a search index, a simulated user) needs more. :class:`RayEnvPool` starts ``num_workers`` Ray
actors, each holding up to ``envs_per_worker`` envs made in its own process with
``gym.make(env_id, tokenizer=..., **env_kwargs)``, and hands out :class:`RayEnv` proxies that
:func:`~agent_gym.rollout.episode.play_episode` drives like any env: ``await env.areset(...)`` and
``await env.astep(ids)`` await Ray object refs, so the trainer's event loop keeps generating for the
other episodes while a worker steps.

- **Scheduling.** A proxy takes an env slot when an episode starts (its reset) and gives it back when
  the episode ends (the step that terminates or truncates it), on the least-loaded worker (ties
  round-robin). At most ``num_workers * envs_per_worker`` episodes run at once; a reset beyond that
  waits for a slot. Idle proxies hold nothing, so ``pool.make_env`` is a cheap factory for
  :func:`~agent_gym.rollout.async_runner.arun_episodes`.
- **Same trajectories.** Observations come back as the env's dict (``prompt_ids`` an int64 array),
  rewards, flags and ``info`` as the env returned them: an episode played through a proxy is the one
  played in process.
- **A worker that dies** fails the episodes it was stepping with :class:`EnvWorkerDied` (naming the
  worker and the env); the pool starts a replacement, so the next episodes run. A reset that finds its
  worker dead starts its episode on the replacement instead.
- **The tokenizer** goes by name or path (``None``: the default model's) and is loaded in each worker.

Ray is optional: this module is the only one in ``agent_gym`` that imports it, and only when a pool is
made. Example::

    import ray
    ray.init()                                  # or ray.init(address="auto") on a cluster
    with RayEnvPool("AgentR1/GSM8KPython-v0", num_workers=8, env_kwargs={"split": "train"}) as pool:
        result = run_episodes_concurrent(pool.make_env, policy, episodes=1024, concurrency=pool.capacity)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import threading
import uuid
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import gymnasium as gym
import numpy as np

__all__ = ["EnvWorker", "EnvWorkerDied", "EnvWorkerError", "RayEnv", "RayEnvPool", "RayEnvPools", "TokenizerName", "import_ray"]

INSTALL_HINT = 'pip install "agent-r1-gym[ray]"'

#: The Ray options of a worker actor unless ``worker_options`` says otherwise: one core each (an env
#: worker keeps one busy), spread over the cluster's nodes.
DEFAULT_WORKER_OPTIONS: dict[str, Any] = {"num_cpus": 1, "scheduling_strategy": "SPREAD"}


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` that names the install command (Ray is optional)."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"RayEnvPool needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


class EnvWorkerError(RuntimeError):
    """An env worker could not serve a request (it did not start in time); the message says what to change."""


class EnvWorkerDied(EnvWorkerError):
    """The worker process holding this episode's env died: the episode is lost, the pool replaced the worker."""


@dataclass(frozen=True)
class TokenizerName:
    """The tokenizer of a :class:`RayEnv`'s envs, by name: the workers hold the tokenizer itself.

    Enough for :func:`~agent_gym.rollout.episode.replay_metadata`, which records ``name_or_path``.
    """

    name_or_path: str


# -- the worker ------------------------------------------------------------------------------------------


class EnvWorker:
    """The Ray actor of :class:`RayEnvPool`: makes, resets and steps envs in its own process.

    Envs are held under lease ids chosen by the proxies: a reset on a new lease takes an idle env (or
    makes one), a step that ends the episode returns the env to the idle list. The methods are
    ``async`` so that Ray runs them on the actor's event loop: an env whose tool waits (the sandbox)
    does not keep the worker's other envs from stepping.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], tokenizer: str | None, max_idle: int):
        # Ray imports this module in the worker to find the class, so `import agent_gym` has run there
        # first: the installed env packages are registered and gymnasium's wrappers have astep.
        from agent_gym.models import load_tokenizer

        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.tokenizer = load_tokenizer(tokenizer)
        self.max_idle = max_idle
        self.idle: list[Any] = []
        self.leased: dict[str, Any] = {}
        self.stepping: set[str] = set()
        #: lease -> discard: leases given up while their step ran, settled when it ends.
        self.released: dict[str, bool] = {}
        self.ray_calls = 0  # calls() received: one per batch of resets and steps
        self.env_calls = 0  # resets and steps run through calls()

    async def ready(self) -> dict[str, Any]:
        """Where this worker runs (for error messages): its pid and node address."""
        import socket

        ray = import_ray()
        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address(), "host": socket.gethostname()}

    async def describe(self) -> dict[str, Any]:
        """What a proxy shows of the env (its spec, spaces, tokenizer name); makes the first env, kept idle."""
        env = self._take()
        self._give(env)
        base = env.unwrapped
        spec = base.spec
        return {
            "env_id": spec.id if spec is not None else self.env_id,
            "spec_kwargs": {k: v for k, v in (spec.kwargs if spec is not None else {}).items() if k != "tokenizer"},
            "tokenizer": str(getattr(self.tokenizer, "name_or_path", "") or ""),
            "action_space": env.action_space,
            "observation_space": env.observation_space,
        }

    async def reset(self, lease: str, seed: int | None, options: Mapping[str, Any] | None) -> tuple[Any, Any]:
        env = self.leased.get(lease)
        if env is None:
            env = self.leased[lease] = self._take()
        try:
            return env.reset(seed=seed, options=None if options is None else dict(options))
        except BaseException:
            self._end(lease, discard=True)
            raise

    async def step(self, lease: str, action: Any) -> tuple[Any, Any, Any, Any, Any]:
        from agent_gym.core.async_step import astep

        env = self.leased.get(lease)
        if env is None:
            raise gym.error.ResetNeeded(f"{self.env_id}: no episode under lease {lease} on this worker; reset the env first")
        self.stepping.add(lease)
        try:
            result = await astep(env, action)
        except BaseException:
            self.stepping.discard(lease)
            self._end(lease, discard=True)  # mid-step failure: the env's state is unknown
            raise
        self.stepping.discard(lease)
        if lease in self.released:
            self._end(lease, discard=self.released.pop(lease))
        elif result[2] or result[3]:
            self._end(lease, discard=False)  # the episode is over: the env serves the next one
        return result

    async def calls(self, batch: list[tuple[str, str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """Several ``reset`` / ``step`` calls in one Ray call: those a driver's event loop issued to this
        worker in one turn (see :class:`_CallBatch`). They run concurrently, as separate calls would.

        Returns:
            Per call, in order: ``(True, its result)`` or ``(False, the exception it raised)``.
        """

        async def one(method: str, lease: str, args: tuple[Any, ...]) -> tuple[bool, Any]:
            if method not in ("reset", "step"):
                return False, ValueError(f"EnvWorker.calls runs reset and step, not {method!r}")
            try:
                return True, await getattr(self, method)(lease, *args)
            except Exception as exc:  # the caller re-raises it: each call fails alone, as a Ray call would
                return False, _picklable(exc)

        self.ray_calls += 1
        self.env_calls += len(batch)
        return list(await asyncio.gather(*(one(*call) for call in batch)))

    async def stats(self) -> dict[str, int]:
        """``ray_calls`` (batches received), ``env_calls`` (the resets and steps in them), ``envs`` (made and kept)."""
        return {"ray_calls": self.ray_calls, "env_calls": self.env_calls, "envs": len(self.idle) + len(self.leased)}

    async def release(self, lease: str, discard: bool) -> None:
        """The proxy gave the lease up (closed, or its call was cancelled): keep or close its env."""
        if lease in self.stepping:
            self.released[lease] = discard
        else:
            self._end(lease, discard=discard)

    async def close(self) -> None:
        envs = self.idle + list(self.leased.values())
        self.idle, self.leased = [], {}
        for env in envs:
            env.close()

    def _take(self) -> Any:
        if self.idle:
            return self.idle.pop()
        from agent_gym.core.make import make_env

        return make_env(self.env_id, tokenizer=self.tokenizer, **self.env_kwargs)

    def _give(self, env: Any) -> None:
        if len(self.idle) < self.max_idle:
            self.idle.append(env)
        else:
            env.close()

    def _end(self, lease: str, *, discard: bool) -> None:
        env = self.leased.pop(lease, None)
        if env is None:
            return
        if discard:
            env.close()
        else:
            self._give(env)


def _picklable(exc: Exception) -> Exception:
    """``exc``, or a RuntimeError with its type and message if it cannot travel back to the driver."""
    import pickle

    try:
        pickle.dumps(exc)
    except Exception:
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return exc


_remote_class: Any = None
_remote_lock = threading.Lock()


def _remote_worker_class() -> Any:
    """:class:`EnvWorker` as a Ray actor class (made once, on first use: importing this module needs no Ray)."""
    global _remote_class
    with _remote_lock:
        if _remote_class is None:
            _remote_class = import_ray().remote(EnvWorker)
        return _remote_class


# -- scheduling --------------------------------------------------------------------------------------------


class _Waiter:
    """A reset waiting for a free env slot: from an event loop (a future) or from plain code (an event)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None):
        self.loop = loop
        self.future: asyncio.Future[int] | None = loop.create_future() if loop is not None else None
        self.event = threading.Event()
        self.index: int | None = None

    def deliver(self, index: int, slots: _Slots) -> None:
        """Hand slot ``index`` over; a waiter that is gone (cancelled, its loop closed) gives it back."""
        if self.loop is None:
            self.index = index
            self.event.set()
            return
        try:
            self.loop.call_soon_threadsafe(self._settle, index, slots)
        except RuntimeError:  # the waiter's loop is closed: nobody takes the slot
            slots.give(index)

    def _settle(self, index: int, slots: _Slots) -> None:
        assert self.future is not None
        if self.future.done():  # cancelled meanwhile
            slots.give(index)
        else:
            self.future.set_result(index)


class _Slots:
    """Env slots per worker: a new episode goes to the least-loaded worker (ties in turn), or waits.

    Shared by every proxy of a pool, whichever thread or event loop drives it (``run_episodes`` plays on
    a loop of its own, a trainer on its loop, a user's loop in plain code), hence a thread lock and
    waiters that are woken through their own loop.
    """

    def __init__(self, workers: int, per_worker: int):
        self.load = [0] * workers
        self.per_worker = per_worker
        self.lock = threading.Lock()
        self.waiters: deque[_Waiter] = deque()
        self.turn = itertools.count()

    def _pick(self) -> int | None:
        """The least-loaded worker with a free slot (load taken), else ``None``. Call with the lock held."""
        n = len(self.load)
        start = next(self.turn) % n
        best = min(((start + k) % n for k in range(n)), key=self.load.__getitem__)
        if self.load[best] >= self.per_worker:
            return None
        self.load[best] += 1
        return best

    async def atake(self) -> int:
        with self.lock:
            index = self._pick()
            if index is not None:
                return index
            waiter = _Waiter(asyncio.get_running_loop())
            self.waiters.append(waiter)
        assert waiter.future is not None
        try:
            return await waiter.future
        except BaseException:
            with self.lock:
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
            if waiter.future.done() and not waiter.future.cancelled():
                self.give(waiter.future.result())  # delivered, then cancelled before this task resumed
            raise  # a slot delivered after the cancellation is given back by _Waiter._settle

    def take(self) -> int:
        with self.lock:
            index = self._pick()
            if index is not None:
                return index
            waiter = _Waiter(None)
            self.waiters.append(waiter)
        waiter.event.wait()
        assert waiter.index is not None
        return waiter.index

    def give(self, index: int) -> None:
        with self.lock:
            self.load[index] -= 1
            waiter = self.waiters.popleft() if self.waiters else None
            handed = self._pick() if waiter is not None else None
        if waiter is not None and handed is not None:
            waiter.deliver(handed, self)


# -- the pool ----------------------------------------------------------------------------------------------


@dataclass
class _Worker:
    """One worker actor of the pool; a replacement has the same index and the next generation."""

    index: int
    generation: int
    actor: Any
    ready_ref: Any
    started: bool = False
    pid: int | None = None
    node: str | None = None
    #: the call batch being gathered per driving event loop (see :class:`_CallBatch`)
    batches: dict[asyncio.AbstractEventLoop, _CallBatch] = field(default_factory=dict, repr=False)

    def name(self, of: int) -> str:
        where = f" (pid {self.pid} on {self.node})" if self.pid is not None else ""
        again = f", replacement {self.generation}" if self.generation else ""
        return f"env worker {self.index} of {of}{again}{where}"


class _CallBatch:
    """The async resets and steps one event loop issues to one worker in one turn of the loop.

    The driver makes one Ray call per env call otherwise, and with cheap env steps that is its limit:
    on 16 cores, 4 workers reached 194 episodes/s and 12 workers 175 (in process: 226), the driver
    spending its time in Ray's call path. Episodes of a batched rollout finish their generations in the
    same loop turn (one round of generation), so their steps go out together: :meth:`send` runs at the
    end of the turn (``loop.call_soon``) and makes one :meth:`EnvWorker.calls` call for all of them.
    """

    def __init__(self, worker: _Worker, loop: asyncio.AbstractEventLoop):
        self.worker = worker
        self.loop = loop
        self.calls: list[tuple[str, str, tuple[Any, ...]]] = []
        self.futures: list[asyncio.Future[tuple[bool, Any]]] = []

    @staticmethod
    async def call(worker: _Worker, method: str, lease: str, *args: Any) -> Any:
        """``worker``'s ``method(lease, *args)``, sent with the other calls of this loop turn; its result,
        or the exception it raised in the worker (a dead worker: Ray's ``RayActorError``)."""
        loop = asyncio.get_running_loop()
        batch = worker.batches.get(loop)
        if batch is None:
            batch = worker.batches[loop] = _CallBatch(worker, loop)
            loop.call_soon(batch.send)
        future: asyncio.Future[tuple[bool, Any]] = loop.create_future()
        batch.calls.append((method, lease, args))
        batch.futures.append(future)
        ok, value = await future
        if not ok:
            raise value
        return value

    def send(self) -> None:
        if self.worker.batches.get(self.loop) is self:
            del self.worker.batches[self.loop]
        ref = self.worker.actor.calls.remote(self.calls)
        self.loop.create_task(self._deliver(ref))

    async def _deliver(self, ref: Any) -> None:
        try:
            results = await ref
        except BaseException as exc:  # the worker died (or Ray failed the call): every call of the batch fails
            for future in self.futures:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for future, result in zip(self.futures, results):
            if not future.done():  # a caller that gave up (cancelled) is skipped
                future.set_result(result)


@dataclass
class _Lease:
    """An episode's env slot: the worker it runs on and the id the worker holds its env under."""

    worker: _Worker
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class _Holder:
    """A proxy's lease, kept apart from the proxy so that a proxy dropped mid-episode gives it back."""

    lease: _Lease | None = None


class RayEnvPool:
    """Ray actors that hold and step envs for :class:`RayEnv` proxies (see the module docstring).

    Args:
        env_id: a registered env id (its package installed where the workers run).
        num_workers: worker actors (processes); each asks Ray for ``worker_options``.
        env_kwargs: the envs' constructor arguments (picklable; the tokenizer apart).
        tokenizer: a tokenizer name or path, loaded in each worker; ``None``: the default model's.
        envs_per_worker: the most episodes a worker plays at once (and envs it keeps).
        worker_options: Ray actor options (``num_cpus``, ``resources``, ``runtime_env``, ...) over
            :data:`DEFAULT_WORKER_OPTIONS`.
        start_timeout_s: how long a worker may take to start (a cluster without free CPUs never starts it).

    Starts Ray (``ray.init()``: a local cluster, or the one ``RAY_ADDRESS`` names) if it is not running.
    Waits until every worker is up and has made one env, so a wrong env id or argument fails here.

    Raises:
        ImportError: Ray is not installed (the message has the install command).
        EnvWorkerError: the workers did not start within ``start_timeout_s``.
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_workers: int = 2,
        env_kwargs: Mapping[str, Any] | None = None,
        tokenizer: str | os.PathLike[str] | None = None,
        envs_per_worker: int = 8,
        worker_options: Mapping[str, Any] | None = None,
        start_timeout_s: float = 300.0,
    ):
        if num_workers < 1 or envs_per_worker < 1:
            raise ValueError(f"num_workers and envs_per_worker must be >= 1, got {num_workers} and {envs_per_worker}")
        if tokenizer is not None and not isinstance(tokenizer, (str, os.PathLike)):
            raise TypeError(
                f"RayEnvPool takes the tokenizer by name or path (each worker loads it), got a {type(tokenizer).__name__}; "
                "pass tokenizer=tok.name_or_path (or None for the default model's)"
            )
        self.ray = import_ray()
        if not self.ray.is_initialized():
            self.ray.init()
        self.env_id = env_id
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.env_kwargs = dict(env_kwargs or {})
        self.tokenizer = None if tokenizer is None else os.fspath(tokenizer)
        self.worker_options = {**DEFAULT_WORKER_OPTIONS, **dict(worker_options or {})}
        self.start_timeout_s = float(start_timeout_s)
        self.replaced = 0  # workers started in place of dead ones
        self._closed = False
        self._lock = threading.Lock()
        self._slots = _Slots(num_workers, envs_per_worker)
        self._workers = [self._start(i, 0) for i in range(num_workers)]
        try:
            for worker in self._workers:
                self._wait_started(worker)
            self.description: dict[str, Any] = self.ray.get(self._workers[0].actor.describe.remote(), timeout=self.start_timeout_s)
        except BaseException:
            self.close()
            raise
        from gymnasium.envs.registration import EnvSpec

        self.spec = EnvSpec(id=self.description["env_id"], entry_point=f"{__name__}:RayEnv", kwargs=self.description["spec_kwargs"])

    # -- proxies -------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """The most episodes in flight at once: ``num_workers * envs_per_worker``."""
        return self.num_workers * self.envs_per_worker

    def env(self) -> RayEnv:
        """A new proxy (cheap: it holds a worker's env only during an episode). Close it, or use ``with`` / ``async with``."""
        if self._closed:
            raise RuntimeError("this RayEnvPool is closed")
        return RayEnv(self)

    #: ``make_env()``: the factory for :func:`~agent_gym.rollout.async_runner.arun_episodes` and ``run_episodes``.
    make_env = env

    def actor(self, index: int) -> Any:
        """The Ray actor handle of worker ``index`` (operations, tests: ``ray.kill(pool.actor(0))``)."""
        return self._workers[index].actor

    def workers(self) -> list[dict[str, Any]]:
        """Per worker: ``index``, ``generation`` (replacements so far), ``pid``, ``node``, ``episodes`` (in flight)."""
        with self._slots.lock:
            load = list(self._slots.load)
        return [{"index": w.index, "generation": w.generation, "pid": w.pid, "node": w.node, "episodes": load[w.index]}
                for w in self._workers]

    # -- lifecycle -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every worker's envs and end the actors. A worker already dead is skipped; proxies stop working."""
        if self._closed:
            return
        self._closed = True
        workers, self._workers = list(self._workers), []
        refs = [w.actor.close.remote() for w in workers]
        try:
            for worker, ref in zip(workers, refs):
                try:
                    self.ray.get(ref, timeout=60)
                except self.ray.exceptions.RayActorError:
                    pass  # a dead worker's envs died with it: nothing to close
        finally:
            for worker in workers:
                self.ray.kill(worker.actor)

    def __enter__(self) -> RayEnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------

    def _start(self, index: int, generation: int) -> _Worker:
        actor = _remote_worker_class().options(**self.worker_options).remote(
            self.env_id, self.env_kwargs, self.tokenizer, self.envs_per_worker
        )
        return _Worker(index, generation, actor, actor.ready.remote())

    def _not_started(self, worker: _Worker) -> EnvWorkerError:
        return EnvWorkerError(
            f"{worker.name(self.num_workers)} of {self.env_id} did not start within {self.start_timeout_s:g} s: it asks Ray for "
            f"{self.worker_options}; free now: {self.ray.available_resources()}. Lower num_workers or the worker's num_cpus "
            "(worker_options), add nodes, or raise start_timeout_s"
        )

    def _mark_started(self, worker: _Worker, where: Mapping[str, Any]) -> None:
        worker.pid, worker.node, worker.started = int(where["pid"]), str(where["node"]), True

    def _wait_started(self, worker: _Worker) -> None:
        if worker.started:
            return
        try:
            where = self.ray.get(worker.ready_ref, timeout=self.start_timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            raise self._not_started(worker) from None
        self._mark_started(worker, where)

    async def _await_started(self, worker: _Worker) -> None:
        if worker.started:
            return
        try:
            where = await asyncio.wait_for(_awaitable(worker.ready_ref), self.start_timeout_s)
        except asyncio.TimeoutError:
            raise self._not_started(worker) from None
        self._mark_started(worker, where)

    def _current(self, index: int) -> _Worker:
        if self._closed:
            raise RuntimeError("this RayEnvPool is closed")
        return self._workers[index]

    def _died(self, worker: _Worker, method: str, error: BaseException) -> EnvWorkerDied:
        """Replace ``worker`` (once, whoever notices first) and say what was lost."""
        name = worker.name(self.num_workers)
        with self._lock:
            if not self._closed and self._workers[worker.index] is worker:
                self.ray.kill(worker.actor)  # an unreachable but live actor must not step on
                self._workers[worker.index] = self._start(worker.index, worker.generation + 1)
                self.replaced += 1
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return EnvWorkerDied(
            f"{name} died during {method} of {self.env_id}: its episodes in flight are lost; the pool started a replacement "
            f"for the next ones ({type(error).__name__}: {cause})"
        )

    def _drop(self, holder: _Holder, *, discard: bool, tell_worker: bool = True) -> None:
        """Give the lease of ``holder`` back: its slot to the scheduler, its env to the worker (kept, or closed)."""
        lease, holder.lease = holder.lease, None
        if lease is None:
            return
        self._slots.give(lease.worker.index)
        if tell_worker and not self._closed and self._workers[lease.worker.index] is lease.worker and self.ray.is_initialized():
            lease.worker.actor.release.remote(lease.id, discard)  # fire and forget: the worker settles it


class RayEnvPools:
    """The env pool protocol (:class:`~agent_gym.rollout.pool.EnvPoolProtocol`) on Ray: a
    :class:`RayEnvPool` per env id and arguments, made when :meth:`reserve` first names that kind.

    A trainer's batch plays its episodes at once, and an episode that waits for an env slot stalls the
    batch's round of generation; :meth:`reserve` therefore sizes each kind's pool to the episodes of
    that kind the batch holds (``num_workers`` workers, ``envs_per_worker`` each, or as many as needed
    when that is ``None``), and remakes a pool that is too small.

    Args:
        num_workers: worker actors per kind of env.
        tokenizer: a tokenizer name or path every worker loads (``None``: the default model's).
        envs_per_worker: env slots per worker; ``None``: ``ceil(episodes / num_workers)`` of the largest
            reservation so far.
        ray_address: where :meth:`reserve` connects if Ray is not running (``None``: a local cluster, or
            ``RAY_ADDRESS``); the Ray it starts is shut down by :meth:`close`.
        worker_options: Ray actor options of every worker (see :class:`RayEnvPool`).
    """

    def __init__(
        self,
        *,
        num_workers: int = 2,
        tokenizer: str | os.PathLike[str] | None = None,
        envs_per_worker: int | None = None,
        ray_address: str | None = None,
        worker_options: Mapping[str, Any] | None = None,
    ):
        if num_workers < 1 or (envs_per_worker is not None and envs_per_worker < 1):
            raise ValueError(f"num_workers and envs_per_worker must be >= 1, got {num_workers} and {envs_per_worker}")
        self.num_workers, self.envs_per_worker = num_workers, envs_per_worker
        self.tokenizer = None if tokenizer is None else os.fspath(tokenizer)
        self.ray_address, self.worker_options = ray_address, dict(worker_options or {})
        self._pools: dict[tuple[str, str], RayEnvPool] = {}
        self._started_ray = False

    @staticmethod
    def key(env_id: str, kwargs: Mapping[str, Any] | None) -> tuple[str, str]:
        """A kind of env: its id and its arguments as sorted JSON."""
        return env_id, json.dumps(dict(kwargs or {}), sort_keys=True)

    def reserve(self, env_id: str, kwargs: Mapping[str, Any] | None, episodes: int) -> None:
        """Make room for ``episodes`` episodes of this kind at once (start, or remake, its workers).

        Raises:
            ValueError: a fixed ``envs_per_worker`` holds fewer (the message gives the value that fits).
        """
        key = self.key(env_id, kwargs)
        pool = self._pools.get(key)
        if pool is not None and pool.capacity >= episodes:
            return
        if self.envs_per_worker is not None and self.num_workers * self.envs_per_worker < episodes:
            raise ValueError(
                f"a batch has {episodes} episodes of {key[0]} {key[1]}, which play at once, and env_workers="
                f"{self.num_workers} x envs_per_worker={self.envs_per_worker} hold {self.num_workers * self.envs_per_worker}: "
                f"raise envs_per_worker to {-(-episodes // self.num_workers)} (or leave it None: sized to the batch)"
            )
        ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=self.ray_address)
            self._started_ray = True
        if pool is not None:
            del self._pools[key]
            pool.close()
        self._pools[key] = RayEnvPool(
            env_id, num_workers=self.num_workers, env_kwargs=json.loads(key[1]), tokenizer=self.tokenizer,
            envs_per_worker=self.envs_per_worker or -(-episodes // self.num_workers), worker_options=self.worker_options,
        )

    def pools(self) -> dict[tuple[str, str], RayEnvPool]:
        """Every kind's workers so far, by :meth:`key` (a copy)."""
        return dict(self._pools)

    def pool(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> RayEnvPool:
        """The workers of this kind (reserved before)."""
        key = self.key(env_id, kwargs)
        if key not in self._pools:
            raise KeyError(f"no env workers for {key[0]} {key[1]}: reserve(env_id, kwargs, episodes) first")
        return self._pools[key]

    @contextlib.contextmanager
    def lease(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> Iterator[RayEnv]:
        """A :class:`RayEnv` proxy for one episode: its env goes back to its worker when the block ends, and
        is closed there when the block raises (its state is unknown)."""
        env = self.pool(env_id, kwargs).env()
        try:
            yield env
        except BaseException:
            env.close(discard=True)
            raise
        env.close()

    def close(self) -> None:
        """End every kind's workers, and the Ray that :meth:`reserve` started, if it did."""
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
        if self._started_ray:
            self._started_ray = False
            import_ray().shutdown()


def _awaitable(ref: Any) -> Any:
    """A Ray object ref as an awaitable for ``asyncio.wait_for`` (which wants a coroutine or future)."""

    async def get() -> Any:
        return await ref

    return get()


def _obs(obs: Any) -> Any:
    """The env's observation as it is in process: a dict whose ``prompt_ids`` is a writable int64 array
    (Ray hands arrays back read-only, views of its object store)."""
    if isinstance(obs, dict) and "prompt_ids" in obs:
        return {**obs, "prompt_ids": np.array(obs["prompt_ids"], dtype=np.int64)}
    return obs


class RayEnv(gym.Env):
    """A proxy of an env held by a :class:`RayEnvPool` worker; made by :meth:`RayEnvPool.env`.

    ``reset`` / ``step`` (and ``await areset`` / ``await astep``) return what the env returns in its
    worker. Each episode runs on the least-loaded worker with a free slot (a reset may wait for one).
    ``spec`` (id and constructor arguments), ``action_space``, ``observation_space`` and ``tokenizer``
    (a :class:`TokenizerName`) are the env's, so ``play_episode`` records what an env in process
    records. ``worker`` names the worker of the episode in flight (``None`` between episodes).
    """

    metadata = {"render_modes": []}

    def __init__(self, pool: RayEnvPool):
        self.pool = pool
        self.spec = pool.spec
        self.action_space = pool.description["action_space"]
        self.observation_space = pool.description["observation_space"]
        self.tokenizer = TokenizerName(pool.description["tokenizer"])
        self._holder = _Holder()
        self._closed = False
        self._finalizer = weakref.finalize(self, pool._drop, self._holder, discard=False)
        self._finalizer.atexit = False  # at exit Ray may be gone already; the actors go with the driver

    @property
    def worker(self) -> str | None:
        lease = self._holder.lease
        return None if lease is None else lease.worker.name(self.pool.num_workers)

    @property
    def worker_index(self) -> int | None:
        """The index of the episode's worker (``pool.actor(i)``, ``pool.workers()[i]``); ``None`` between episodes."""
        lease = self._holder.lease
        return None if lease is None else lease.worker.index

    # -- gymnasium API ------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        for attempt in (1, 2):
            lease = self._lease_sync()
            try:
                with self._failures(lease, "reset"):
                    self.pool._wait_started(lease.worker)
                    obs, info = self.pool.ray.get(lease.worker.actor.reset.remote(lease.id, seed, options))
            except EnvWorkerDied:
                if attempt == 2:
                    raise
                continue  # the worker died between episodes: start this one on its replacement
            return _obs(obs), info
        raise AssertionError("unreachable")

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        for attempt in (1, 2):
            lease = await self._lease_async()
            try:
                with self._failures(lease, "reset"):
                    await self.pool._await_started(lease.worker)
                    obs, info = await _CallBatch.call(lease.worker, "reset", lease.id, seed, options)
            except EnvWorkerDied:
                if attempt == 2:
                    raise
                continue
            return _obs(obs), info
        raise AssertionError("unreachable")

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, Any]:
        lease = self._episode()
        with self._failures(lease, "step"):
            result = self.pool.ray.get(lease.worker.actor.step.remote(lease.id, action))
        return self._stepped(result)

    async def astep(self, action: Any) -> tuple[Any, Any, Any, Any, Any]:
        lease = self._episode()
        with self._failures(lease, "step"):
            result = await _CallBatch.call(lease.worker, "step", lease.id, action)
        return self._stepped(result)

    def close(self, discard: bool = False) -> None:
        """Give back the env of an unfinished episode: its worker keeps it for another, or closes it with
        ``discard=True`` (an episode that failed leaves it in an unknown state). Idempotent."""
        self._closed = True
        if discard and self._finalizer.detach() is not None:
            self.pool._drop(self._holder, discard=True)
        self._finalizer()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> RayEnv:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this RayEnv is closed; get another from pool.env()")

    def _lease_sync(self) -> _Lease:
        """The episode's lease: the one held (an episode left unfinished restarts on its env), else a new slot."""
        self._check_open()
        if self._holder.lease is None:
            index = self.pool._slots.take()
            self._holder.lease = _Lease(self._worker_or_give_back(index))
        return self._holder.lease

    async def _lease_async(self) -> _Lease:
        self._check_open()
        if self._holder.lease is None:
            index = await self.pool._slots.atake()
            self._holder.lease = _Lease(self._worker_or_give_back(index))
        return self._holder.lease

    def _worker_or_give_back(self, index: int) -> _Worker:
        try:
            return self.pool._current(index)
        except BaseException:
            self.pool._slots.give(index)
            raise

    def _episode(self) -> _Lease:
        self._check_open()
        lease = self._holder.lease
        if lease is None:
            raise gym.error.ResetNeeded(f"{self.pool.env_id}: no episode in flight on this RayEnv (it ended or never began); reset first")
        return lease

    def _stepped(self, result: tuple[Any, Any, Any, Any, Any]) -> tuple[Any, Any, Any, Any, Any]:
        obs, reward, terminated, truncated, info = result
        if terminated or truncated:
            self.pool._drop(self._holder, discard=False, tell_worker=False)  # the worker took its env back itself
        return _obs(obs), reward, terminated, truncated, info

    @contextlib.contextmanager
    def _failures(self, lease: _Lease, method: str) -> Iterator[None]:
        """A dead worker becomes :class:`EnvWorkerDied` (and a replacement); any failure gives the lease up."""
        ray = self.pool.ray
        try:
            yield
        except ray.exceptions.RayActorError as exc:
            self.pool._drop(self._holder, discard=True, tell_worker=False)
            raise self.pool._died(lease.worker, method, exc) from exc
        except BaseException:
            # The env failed (the worker has closed it) or the caller gave up waiting (cancelled): the
            # worker closes the env once a step still running ends.
            self.pool._drop(self._holder, discard=True)
            raise
