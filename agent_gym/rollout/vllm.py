"""A policy backed by vLLM's async engine: every episode sends its own request, vLLM batches them.

:class:`VLLMPolicy` implements both halves of the policy interface:

- ``await policy.agenerate(prompt_ids, max_new_tokens=...)``: one request, for the async runner
  (:func:`agent_gym.rollout.async_runner.run_episodes_concurrent` awaits it per episode, so hundreds of
  episodes stay in flight and vLLM's continuous batching, not a turn barrier, decides what runs);
- ``policy.generate(prompts, max_new_tokens=...)``: a batch, for the synchronous driver.

The engine lives on an event loop of its own in a daemon thread, because vLLM's ``AsyncLLM`` binds
its output handler to the loop it first runs on; callers on any loop (or none) hand requests over
with ``run_coroutine_threadsafe``. Prompts go in as token ids (``TokensPrompt``) and come back as
token ids: nothing is re-tokenized, so the env's no-drift context is what the model saw.

``vllm`` is imported when the policy is built, never by ``import agent_gym.rollout``.

This is the one module that uses vLLM, and it reaches past vLLM's documented API; what it relies on,
checked against :data:`TESTED_VLLM` when a policy is built (:func:`check_vllm_version`: outside the
range it raises :class:`UnsupportedVLLM` naming the range and the ``pip install`` that gets one):

| vLLM name | why | tested |
|---|---|---|
| ``vllm.v1.engine.async_llm.AsyncLLM.from_engine_args`` (an internal module) | the async engine, one request per episode | 0.24 |
| ``vllm.usage.usage_lib.UsageContext.LLM_CLASS`` (internal) | ``vllm.LLM``'s offline-batch defaults | 0.24 |
| ``SamplingParams.__struct_fields__`` (msgspec's) and ``flat_logprobs`` | ask for flat log-prob lists only where vLLM has them | 0.24 |
| ``FlatLogprobs.start_indices`` / ``end_indices`` / ``token_ids`` / ``logprobs`` | read the sampled ids' log-probs without a dict per token | 0.24 |
| ``vllm.sampling_params.RequestOutputKind.FINAL_ONLY``, ``vllm.inputs.TokensPrompt`` | one final output per request; ids in, no re-tokenizing | 0.24 |

Example (on a GPU machine)::

    policy = VLLMPolicy("/models/SmolLM2-135M-Instruct", temperature=1.0, gpu_memory_utilization=0.5)
    result = run_episodes_concurrent(lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=policy.tokenizer),
                                policy, episodes=512, concurrency=512, max_new_tokens=256)
    policy.close()
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import uuid
from concurrent.futures import Future
from typing import Any, Coroutine, Mapping, Sequence, TypeVar

from agent_gym.rollout.policy import Generation, check_prompts, resolve_stop_ids

__all__ = ["TESTED_VLLM", "UnsupportedVLLM", "VLLMPolicy", "check_vllm_version", "completion_to_generation",
           "installed_vllm_version"]

T = TypeVar("T")

#: The vLLM releases the internals above are tested with (docs/performance.md's runs: 0.24). Raise the
#: bound once benchmarks/rollout_throughput.py and tests/test_vllm_policy.py pass on the next release.
TESTED_VLLM = ">=0.24,<0.25"


class UnsupportedVLLM(RuntimeError):
    """The installed vLLM is outside :data:`TESTED_VLLM`."""


def installed_vllm_version() -> str | None:
    """The installed vLLM's version (its distribution metadata); ``None``: no vLLM distribution."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def check_vllm_version(version: str | None = None) -> str | None:
    """Check ``version`` (default: :func:`installed_vllm_version`) against :data:`TESTED_VLLM`; return it.

    ``None`` (no vLLM distribution: an engine passed in, a stand-in module) is not checked.

    Raises:
        UnsupportedVLLM: outside the range (or unreadable), naming the range and the fix.
    """
    from agent_gym.versions import in_tested_range

    version = installed_vllm_version() if version is None else version
    if version is None:
        return None
    if not in_tested_range(version, TESTED_VLLM):
        raise UnsupportedVLLM(
            f"VLLMPolicy is tested with vllm{TESTED_VLLM} and uses vLLM internals (agent_gym/rollout/vllm.py), "
            f"but vllm {version} is installed: pip install 'vllm{TESTED_VLLM}'"
        )
    return version


