"""The one batcher: episodes in flight ask for tokens one prompt at a time; the model gets them in batches.

Every episode of :func:`~agent_gym.rollout.episode.play_episode` asks ``await batcher.generate(prompt)``;
:meth:`Batcher.run`, a task beside the episodes, sends the waiting prompts to ``generate_batch(prompts)``
(a policy's ``generate``, a trainer's engine) and hands each episode its :class:`Generation`. Two ways to
decide when a batch goes:

- **as they come** (``lockstep=False``, :func:`agent_gym.rollout.async_runner.arun_episodes`): a batch goes
  when every episode in flight is waiting, when it holds ``max_batch_size`` prompts, or once it has
  waited ``max_wait_s`` (no longer than the previous batch took: a cheap policy should not wait on
  stragglers);
- **in rounds** (``lockstep=True``: :func:`agent_gym.rollout.run_episodes`, the TRL rollout): a batch
  waits until every live episode has its prompt in (one turn of each), in slot order, so the batches are
  the same on every run. With ``round_size`` (a collective backend: several processes that must generate
  in the same rounds with as many prompts) each round is padded with one-token dummy prompts to the size
  ``round_size(local)`` gives, and the batcher keeps joining rounds of dummies after its own episodes end,
  until ``round_size`` says every process is done (0).

A failing ``generate_batch`` fails the episodes of its batch with its exception. With ``fail_fast`` (the
TRL rollout: a trainer step cannot go on without its samples) it also fails every later request at once
and ends :meth:`Batcher.run` with the exception, so nothing waits for a round that cannot come.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Sequence

from agent_gym.rollout.policy import Generation

__all__ = ["Batcher", "GenerateBatchFn"]

#: ``(prompts) -> one Generation per prompt``: a batch of prompt ids in, their continuations out, in order.
GenerateBatchFn = Callable[[list[list[int]]], Sequence[Generation]]

# epoll (the default selector on Linux) waits whole milliseconds: a timed wait of 0.1 ms takes about 1 ms
_SHORTEST_WAIT_S = 0.001


class Batcher:
    """Collects the prompts of waiting episodes and generates them in batches (see the module docstring).

    Args:
        generate_batch: ``(prompts) -> generations``, one per prompt, in order.
        max_batch_size: the most prompts per call (``None``: no limit).
        max_wait_s: as they come: how long a batch may wait for more prompts.
        in_thread: call ``generate_batch`` in a worker thread, so the event loop keeps stepping envs
            while a model runs (keep ``False`` for a scripted policy or a backend that must run on the
            loop's thread).
        lockstep: batch in rounds (see the module docstring).
        live: in rounds: how many episodes (or slots) will ask; each calls :meth:`finished` when it
            asks no more. As they come: counted by :meth:`started` / :meth:`finished`.
        round_size: ``(local prompts) -> the round's size`` for a collective backend; implies rounds.
        fail_fast: a failed batch fails every later request and ends :meth:`run` (see above).
        on_batch: called before each batch is sent (progress display).
    """

    def __init__(
        self,
        generate_batch: GenerateBatchFn,
        *,
        max_batch_size: int | None = None,
        max_wait_s: float = 0.002,
        in_thread: bool = False,
        lockstep: bool = False,
        live: int = 0,
        round_size: Callable[[int], int] | None = None,
        fail_fast: bool = False,
        on_batch: Callable[[], None] | None = None,
    ):
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.generate_batch = generate_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.in_thread = in_thread
        self.lockstep = lockstep or round_size is not None
        self.round_size = round_size
        self.fail_fast = fail_fast
        self.on_batch = on_batch
        self.active = int(live)  # episodes (rounds: slots) that may still ask
        self.pending: list[tuple[int, list[int], asyncio.Future[Generation]]] = []  # (slot, prompt, future)
        self.wake = asyncio.Event()
        self.batch_sizes: list[int] = []  # prompts of the caller's own per call (no dummies)
        self.rounds = 0
        self.generate_s = 0.0
        self.last_generate_s: float | None = None  # the previous call's duration
        self.error: BaseException | None = None  # fail_fast: the failure every later request gets
        self._dummy: list[int] | None = None  # a collective round's padding prompt

    # -- the episodes' side --------------------------------------------------------------------------

    async def generate(self, prompt: list[int], slot: int = 0) -> Generation:
        """The continuation of ``prompt``, generated in the next batch (``slot`` orders a round)."""
        if self.error is not None:
            raise self.error
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self.pending.append((slot, list(prompt), future))
        if self._dummy is None and prompt:
            self._dummy = [int(prompt[0])]  # one token: a padding prompt costs its generation only
        self.wake.set()
        return await future

    def started(self) -> None:
        """One more episode may ask (as they come; rounds count their ``live`` episodes up front)."""
        self.active += 1

    def finished(self) -> None:
        """An episode (rounds: a slot) asks no more: a batch waiting for it may go now."""
        self.active -= 1
        self.wake.set()

    # -- the batching task ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Send batches until cancelled; in rounds, until every episode has finished (collective: every
        process's). Raises the backend's error with ``fail_fast``."""
        while True:
            await self._wait_for_batch()
            cap = len(self.pending) if self.max_batch_size is None else self.max_batch_size
            if self.lockstep:
                self.pending.sort(key=lambda item: item[0])  # a stable sort: slot order, then arrival
            local = min(cap, len(self.pending))
            size = local if self.round_size is None else int(self.round_size(local))
            if size == 0:
                if self.lockstep and self.active <= 0 and not self.pending:
                    return  # every episode (collective: every process's) is done
                continue
            if self.on_batch is not None:
                self.on_batch()  # sees the batch still pending (the progress bar counts its turns)
            batch, self.pending = self.pending[:local], self.pending[local:]
            await self._send(batch, size)
            if self.pending or (self.lockstep and self.active <= 0):
                self.wake.set()  # more to send, or (collective) dummy rounds to join

    async def _wait_for_batch(self) -> None:
        """Until a batch should go: every live episode waiting (rounds), or as the module docstring says."""
        if self.lockstep:
            while len(self.pending) < self._want():
                await self.wake.wait()
                self.wake.clear()
            return
        while not self.pending:
            await self.wake.wait()
            self.wake.clear()
        # More prompts can still come while some episode is stepping: wait a little for them, but never
        # longer than a generate call takes. A prompt that misses this batch goes into the next one.
        loop = asyncio.get_running_loop()
        wait = self.max_wait_s if self.last_generate_s is None else min(self.max_wait_s, self.last_generate_s)
        if wait < _SHORTEST_WAIT_S:
            wait = 0.0  # a shorter timed wait would overshoot: the loop's timers wait whole milliseconds
        deadline = loop.time() + wait
        while len(self.pending) < self._want():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _want(self) -> int:
        """How many prompts make a full batch now: one per live episode, at most ``max_batch_size``."""
        active = max(self.active, 0)
        return active if self.max_batch_size is None else min(self.max_batch_size, active)

    async def _send(self, batch: list[tuple[int, list[int], asyncio.Future[Generation]]], size: int) -> None:
        prompts = [p for _, p, _ in batch] + [self._dummy or [0]] * (size - len(batch))
        started = time.perf_counter()
        try:
            if self.in_thread:
                generations = await asyncio.to_thread(self.generate_batch, prompts)
            else:
                generations = self.generate_batch(prompts)
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
            if self.fail_fast:
                self.error = exc
                for _, _, future in self.pending:
                    if not future.done():
                        future.set_exception(exc)
                self.pending = []
                raise
            return
        finally:
            self.last_generate_s = time.perf_counter() - started
            self.generate_s += self.last_generate_s
        self.rounds += 1
        if batch:
            self.batch_sizes.append(len(batch))
        for (_, _, future), generation in zip(batch, generations):
            if not future.done():
                future.set_result(generation)
