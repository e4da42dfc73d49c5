"""Keep hundreds of episodes in flight in one process: one coroutine per episode, batched generation.

:func:`arun_episodes` (:func:`run_episodes_concurrent` from synchronous code) runs ``concurrency``
workers on one event loop, with the settings of one :class:`~agent_gym.rollout.config.RolloutConfig`.
Each worker owns an env and plays episodes one after another (episode ``i`` is reset with ``seed=base_seed + i``, like
:func:`agent_gym.rollout.run_episodes`). An episode alternates two waits:

- **generation**: its prompt goes to the :class:`~agent_gym.rollout.batcher.Batcher`, which collects the prompts of every episode
  waiting for tokens and calls ``policy.generate(prompts, max_new_tokens=...)`` once per batch (in a
  worker thread, so the loop keeps stepping envs while the model runs). A batch is sent when every
  episode in flight is waiting, when it holds ``max_batch_size`` prompts, or once it has waited
  ``max_wait_s`` for more, or as long as the previous ``generate`` call took if that was shorter
  (a prompt that misses a batch of a cheap policy waits less for the next one). A policy with
  ``async def agenerate(prompt, *, max_new_tokens)`` (a server engine that batches by itself) is
  awaited per episode instead (``use_agenerate``);
- **the env step**: ``await env.astep(ids)`` (the outermost wrapper defining ``astep`` keeps its
  effect; an env without one is stepped in a thread), so tools that wait (the sandbox, HTTP) never
  stall the other episodes.

Example::

    config = RolloutConfig(episodes=512, concurrency=512, max_new_tokens=256)
    result = run_episodes_concurrent(lambda: gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok), policy, config)
    print(result.summary(), result.stats)
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeGuard

from agent_gym.rollout.batcher import Batcher
from agent_gym.rollout.config import RolloutConfig
from agent_gym.rollout.episode import env_id_of, play_episode
from agent_gym.rollout.gc_timer import GCTimer
from agent_gym.rollout.policy import Generation
from agent_gym.rollout.progress import RolloutResult, TurnEstimate, plan_episodes, progress_bar
from agent_gym.trajectory import StepRecord, Trajectory, TrajectoryWriter

__all__ = ["AsyncRolloutResult", "RolloutConfig", "arun_episodes", "find_astep", "run_episodes_concurrent", "run_sync"]

@dataclass
class AsyncRolloutResult(RolloutResult):
    """:class:`~agent_gym.rollout.RolloutResult` plus timing statistics of the async run.

    ``stats`` keys: ``wall_s``; ``episodes``; ``steps``; ``episodes_per_s``; ``steps_per_s``;
    ``max_in_flight`` (episodes alive at once); ``generate_calls``, ``mean_batch_size``,
    ``max_batch_size``, ``generate_s`` (time inside the policy); ``env_step_s`` (summed ``astep`` time:
    more than the wall time when steps overlap), ``step_latency_p50_s`` / ``_p95_s`` / ``_max_s``;
    ``reset_s`` (summed reset time); ``gc_s``, ``gc_longest_s``, ``gc_collections`` (per generation),
    ``gc_full_collections``: Python's garbage collector during the run, process-wide
    (:class:`agent_gym.rollout.gc_timer.GCTimer`).
    """

    stats: dict[str, Any] = field(default_factory=dict)


def find_astep(env: Any) -> Callable[..., Any] | None:
    """``env.astep`` (every gymnasium wrapper has one once ``agent_gym`` is imported), or ``None``."""
    return getattr(env, "astep", None)


async def arun_episodes(
    envs: Any,
    policy: Any,
    config: RolloutConfig | None = None,
    *,
    writer: TrajectoryWriter | None = None,
    **options: Any,
) -> AsyncRolloutResult:
    """Play ``config.episodes`` episodes with up to ``config.concurrency`` in flight on the running event loop.

    Each episode is one :func:`~agent_gym.rollout.episode.play_episode` call whose generate function
    hands the prompt to the :class:`~agent_gym.rollout.batcher.Batcher` (or awaits ``policy.agenerate``).

    Args:
        envs: an env factory (zero-argument callable), called once per worker; or a sequence of envs
            or factories, one per worker (at most ``concurrency`` used).
        policy: a :class:`~agent_gym.rollout.Policy` (``generate``), optionally with ``agenerate``.
        config: the run's settings (:class:`~agent_gym.rollout.config.RolloutConfig`); default: its defaults.
        writer: each trajectory is written here (off the loop) as soon as its episode ends.
        **options: :class:`~agent_gym.rollout.config.RolloutConfig` fields, applied over ``config``
            (``episodes=512, concurrency=128``): an unknown name is a ``TypeError`` that lists the fields.

    Returns:
        :class:`AsyncRolloutResult`: trajectories in episode order (``metadata`` has ``episode``,
        ``worker`` and what :func:`~agent_gym.rollout.episode.play_episode` records) and ``stats``.
    """
    config = RolloutConfig.of(config, options)
    episodes, task_ids = plan_episodes(config.episodes, config.task_ids, config.seeds)
    if isinstance(envs, Sequence) and not isinstance(envs, (str, bytes)):
        if episodes and not envs:
            raise ValueError("envs is empty")
        slots: list[Any] = list(envs)[: min(config.concurrency, episodes)]
    else:
        slots = [envs] * min(config.concurrency, episodes)
    use_agenerate = config.use_agenerate
    if use_agenerate is None:
        use_agenerate = callable(getattr(policy, "agenerate", None))
    run = _Run(
        slots,
        policy,
        config,
        episodes=episodes,
        seeds=config.seeds if config.seeds is not None else [config.base_seed + i for i in range(episodes)],
        task_ids=task_ids,
        use_agenerate=use_agenerate,
        writer=writer,
    )
    run.batcher = Batcher(
        lambda prompts: policy.generate(prompts, max_new_tokens=config.max_new_tokens),
        max_batch_size=config.max_batch_size,
        max_wait_s=config.max_wait_s,
        in_thread=config.generate_in_thread,
        lockstep=config.lockstep,
        live=len(slots) if config.lockstep else 0,  # rounds wait for every slot, a slot between episodes too
        on_batch=run.before_batch,
    )
    return await run.play_all()


class _Run:
    """One :func:`arun_episodes` call: its workers, counters, progress bar and statistics."""

    def __init__(
        self,
        slots: list[Any],
        policy: Any,
        config: RolloutConfig,
        *,
        episodes: int,
        seeds: Sequence[int],
        task_ids: Sequence[str] | None,
        use_agenerate: bool,
        writer: TrajectoryWriter | None,
    ):
        self.slots, self.policy, self.episodes = slots, policy, episodes
        self.seeds, self.task_ids, self.max_new_tokens = seeds, task_ids, config.max_new_tokens
        self.use_agenerate, self.writer, self.env_id = use_agenerate, writer, config.env_id
        self.metadata, self.progress = dict(config.metadata), config.progress
        self.batcher: Batcher  # set by arun_episodes: its on_batch is this run's before_batch
        self.run_id = uuid.uuid4().hex[:8]
        self.finished: list[Trajectory] = []
        self.step_latencies: list[float] = []
        self.next_episode = 0
        self.in_flight = self.max_in_flight = self.steps = self.tokens = self.turns = 0
        self.reset_s = 0.0
        self.write_lock = asyncio.Lock()
        self.estimate = TurnEstimate(episodes)
        self.bar = progress_bar(episodes, self.progress, self.estimate)
        self.started = time.perf_counter()

    # -- progress ------------------------------------------------------------------------------------

    def show_progress(self) -> None:
        elapsed = time.perf_counter() - self.started
        correct = sum(t.final_info.get("correct") is True for t in self.finished)
        self.bar.set_postfix(
            turns=self.turns,
            tok_s=f"{self.tokens / elapsed:.1f}" if elapsed > 0 else "-",
            acc=f"{correct / len(self.finished):.3f}" if self.finished else "-",
            refresh=True,
        )

    def before_batch(self) -> None:
        if self.turns:
            self.show_progress()  # the rounds so far: every episode's earlier turns have been stepped
        cap = self.batcher.max_batch_size or len(self.batcher.pending)
        self.turns += min(len(self.batcher.pending), cap)

    def on_step(self, record: StepRecord, seconds: float) -> None:
        self.step_latencies.append(seconds)
        self.steps += 1
        self.tokens += len(record.response_ids)

    # -- episodes ------------------------------------------------------------------------------------

    async def play(self, env: Any, i: int, worker: int) -> Trajectory:
        if self.env_id is None:
            self.env_id = env_id_of(env)

        async def generate(prompt: list[int]) -> Generation:
            if self.use_agenerate:
                generation: Generation = await self.policy.agenerate(prompt, max_new_tokens=self.max_new_tokens)
            else:
                generation = await self.batcher.generate(prompt, worker)
            # Counted when generated, not when stepped: the episodes of a batch get their turns at
            # once, and the first one's step (which may end it) must not see the others' as undone.
            self.estimate.turn_done(i)
            return generation

        trajectory = await play_episode(
            env,
            generate,
            seed=int(self.seeds[i]),
            task_id=self.task_ids[i] if self.task_ids is not None else None,
            trajectory_id=f"{self.run_id}-{i:06d}",
            env_id=self.env_id,
            metadata={"episode": i, "worker": worker, **self.metadata},
            on_step=self.on_step,
        )
        self.reset_s += trajectory.metadata["reset_s"]
        return trajectory

    async def worker(self, slot: int) -> None:
        """Play episodes one after another on this slot's env until none is left."""
        env = None
        lockstep = self.batcher.lockstep
        try:
            while self.next_episode < self.episodes:
                i = self.next_episode
                self.next_episode += 1
                if env is None:
                    item = self.slots[slot]
                    env = item() if _is_factory(item) else item
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                if not lockstep:
                    self.batcher.started()
                self.estimate.episode_started(i)
                try:
                    trajectory = await self.play(env, i, slot)
                finally:
                    self.in_flight -= 1
                    if not lockstep:
                        self.batcher.finished()  # one fewer episode can add prompts: the batch may be complete now
                self.finished.append(trajectory)
                self.estimate.episode_done(i)
                self.bar.update(1)
                if self.writer is not None:
                    async with self.write_lock:
                        await asyncio.to_thread(self.writer.write, trajectory)
        finally:
            if lockstep:
                self.batcher.finished()  # this slot asks no more

    async def play_all(self) -> AsyncRolloutResult:
        with GCTimer() as gc_timer:  # collections stall every episode at once: worth seeing in the stats
            batch_task = asyncio.ensure_future(self.batcher.run())
            workers = [asyncio.ensure_future(self.worker(s)) for s in range(len(self.slots))]
            try:
                if workers:
                    done, pending = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
                    failed = [t for t in done if not t.cancelled() and t.exception() is not None]
                    if failed:
                        for t in pending:
                            t.cancel()
                        await asyncio.gather(*pending, return_exceptions=True)
                        raise failed[0].exception()  # type: ignore[misc]
            finally:
                batch_task.cancel()
                await asyncio.gather(batch_task, return_exceptions=True)
                if self.progress and self.finished:
                    self.show_progress()
                self.bar.close()
            wall = time.perf_counter() - self.started
        result = AsyncRolloutResult(
            trajectories=sorted(self.finished, key=lambda t: t.metadata["episode"]),
            generated_tokens=self.tokens,
            wall_seconds=wall,
        )
        result.stats = {**self.stats(wall), **gc_timer.as_stats()}
        return result

    def stats(self, wall: float) -> dict[str, Any]:
        """:attr:`AsyncRolloutResult.stats` but the garbage collector's."""
        lat = sorted(self.step_latencies)
        sizes = self.batcher.batch_sizes
        done = len(self.finished)
        return {
            "wall_s": wall,
            "episodes": done,
            "steps": self.steps,
            "episodes_per_s": done / wall if wall > 0 else 0.0,
            "steps_per_s": self.steps / wall if wall > 0 else 0.0,
            "max_in_flight": self.max_in_flight,
            "generate_calls": len(sizes),
            "mean_batch_size": statistics.fmean(sizes) if sizes else 0.0,
            "max_batch_size": max(sizes) if sizes else 0,
            "generate_s": self.batcher.generate_s,
            "env_step_s": sum(lat),
            "step_latency_p50_s": lat[len(lat) // 2] if lat else 0.0,
            "step_latency_p95_s": lat[min(len(lat) - 1, int(len(lat) * 0.95))] if lat else 0.0,
            "step_latency_max_s": lat[-1] if lat else 0.0,
            "reset_s": self.reset_s,
        }


def run_sync(make_coroutine: Callable[[], Any]) -> Any:
    """Run ``make_coroutine()`` to completion from synchronous code and return its result.

    On a fresh event loop in this thread; when called from a running event loop (a notebook, an async
    trainer), on a fresh loop in a helper thread. The loop installs no SIGINT handler, so Ctrl-C raises
    ``KeyboardInterrupt`` at once, as in any synchronous code, instead of cancelling a task and waiting
    for a model call to return.
    """
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:
        # Outside the except block: an error of the episodes must not come chained to asyncio's
        # "no running event loop", which reads as the cause while it is only how this call asked.
        return _run_on_new_loop(make_coroutine)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = _run_on_new_loop(make_coroutine)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="agent-gym-rollout")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _run_on_new_loop(make_coroutine: Callable[[], Any]) -> Any:
    loop = asyncio.new_event_loop()
    try:
        main = loop.create_task(make_coroutine())
        try:
            return loop.run_until_complete(main)
        except BaseException:
            main.cancel()
            raise
    finally:
        try:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def run_episodes_concurrent(
    envs: Any,
    policy: Any,
    config: RolloutConfig | None = None,
    *,
    writer: TrajectoryWriter | None = None,
    **options: Any,
) -> AsyncRolloutResult:
    """:func:`arun_episodes` from synchronous code (same arguments): a blocking call that keeps
    ``concurrency`` episodes in flight on an event loop of its own (:func:`run_sync`)."""
    return run_sync(lambda: arun_episodes(envs, policy, config, writer=writer, **options))


def _is_factory(obj: Any) -> TypeGuard[Callable[[], Any]]:
    # An env has reset/step; anything else callable is a factory (a function, a class, a partial).
    return callable(obj) and not (hasattr(obj, "reset") and hasattr(obj, "step") and not isinstance(obj, type))