def completion_to_generation(completion: Any, *, with_logprobs: bool) -> Generation:
    """One vLLM ``CompletionOutput`` (``token_ids``, ``logprobs``, ``finish_reason``) as a :class:`Generation`.

    Args:
        completion: the finished output of a request (``request_output.outputs[0]``).
        with_logprobs: the request asked for log-probs (``SamplingParams(logprobs=0)``). vLLM returns
            them either as a ``{token_id: Logprob}`` dict per position that contains the sampled id,
            or (``flat_logprobs=True``, where vLLM has it; 0.24 does) as one ``FlatLogprobs`` whose
            flat lists hold the sampled id first at each position's start index.

    Raises:
        RuntimeError: the request was aborted or did not finish (vLLM's ``finish_reason`` is neither
            ``"stop"`` nor ``"length"``), or a sampled id is missing from its log-prob entry.
    """
    reason = completion.finish_reason
    if reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM request ended with finish_reason={reason!r} (aborted or unfinished)")
    ids = [int(t) for t in completion.token_ids]
    logprobs: list[float] | None = None
    if with_logprobs:
        entries = completion.logprobs
        if entries is None or len(entries) != len(ids):
            raise RuntimeError(f"vLLM returned {0 if entries is None else len(entries)} log-prob entries for {len(ids)} ids")
        logprobs = []
        if hasattr(entries, "start_indices"):  # FlatLogprobs: indexing it would build a dict per position
            starts, ends, tokens, values = entries.start_indices, entries.end_indices, entries.token_ids, entries.logprobs
            for position, token in enumerate(ids):
                at = starts[position]
                if at >= ends[position] or tokens[at] != token:
                    raise RuntimeError(f"vLLM's log-probs at position {position} do not include the sampled id {token}")
                logprobs.append(float(values[at]))
        else:
            for position, (token, entry) in enumerate(zip(ids, entries)):
                if token not in entry:
                    raise RuntimeError(f"vLLM's log-probs at position {position} do not include the sampled id {token}")
                logprobs.append(float(entry[token].logprob))
    return Generation(ids=ids, logprobs=logprobs, finish_reason=reason)


