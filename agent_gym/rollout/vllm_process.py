"""vLLM in a process of its own: the env loop and vLLM's frontend stop sharing one interpreter lock.

:class:`~agent_gym.rollout.vllm.VLLMPolicy` runs vLLM's ``AsyncLLM`` frontend in the caller's
process. That frontend handles every engine step's outputs for every running request in Python
(hundreds of requests, dozens of steps a second), and so does the env loop between turns (parsing,
tools, tokenization): both hold the same GIL, and each waits for the other. The H200 measurements
in docs/results/gpu-runs.md show it: env-driven generation ran at 0.64-0.70 of raw vLLM on one GPU.

:class:`VLLMProcessPolicy` has the same interface (``agenerate`` for the async runner, ``generate``
for the synchronous driver, ``tokenizer``, ``close``) but builds the ``VLLMPolicy`` in a child
process (``python -m agent_gym.rollout._vllm_server``) and sends it one small message per request
over a socket pair: the prompt's token ids out, the generated ids, their log-probs and the finish
reason back. Ids stay ids (nothing is re-tokenized), so the no-drift guarantee is unchanged. The
child's own stdout/stderr are this process's (vLLM's logs appear as usual).

Example (on a GPU machine)::

    policy = VLLMProcessPolicy("/models/SmolLM2-135M-Instruct", gpu_memory_utilization=0.5)
    result = run_episodes_async(lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=policy.tokenizer),
                                policy, episodes=512, concurrency=512, max_new_tokens=256)
    policy.close()
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any, Coroutine, Mapping, Sequence, TypeVar

from agent_gym.rollout._vllm_server import encode_frame, read_frame
from agent_gym.rollout.policy import Generation, check_prompts, resolve_stop_ids

__all__ = ["VLLMProcessPolicy"]

T = TypeVar("T")


class VLLMProcessPolicy:
    """Generate with vLLM's ``AsyncLLM`` running in a child process, one request per prompt.

    Args:
        model: a Hugging Face model folder vLLM can load (the child loads it).
        tokenizer: the tokenizer the envs use; default: :func:`agent_gym.models.load_tokenizer` of ``model``.
        temperature, top_p, seed, stop_ids, logprobs, gpu_memory_utilization, engine_kwargs: as for
            :class:`~agent_gym.rollout.vllm.VLLMPolicy` (``engine_kwargs`` must be JSON values).
        python: interpreter of the child (default: this one).
        startup_timeout_s: how long to wait for the child to build the engine (vLLM compiles on start).
        engine_factory: ``"module:function"`` or ``"file.py:function"`` called in the child to build
            the engine instead of vLLM's ``AsyncLLM`` (for tests; ``model`` then only names it).

    Raises:
        RuntimeError: the child could not build the engine (its error is in the message) or exited.
        TimeoutError: the engine was not ready within ``startup_timeout_s``.
    """

    def __init__(
        self,
        model: str,
        *,
        tokenizer: Any = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_ids: Sequence[int] | None = None,
        logprobs: bool = True,
        gpu_memory_utilization: float = 0.5,
        engine_kwargs: Mapping[str, Any] | None = None,
        python: str | None = None,
        startup_timeout_s: float = 900.0,
        engine_factory: str | None = None,
    ) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if tokenizer is None:
            from agent_gym.models import load_tokenizer

            tokenizer = load_tokenizer(model)
        self.model_name = str(model)
        self.tokenizer = tokenizer
        self.stop_ids = resolve_stop_ids(tokenizer, stop_ids)
        self.vocab_size = len(tokenizer)
        config = {
            "model": str(model), "temperature": float(temperature), "top_p": float(top_p), "seed": int(seed),
            "stop_ids": list(self.stop_ids), "logprobs": bool(logprobs),
            "gpu_memory_utilization": float(gpu_memory_utilization), "engine_kwargs": dict(engine_kwargs or {}),
            "engine_factory": engine_factory,
        }
        ours, theirs = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [python or sys.executable, "-m", "agent_gym.rollout._vllm_server", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._dead: str | None = None
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-process-client", daemon=True)
        self._thread.start()
        try:
            ours.sendall(encode_frame(config))
            ours.setblocking(False)
            self._call(self._connect(ours), timeout=startup_timeout_s)
        except BaseException:
            if self._process.poll() is None:
                self._process.kill()  # (a start that failed or timed out: no shutdown handshake to wait for)
            self.close()
            raise

    def __repr__(self) -> str:
        return f"VLLMProcessPolicy({self.model_name!r}, pid={self._process.pid})"

    @property
    def pid(self) -> int:
        """The child process's pid (vLLM's engine core is a child of it)."""
        return self._process.pid

    # -- the connection (on the client loop) ----------------------------------------------------------

    async def _connect(self, sock: socket.socket) -> None:
        self._reader, self._writer = await asyncio.open_connection(sock=sock)
        first = await read_frame(self._reader)
        if first is None or first.get("op") != "ready":
            detail = f": {first['error']}" if first and first.get("error") else ""
            code = self._process.wait(timeout=30) if first is None or first.get("op") == "error" else None
            raise RuntimeError(f"the vLLM server process did not start (exit code {code}){detail}")
        self._read_task = asyncio.create_task(self._read_replies())

    async def _read_replies(self) -> None:
        cause = ""
        try:
            while True:
                msg = await read_frame(self._reader)
                if msg is None:
                    break
                future = self._waiting.pop(msg.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(msg)
        except Exception as exc:  # noqa: BLE001 - a garbled reply stream makes the server unusable: stop it
            cause = f" after a broken reply ({type(exc).__name__}: {exc})"
            self._process.kill()
        code = await asyncio.to_thread(self._process.wait)
        self._fail_all(f"the vLLM server process exited (code {code}){cause}")

    def _fail_all(self, why: str) -> None:
        self._dead = why
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(RuntimeError(why))

    async def _request(self, prompt: list[int], max_new_tokens: int, overrides: dict[str, Any]) -> Generation:
        if self._dead is not None:
            raise RuntimeError(self._dead)
        rid = next(self._ids)
        future = self._waiting[rid] = self._loop.create_future()
        self._writer.write(encode_frame({"op": "generate", "id": rid, "prompt": prompt, "max_new_tokens": max_new_tokens, "overrides": overrides}))
        msg = await future
        if "error" in msg:
            raise RuntimeError(f"vLLM server: {msg['error']}")
        return Generation(ids=msg["ids"], logprobs=msg["logprobs"], finish_reason=msg["finish_reason"])

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("this VLLMProcessPolicy is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self._submit(coro).result(timeout)

    # -- the policy interface -------------------------------------------------------------------------

    async def agenerate(self, prompt: Sequence[int], *, max_new_tokens: int, **overrides: Any) -> Generation:
        """Generate a continuation of one prompt (token ids) without blocking the caller's event loop.

        ``overrides`` are extra ``SamplingParams`` fields (JSON values), as for ``VLLMPolicy.agenerate``.
        """
        (ids,) = check_prompts([prompt], max_new_tokens, vocab_size=self.vocab_size)
        return await asyncio.wrap_future(self._submit(self._request(ids, max_new_tokens, overrides)))

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[Generation]:
        """Generate a continuation of every prompt (all sent at once; vLLM batches them); in order."""
        checked = check_prompts(prompts, max_new_tokens, vocab_size=self.vocab_size)

        async def _all() -> list[Generation]:
            return list(await asyncio.gather(*(self._request(p, max_new_tokens, {}) for p in checked)))

        return self._call(_all())

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop the child (it shuts its engine down) and the client thread; idempotent."""
        if self._closed:
            return
        self._closed = True

        async def _shutdown() -> None:
            writer = getattr(self, "_writer", None)
            if writer is not None and not writer.is_closing():
                try:
                    writer.write(encode_frame({"op": "shutdown"}))
                    await writer.drain()
                except (ConnectionError, OSError):
                    pass
            try:
                code = await asyncio.wait_for(asyncio.to_thread(self._process.wait), timeout_s)
            except asyncio.TimeoutError:
                self._process.kill()
                code = await asyncio.to_thread(self._process.wait)
            self._fail_all(f"this VLLMProcessPolicy is closed (server exit code {code})")
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if writer is not None:
                writer.close()

        if not self._loop.is_closed():
            self._call(_shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        elif self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> "VLLMProcessPolicy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten policy must not leave a GPU-holding child behind
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            process.kill()
