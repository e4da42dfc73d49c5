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
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from agent_gym.rollout.driver import RolloutResult, _progress_bar, env_id_of, plan_episodes
from agent_gym.rollout.gc_timer import GCTimer
from agent_gym.rollout.policy import Generation
from agent_gym.trajectory import StepRecord, Trajectory, TrajectoryWriter

__all__ = ["AsyncRolloutResult", "arun_episodes", "find_astep", "run_episodes_async"]

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
    """The ``astep`` of the outermost layer (wrapper or env) whose class defines one; ``None`` if none does."""
    layer = env
    while layer is not None:
        if getattr(type(layer), "astep", None) is not None:
            return layer.astep
        layer = getattr(layer, "env", None)
    return None


class _Batcher:
    """Collects prompts of waiting episodes and sends them to ``policy.generate`` in batches."""

    def __init__(self, policy: Any, max_new_tokens: int, max_batch_size: int, max_wait_s: float, in_thread: bool):
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.in_thread = in_thread
        self.pending: list[tuple[list[int], asyncio.Future[Generation]]] = []
        self.active = 0  # episodes in flight (waiting or stepping)
        self.wake = asyncio.Event()
        self.batch_sizes: list[int] = []
        self.generate_s = 0.0
        self.last_generate_s: float | None = None  # the previous generate call's duration

    async def generate(self, prompt: list[int]) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self.pending.append((prompt, future))
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
            batch = self.pending[: self.max_batch_size]
            del self.pending[: self.max_batch_size]
            prompts = [p for p, _ in batch]
            started = time.perf_counter()
            try:
                if self.in_thread:
                    generations = await asyncio.to_thread(self.policy.generate, prompts, max_new_tokens=self.max_new_tokens)
                else:
                    generations = self.policy.generate(prompts, max_new_tokens=self.max_new_tokens)
                if len(generations) != len(prompts):
                    raise RuntimeError(f"policy returned {len(generations)} generations for {len(prompts)} prompts")
            except asyncio.CancelledError:
                for _, future in batch:
                    future.cancel()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting episodes
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self.last_generate_s = time.perf_counter() - started
                self.generate_s += self.last_generate_s
            self.batch_sizes.append(len(batch))
            for (_, future), generation in zip(batch, generations):
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
    writer: TrajectoryWriter | None = None,
    env_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> AsyncRolloutResult:
    """Play ``episodes`` episodes with up to ``concurrency`` in flight on the running event loop.

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
        writer: each trajectory is written here (off the loop) as soon as its episode ends.
        env_id: recorded in trajectories; default: the env's ``spec.id`` (else its class name).
        metadata: extra entries for every trajectory's ``metadata``.
        progress: show a tqdm bar on stderr.

    Returns:
        :class:`AsyncRolloutResult`: trajectories in episode order (``metadata["episode"]``,
        ``finish_reasons``, ``worker``) and ``stats``.
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
    batcher = _Batcher(policy, max_new_tokens, max_batch_size, max_wait_s, generate_in_thread)
    run_id = uuid.uuid4().hex[:8]
    extra = dict(metadata or {})
    finished: list[Trajectory] = []
    step_latencies: list[float] = []
    counters = {"next": 0, "in_flight": 0, "max_in_flight": 0, "steps": 0, "tokens": 0, "reset_s": 0.0}
    write_lock = asyncio.Lock()
    bar = _progress_bar(episodes, progress)

    async def generate(prompt: list[int]) -> Generation:
        if use_agenerate:
            return await policy.agenerate(prompt, max_new_tokens=max_new_tokens)
        return await batcher.generate(prompt)

    async def play(env: Any, astep: Callable[..., Any] | None, i: int, worker: int) -> Trajectory:
        nonlocal env_id
        seed = int(seeds[i]) if seeds is not None else base_seed + i
        options = {"task_id": task_ids[i]} if task_ids is not None else None
        started = time.perf_counter()
        obs, info = env.reset(seed=seed, options=options)
        counters["reset_s"] += time.perf_counter() - started
        if env_id is None:
            env_id = env_id_of(env)
        trajectory_id = f"{run_id}-{i:06d}"
        steps: list[StepRecord] = []
        finish_reasons: list[str] = []
        while True:
            prompt = np.asarray(obs["prompt_ids"]).tolist()
            gen = await generate(prompt)
            action = np.asarray(gen.ids, dtype=np.int64)
            t0 = time.perf_counter()
            if astep is not None:
                obs, reward, terminated, truncated, info = await astep(action)
            else:
                obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
            step_latencies.append(time.perf_counter() - t0)
            counters["steps"] += 1
            counters["tokens"] += len(gen.ids)
            steps.append(
                StepRecord(
                    trajectory_id=trajectory_id,
                    step=len(steps),
                    prompt_ids=prompt,
                    response_ids=list(gen.ids),
                    response_logprobs=None if gen.logprobs is None else [float(x) for x in gen.logprobs],
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    new_segment=bool(info.get("new_segment", False)),
                    info=dict(info),
                )
            )
            finish_reasons.append(gen.finish_reason)
            if terminated or truncated:
                break
        return Trajectory(
            id=trajectory_id,
            env_id=env_id or "",
            task_id=steps[0].info.get("task_id") if steps else None,
            seed=seed,
            steps=steps,
            messages=obs["messages"],
            reward=steps[-1].reward,
            metadata={"episode": i, "finish_reasons": finish_reasons, "worker": worker, **extra},
        )

    async def worker(slot: int) -> None:
        env = None
        while counters["next"] < episodes:
            i = counters["next"]
            counters["next"] += 1
            if env is None:
                item = slots[slot]
                env = item() if _is_factory(item) else item
                astep = find_astep(env)
            counters["in_flight"] += 1
            counters["max_in_flight"] = max(counters["max_in_flight"], counters["in_flight"])
            batcher.active += 1
            try:
                trajectory = await play(env, astep, i, slot)
            finally:
                counters["in_flight"] -= 1
                batcher.active -= 1
                batcher.notify()  # one fewer episode can add prompts: the batch may be complete now
            finished.append(trajectory)
            bar.update(1)
            if writer is not None:
                async with write_lock:
                    await asyncio.to_thread(writer.write, trajectory)

    with GCTimer() as gc_timer:  # collections stall every episode at once: worth seeing in the stats
        started = time.perf_counter()
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
        "reset_s": counters["reset_s"],
        **gc_timer.as_stats(),
    }
    return result


def run_episodes_async(*args: Any, **kwargs: Any) -> AsyncRolloutResult:
    """Synchronous :func:`arun_episodes` (same arguments): ``asyncio.run`` it, or, when called from a
    running event loop, run it on a fresh loop in a helper thread and wait."""
    box: dict[str, Any] = {}

    async def main() -> None:
        # The result is handed over in ``box``, not returned: on the main thread ``asyncio.run``
        # formats its task's repr (result included) when it restores the SIGINT handler, which costs
        # about a second per thousand trajectories.
        box["result"] = await arun_episodes(*args, **kwargs)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return box["result"]

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="arun-episodes")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _is_factory(obj: Any) -> bool:
    return callable(obj) and not (hasattr(obj, "reset") and hasattr(obj, "step") and not isinstance(obj, type))