async def _cancel_other_tasks() -> None:
    """Cancel every other task of the running loop and wait until they have finished."""
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class VLLMPolicy:
    """Generate with vLLM's ``AsyncLLM`` from token ids, one request per prompt.

    Args:
        model: a Hugging Face model folder (or hub name when online) vLLM can load.
        tokenizer: the tokenizer the envs use; default: :func:`agent_gym.models.load_tokenizer` of ``model``.
        temperature: sampling temperature (0 decodes greedily).
        top_p: nucleus sampling threshold.
        seed: seed of the engine's sampler (vLLM's ``seed`` engine argument).
        stop_ids: ids that end a turn; default :func:`~agent_gym.rollout.policy.default_stop_ids`.
        logprobs: return the sampled ids' log-probs (vLLM's default: the model's raw distribution).
        gpu_memory_utilization: vLLM's share of the GPU memory.
        sampling_kwargs: extra ``vllm.SamplingParams`` fields for every request (e.g. ``{"min_p": 0.05}``);
            they replace the policy's own (``{"flat_logprobs": False}`` turns off the flat log-prob lists
            the policy asks for where vLLM has them).
        engine_kwargs: further ``AsyncEngineArgs`` fields (``max_model_len``, ``enforce_eager``,
            ``max_num_seqs``, ...). The engine is built with vLLM's offline-batch defaults
            (``UsageContext.LLM_CLASS``, as ``vllm.LLM`` uses), not ``AsyncLLM``'s engine-context ones.
        engine: an already built engine with ``AsyncLLM``'s ``generate``/``shutdown``; then ``model``
            only names it and no engine is created (for sharing one engine, and for tests).
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
        sampling_kwargs: Mapping[str, Any] | None = None,
        engine_kwargs: Mapping[str, Any] | None = None,
        engine: Any = None,
    ) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if engine is None and importlib.util.find_spec("vllm") is None:
            raise ImportError(f"VLLMPolicy needs vLLM, which is not installed: pip install 'vllm{TESTED_VLLM}' (a CUDA machine)")
        check_vllm_version()
        if tokenizer is None:
            from agent_gym.models import load_tokenizer

            tokenizer = load_tokenizer(model)
        self.model_name = str(model)
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.with_logprobs = bool(logprobs)
        self.sampling_kwargs = dict(sampling_kwargs or {})
        self.stop_ids = resolve_stop_ids(tokenizer, stop_ids)
        self.vocab_size = len(tokenizer)

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-policy-loop", daemon=True)
        self._thread.start()
        self._owns_engine = engine is None
        if engine is None:
            args = dict(
                model=str(model),
                gpu_memory_utilization=gpu_memory_utilization,
                seed=seed,
                disable_log_stats=True,
            )
            args.update(engine_kwargs or {})
            # Built on the policy's loop: AsyncLLM starts its output handler on the loop it runs on.
            engine = self._call(self._build_engine(args))
        self.engine = engine

    @staticmethod
    async def _build_engine(args: dict[str, Any]) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        # vLLM sizes its batch by usage context. AsyncLLM's own default (ENGINE_CONTEXT) falls back
        # to 128 sequences and 2,048 tokens per step, so 512 episodes in flight would run 128 at a time;
        # rollouts are offline batch generation, which is what LLM_CLASS's hardware-aware defaults
        # are for (on an 80 GB+ GPU: 1,024 sequences, 16,384 tokens per step). engine_kwargs
        # (max_num_seqs, max_num_batched_tokens) still override them. +58% env-driven tokens/s on an
        # H200 (docs/performance.md).
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**args), usage_context=UsageContext.LLM_CLASS)

    def __repr__(self) -> str:
        return f"VLLMPolicy({self.model_name!r}, temperature={self.temperature}, top_p={self.top_p})"

    # -- running coroutines on the engine's loop --------------------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("this VLLMPolicy is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._submit(coro).result()

    # -- generation -------------------------------------------------------------------------------

    def sampling_params(self, max_new_tokens: int, **overrides: Any) -> Any:
        """The ``vllm.SamplingParams`` of one request; ``overrides`` replace or add fields (e.g. ``ignore_eos``)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        fields: dict[str, Any] = dict(
            max_tokens=int(max_new_tokens),
            temperature=self.temperature,
            top_p=self.top_p,
            stop_token_ids=list(self.stop_ids),
            logprobs=0 if self.with_logprobs else None,
            detokenize=False,  # the env decodes what it needs itself
            skip_special_tokens=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        if self.with_logprobs and "flat_logprobs" in getattr(SamplingParams, "__struct_fields__", ()):
            # a few flat lists per request instead of a dict and a Logprob object per generated token:
            # fewer allocations in the frontend, which shares its process (and GIL) with the env loop
            fields["flat_logprobs"] = True
        fields.update(self.sampling_kwargs)
        fields.update(overrides)
        return SamplingParams(**fields)

    async def _generate_on_loop(self, prompt: list[int], max_new_tokens: int, overrides: dict[str, Any]) -> Generation:
        from vllm.inputs import TokensPrompt

        params = self.sampling_params(max_new_tokens, **overrides)
        final = None
        async for output in self.engine.generate(TokensPrompt(prompt_token_ids=prompt), params, uuid.uuid4().hex):
            final = output
        if final is None or not final.outputs:
            raise RuntimeError("vLLM returned no output for a request")
        return completion_to_generation(final.outputs[0], with_logprobs=params.logprobs is not None)

    async def agenerate(self, prompt: Sequence[int], *, max_new_tokens: int, **overrides: Any) -> Generation:
        """Generate a continuation of one prompt (token ids) without blocking the caller's event loop.

        ``overrides`` are extra ``SamplingParams`` fields for this request (benchmarks use
        ``ignore_eos=True, min_tokens=n``).
        """
        (ids,) = check_prompts([prompt], max_new_tokens, vocab_size=self.vocab_size)
        return await asyncio.wrap_future(self._submit(self._generate_on_loop(ids, max_new_tokens, overrides)))

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[Generation]:
        """Generate a continuation of every prompt (all sent at once; vLLM batches them); in order."""
        checked = check_prompts(prompts, max_new_tokens, vocab_size=self.vocab_size)

        async def _all() -> list[Generation]:
            return list(await asyncio.gather(*(self._generate_on_loop(p, max_new_tokens, {}) for p in checked)))

        return self._call(_all())

    def close(self) -> None:
        """Shut the engine down (if this policy built it) and stop the loop thread; idempotent."""
        if self._loop.is_closed():
            return
        if self._owns_engine and self.engine is not None:
            self.engine.shutdown()
        # The engine's output handler (and any request a caller abandoned) still runs on our loop:
        # cancel and await it so nothing is destroyed while pending.
        self._call(_cancel_other_tasks())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> "VLLMPolicy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
