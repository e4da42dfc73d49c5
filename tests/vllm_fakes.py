"""A stand-in for vLLM on CPU (vLLM needs a GPU and is not installed in CI): a tiny ``vllm`` module
with the names our code imports (SamplingParams, RequestOutputKind, TokensPrompt, AsyncEngineArgs,
AsyncLLM) and an engine with ``AsyncLLM``'s ``generate(prompt, sampling_params, request_id)``
async-generator contract. Loaded by file path by tests/test_vllm_policy.py (not a test module itself).
"""

from __future__ import annotations

import asyncio
import enum
import importlib.machinery
import types
from dataclasses import dataclass, field


def fake_vllm_modules() -> dict[str, types.ModuleType]:
    """``sys.modules`` entries of the fake ``vllm`` package; ``vllm.next_engine`` is what
    ``AsyncLLM.from_engine_args`` hands out, ``vllm.engine_args`` and ``vllm.usage_contexts`` record
    its arguments."""
    vllm = types.ModuleType("vllm")
    sampling = types.ModuleType("vllm.sampling_params")
    inputs = types.ModuleType("vllm.inputs")

    class RequestOutputKind(enum.Enum):
        CUMULATIVE = 0
        DELTA = 1
        FINAL_ONLY = 2

    class SamplingParams:
        def __init__(self, **fields):
            self.__dict__.update(fields)

    class AsyncEngineArgs:
        def __init__(self, **fields):
            self.fields = fields

    class UsageContext(str, enum.Enum):
        LLM_CLASS = "LLM_CLASS"
        ENGINE_CONTEXT = "ENGINE_CONTEXT"

    class AsyncLLM:
        @staticmethod
        def from_engine_args(args, usage_context=UsageContext.ENGINE_CONTEXT):
            vllm.engine_args.append(args.fields)
            vllm.usage_contexts.append(usage_context)
            return vllm.next_engine

    vllm.SamplingParams = SamplingParams
    vllm.AsyncEngineArgs = AsyncEngineArgs
    vllm.engine_args = []
    vllm.usage_contexts = []
    vllm.next_engine = None
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)  # importlib.util.find_spec finds it
    sampling.RequestOutputKind = RequestOutputKind
    inputs.TokensPrompt = dict
    usage = types.ModuleType("vllm.usage.usage_lib")
    usage.UsageContext = UsageContext
    async_llm = types.ModuleType("vllm.v1.engine.async_llm")
    async_llm.AsyncLLM = AsyncLLM
    return {"vllm": vllm, "vllm.sampling_params": sampling, "vllm.inputs": inputs, "vllm.v1": types.ModuleType("vllm.v1"),
            "vllm.v1.engine": types.ModuleType("vllm.v1.engine"), "vllm.v1.engine.async_llm": async_llm,
            "vllm.usage": types.ModuleType("vllm.usage"), "vllm.usage.usage_lib": usage}


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    token_ids: list[int]
    finish_reason: str | None
    logprobs: list[dict[int, Logprob]] | None = None


@dataclass
class Output:
    outputs: list[Completion]


@dataclass
class FakeEngine:
    """Replies with ``reply(prompt_ids)`` ids; records the requests it saw. The sampled id at
    position k gets log-prob ``-0.5 * (k + 1)`` (and a rival id ``-9.0``)."""

    reply: object
    requests: list[tuple[list[int], object, str]] = field(default_factory=list)
    shut_down: bool = False

    async def generate(self, prompt, params, request_id):
        self.requests.append((list(prompt["prompt_token_ids"]), params, request_id))
        await asyncio.sleep(0)
        ids = list(self.reply(prompt["prompt_token_ids"]))[: params.max_tokens]
        lps = [{t: Logprob(-0.5 * (k + 1)), t + 1: Logprob(-9.0)} for k, t in enumerate(ids)]
        reason = "stop" if ids and ids[-1] in params.stop_token_ids else "length"
        yield Output([Completion(ids, reason, lps if params.logprobs is not None else None)])

    def shutdown(self):
        self.shut_down = True
