"""Keep hundreds of episodes in flight in one process: one coroutine per episode, batched generation.

:func:`arun_episodes` runs ``concurrency`` workers on one event loop; each owns an env and plays
episodes one after another (episode ``i`` is reset with ``seed=base_seed + i``, like
:func:`agent_gym.rollout.run_episodes`). An episode alternates two waits:

- **generation**: its prompt goes to a small batcher, which collects the prompts of every episode
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

    result = run_episodes_async(lambda: gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok),
                                policy, episodes=512, concurrency=512, max_new_tokens=256)
    print(result.summary(), result.stats)
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeGuard

from agent_gym.rollout.episode import env_id_of, play_episode
from agent_gym.rollout.gc_timer import GCTimer
from agent_gym.rollout.policy import Generation
from agent_gym.rollout.progress import RolloutResult, TurnEstimate, plan_episodes, progress_bar
from agent_gym.trajectory import StepRecord, Trajectory, TrajectoryWriter

__all__ = ["AsyncRolloutResult", "arun_episodes", "find_astep", "run_episodes_async", "run_sync"]

# epoll (the default selector on Linux) waits whole milliseconds: a timed wait of 0.1 ms takes about 1 ms
_SHORTEST_WAIT_S = 0.001


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


class _Batcher:
    """Collects prompts of waiting episodes and sends them to ``policy.generate`` in batches."""

    def __init__(
        self,
        policy: Any,
        max_new_tokens: int,
        max_batch_size: int,
        max_wait_s: float,
        in_thread: bool,
        lockstep: bool = False,
        on_batch: Callable[[], None] | None = None,
    ):
        self.policy = policy
        # lockstep: a batch waits for every episode in flight and lists its prompts in slot order, so the
        # batches are rounds (one turn of each active episode) whatever the order episodes resume in.
        self.lockstep = lockstep
        self.on_batch = on_batch
        self.max_new_tokens = max_new_tokens
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.in_thread = in_thread
        self.pending: list[tuple[int, list[int], asyncio.Future[Generation]]] = []  # (slot, prompt, future)
        self.active = 0  # episodes in flight (waiting or stepping)
        self.wake = asyncio.Event()
        self.batch_sizes: list[int] = []
        self.generate_s = 0.0
        self.last_generate_s: float | None = None  # the previous generate call's duration

    async def generate(self, prompt: list[int], slot: int = 0) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self.pending.append((slot, prompt, future))
        self.wake.set()
        return await future

    def notify(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not self.pending:
                continue
            # More prompts can still come while some episode is stepping: wait a little for them, but
            # never longer than a generate call takes. A prompt that misses this batch goes into the
            # next one, which starts when this one ends, so for a cheap policy (a scripted one, a
            # cache) waiting the full max_wait_s would only delay every episode on each turn.
            if self.lockstep:
                if len(self.pending) < min(self.max_batch_size, self.active):
                    continue  # woken again by the next prompt or by an episode that ends
                self.pending.sort(key=lambda item: item[0])
            else:
                wait = self.max_wait_s if self.last_generate_s is None else min(self.max_wait_s, self.last_generate_s)
                if wait < _SHORTEST_WAIT_S:
                    wait = 0.0  # a shorter timed wait would overshoot: the loop's timers wait whole milliseconds
                deadline = loop.time() + wait
                while len(self.pending) < min(self.max_batch_size, self.active):
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(self.wake.wait(), remaining)
                    except asyncio.TimeoutError:
                        break
                    self.wake.clear()
            if self.on_batch is not None:
                self.on_batch()
            batch = self.pending[: self.max_batch_size]
            del self.pending[: self.max_batch_size]
            prompts = [p for _, p, _ in batch]
            started = time.perf_counter()
            try:
                if self.in_thread:
                    generations = await asyncio.to_thread(self.policy.generate, prompts, max_new_tokens=self.max_new_tokens)
                else:
                    generations = self.policy.generate(prompts, max_new_tokens=self.max_new_tokens)
                if len(generations) != len(prompts):
                    raise RuntimeError(f"policy returned {len(generations)} generations for {len(prompts)} prompts")
            except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                for _, _, future in batch:
                    future.cancel()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting episodes
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self.last_generate_s = time.perf_counter() - started
                self.generate_s += self.last_generate_s
            self.batch_sizes.append(len(batch))
            for (_, _, future), generation in zip(batch, generations):
                if not future.done():
                    future.set_result(generation)
            if self.pending:
                self.wake.set()


async def arun_episodes(
    envs: Any,
    policy: Any,
    *,
    episodes: int | None = None,
    base_seed: int = 0,
    seeds: Sequence[int] | None = None,
    task_ids: Sequence[str] | None = None,
    max_new_tokens: int = 512,
    concurrency: int = 256,
    max_batch_size: int = 256,
    max_wait_s: float = 0.002,
    generate_in_thread: bool = True,
    use_agenerate: bool | None = None,
    lockstep: bool = False,
    writer: TrajectoryWriter | None = None,
    env_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> AsyncRolloutResult:
    """Play ``episodes`` episodes with up to ``concurrency`` in flight on the running event loop.

    Each episode is one :func:`~agent_gym.rollout.episode.play_episode` call whose generate function
    hands the prompt to the batcher (or awaits ``policy.agenerate``).

    Args:
        envs: an env factory (zero-argument callable), called once per worker; or a sequence of envs
            or factories, one per worker (at most ``concurrency`` used).
        policy: a :class:`~agent_gym.rollout.Policy` (``generate``), optionally with ``agenerate``.
        episodes: how many episodes to play; default ``len(task_ids)``.
        base_seed / seeds / task_ids: as in :func:`agent_gym.rollout.run_episodes`.
        max_new_tokens: the generation limit of each turn.
        concurrency: episodes in flight at once (one env each).
        max_batch_size: most prompts per ``generate`` call.
        max_wait_s: how long a batch may wait for more prompts while some episodes are still stepping;
            it waits no longer than the previous ``generate`` call took.
        generate_in_thread: call ``generate`` in a worker thread (keep ``True`` for real models; a
            scripted policy is cheaper inline).
        use_agenerate: await ``policy.agenerate`` per episode instead of batching; default: when the
            policy has it.
        lockstep: batch in rounds: a batch waits until every worker (one per slot) has its prompt in,
            a worker between two episodes included, and lists the prompts in slot order (what
            :func:`agent_gym.rollout.run_episodes` does: the same batches on every run).
        writer: each trajectory is written here (off the loop) as soon as its episode ends.
        env_id: recorded in trajectories; default: the env's ``spec.id`` (else its class name).
        metadata: extra entries for every trajectory's ``metadata``.
        progress: show a tqdm bar on stderr; before every batch it also shows the turns generated,
            generated tokens per second and the accuracy of the episodes finished so far. Its time
            left comes from the turns played (:class:`~agent_gym.rollout.progress.TurnEstimate`).

    Returns:
        :class:`AsyncRolloutResult`: trajectories in episode order (``metadata`` has ``episode``,
        ``worker`` and what :func:`~agent_gym.rollout.episode.play_episode` records) and ``stats``.
    """
    episodes, task_ids = plan_episodes(episodes, task_ids, seeds)
    if concurrency < 1 or max_batch_size < 1:
        raise ValueError("concurrency and max_batch_size must be >= 1")

    if isinstance(envs, Sequence) and not isinstance(envs, (str, bytes)):
        if episodes and not envs:
            raise ValueError("envs is empty")
        slots: list[Any] = list(envs)[: min(concurrency, episodes)]
    else:
        slots = [envs] * min(concurrency, episodes)
    if use_agenerate is None:
        use_agenerate = callable(getattr(policy, "agenerate", None))
    run_id = uuid.uuid4().hex[:8]
    extra = dict(metadata or {})
    finished: list[Trajectory] = []
    step_latencies: list[float] = []
    counters = {"next": 0, "in_flight": 0, "max_in_flight": 0, "steps": 0, "tokens": 0, "turns": 0}
    seconds = {"reset": 0.0}  # apart from the counts, which stay ints
    write_lock = asyncio.Lock()
    estimate = TurnEstimate(episodes)
    bar = progress_bar(episodes, progress, estimate)
    started = time.perf_counter()

    def show_progress() -> None:
        elapsed = time.perf_counter() - started
        correct = sum(t.final_info.get("correct") is True for t in finished)
        bar.set_postfix(
            turns=counters["turns"],
            tok_s=f"{counters['tokens'] / elapsed:.1f}" if elapsed > 0 else "-",
            acc=f"{correct / len(finished):.3f}" if finished else "-",
            refresh=True,
        )

    def before_batch() -> None:
        if counters["turns"]:
            show_progress()  # the rounds so far: every episode's earlier turns have been stepped
        counters["turns"] += min(len(batcher.pending), max_batch_size)

    batcher = _Batcher(
        policy, max_new_tokens, max_batch_size, max_wait_s, generate_in_thread, lockstep=lockstep, on_batch=before_batch
    )

    def on_step(record: StepRecord, seconds: float) -> None:
        step_latencies.append(seconds)
        counters["steps"] += 1
        counters["tokens"] += len(record.response_ids)

    async def play(env: Any, i: int, worker: int) -> Trajectory:
        nonlocal env_id
        if env_id is None:
            env_id = env_id_of(env)

        async def generate(prompt: list[int]) -> Generation:
            if use_agenerate:
                generation = await policy.agenerate(prompt, max_new_tokens=max_new_tokens)
            else:
                generation = await batcher.generate(prompt, worker)
            # Counted when generated, not when stepped: the episodes of a batch get their turns at
            # once, and the first one's step (which may end it) must not see the others' as undone.
            estimate.turn_done(i)
            return generation

        trajectory = await play_episode(
            env,
            generate,
            seed=int(seeds[i]) if seeds is not None else base_seed + i,
            task_id=task_ids[i] if task_ids is not None else None,
            trajectory_id=f"{run_id}-{i:06d}",
            env_id=env_id,
            metadata={"episode": i, "worker": worker, **extra},
            on_step=on_step,
        )
        seconds["reset"] += trajectory.metadata["reset_s"]
        return trajectory

    async def worker(slot: int) -> None:
        env = None
        if lockstep:
            batcher.active += 1  # counted from start to exit: a batch waits for this slot's next prompt
        try:
            while counters["next"] < episodes:
                i = counters["next"]
                counters["next"] += 1
                if env is None:
                    item = slots[slot]
                    env = item() if _is_factory(item) else item
                counters["in_flight"] += 1
                counters["max_in_flight"] = max(counters["max_in_flight"], counters["in_flight"])
                if not lockstep:
                    batcher.active += 1
                estimate.episode_started(i)
                try:
                    trajectory = await play(env, i, slot)
                finally:
                    counters["in_flight"] -= 1
                    if not lockstep:
                        batcher.active -= 1
                        batcher.notify()  # one fewer episode can add prompts: the batch may be complete now
                finished.append(trajectory)
                estimate.episode_done(i)
                bar.update(1)
                if writer is not None:
                    async with write_lock:
                        await asyncio.to_thread(writer.write, trajectory)
        finally:
            if lockstep:
                batcher.active -= 1
                batcher.notify()

    with GCTimer() as gc_timer:  # collections stall every episode at once: worth seeing in the stats
        batch_task = asyncio.ensure_future(batcher.run())
        workers = [asyncio.ensure_future(worker(s)) for s in range(len(slots))]
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
            if progress and finished:
                show_progress()
            bar.close()
        wall = time.perf_counter() - started
    result = AsyncRolloutResult(
        trajectories=sorted(finished, key=lambda t: t.metadata["episode"]),
        generated_tokens=counters["tokens"],
        wall_seconds=wall,
    )
    lat = sorted(step_latencies)
    sizes = batcher.batch_sizes
    result.stats = {
        "wall_s": wall,
        "episodes": len(finished),
        "steps": counters["steps"],
        "episodes_per_s": len(finished) / wall if wall > 0 else 0.0,
        "steps_per_s": counters["steps"] / wall if wall > 0 else 0.0,
        "max_in_flight": counters["max_in_flight"],
        "generate_calls": len(sizes),
        "mean_batch_size": statistics.fmean(sizes) if sizes else 0.0,
        "max_batch_size": max(sizes) if sizes else 0,
        "generate_s": batcher.generate_s,
        "env_step_s": sum(lat),
        "step_latency_p50_s": lat[len(lat) // 2] if lat else 0.0,
        "step_latency_p95_s": lat[min(len(lat) - 1, int(len(lat) * 0.95))] if lat else 0.0,
        "step_latency_max_s": lat[-1] if lat else 0.0,
        "reset_s": seconds["reset"],
        **gc_timer.as_stats(),
    }
    return result


def run_sync(make_coroutine: Callable[[], Any]) -> Any:
    """Run ``make_coroutine()`` to completion from synchronous code and return its result.

    On a fresh event loop in this thread; when called from a running event loop (a notebook, an async
    trainer), on a fresh loop in a helper thread. The loop installs no SIGINT handler, so Ctrl-C raises
    ``KeyboardInterrupt`` at once, as in any synchronous code, instead of cancelling a task and waiting
    for a model call to return.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
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


def run_episodes_async(*args: Any, **kwargs: Any) -> AsyncRolloutResult:
    """Synchronous :func:`arun_episodes` (same arguments), through :func:`run_sync`."""
    return run_sync(lambda: arun_episodes(*args, **kwargs))


def _is_factory(obj: Any) -> TypeGuard[Callable[[], Any]]:
    # An env has reset/step; anything else callable is a factory (a function, a class, a partial).
    return callable(obj) and not (hasattr(obj, "reset") and hasattr(obj, "step") and not isinstance(obj, type))
