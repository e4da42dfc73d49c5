"""VLLMPolicy on CPU: what it sends to vLLM and how it turns vLLM's outputs into Generations.

vLLM needs a GPU and is not installed on CPU CI, so this is the one place a fake stands in: a tiny
``vllm`` module (SamplingParams, RequestOutputKind, TokensPrompt with the fields our code uses) and
an engine with ``AsyncLLM``'s ``generate(prompt, sampling_params, request_id)`` async-generator
contract. Everything on our side (tokenizer, chat template, env, async runner) is real. On a GPU the
same policy runs against real vLLM 0.24: benchmarks/rollout_throughput.py, docs/performance.md.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import importlib.machinery
import importlib.util
import json
import runpy
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401
from agent_gym.chat.template import ChatTemplate
from agent_gym.cli.main import main
from agent_gym.models import DEFAULT_MODEL
from agent_gym.rollout.async_runner import run_episodes_concurrent
from agent_gym.rollout.vllm import VLLMPolicy, completion_to_generation


@pytest.fixture()
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    sampling = types.ModuleType("vllm.sampling_params")
    inputs = types.ModuleType("vllm.inputs")

    class RequestOutputKind(enum.Enum):
        CUMULATIVE = 0
        DELTA = 1
        FINAL_ONLY = 2

    class SamplingParams:
        __struct_fields__ = ("max_tokens", "logprobs", "flat_logprobs")  # (a few of vLLM 0.24's fields)

        def __init__(self, **fields):
            self.__dict__.update(fields)

    class AsyncEngineArgs:
        def __init__(self, **fields):
            self.fields = fields

    class UsageContext(str, enum.Enum):
        LLM_CLASS = "LLM_CLASS"
        ENGINE_CONTEXT = "ENGINE_CONTEXT"

    class AsyncLLM:
        """``from_engine_args`` hands out the engine a test put in ``vllm.next_engine``; ``vllm.engine_args``
        and ``vllm.usage_contexts`` record its arguments."""

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
    modules = {"vllm": vllm, "vllm.sampling_params": sampling, "vllm.inputs": inputs, "vllm.v1": types.ModuleType("vllm.v1"),
               "vllm.v1.engine": types.ModuleType("vllm.v1.engine"), "vllm.v1.engine.async_llm": async_llm,
               "vllm.usage": types.ModuleType("vllm.usage"), "vllm.usage.usage_lib": usage}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return vllm


@dataclass
class Logprob:
    logprob: float


@dataclass
class FlatLogprobs:
    """vLLM 0.24's ``FlatLogprobs`` layout: position i owns ``start_indices[i]:end_indices[i]`` of the flat
    lists, the sampled id first."""

    start_indices: list[int] = field(default_factory=list)
    end_indices: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def append(self, entry: dict[int, Logprob]) -> None:
        self.start_indices.append(len(self.token_ids))
        for token, lp in entry.items():
            self.token_ids.append(token)
            self.logprobs.append(lp.logprob)
        self.end_indices.append(len(self.token_ids))

    def __len__(self) -> int:
        return len(self.start_indices)


def flat(entries: list[dict[int, Logprob]]) -> FlatLogprobs:
    out = FlatLogprobs()
    for entry in entries:
        out.append(entry)
    return out


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
    """Replies with ``reply(prompt_ids)`` ids; records the requests it saw."""

    reply: object
    requests: list[tuple[list[int], object, str]] = field(default_factory=list)
    shut_down: bool = False

    async def generate(self, prompt, params, request_id):
        self.requests.append((list(prompt["prompt_token_ids"]), params, request_id))
        await asyncio.sleep(0)
        ids = list(self.reply(prompt["prompt_token_ids"]))[: params.max_tokens]
        lps = [{t: Logprob(-0.5 * (k + 1)), t + 1: Logprob(-9.0)} for k, t in enumerate(ids)]
        reason = "stop" if ids and ids[-1] in params.stop_token_ids else "length"
        if getattr(params, "flat_logprobs", False):
            lps = flat(lps)
        yield Output([Completion(ids, reason, lps if params.logprobs is not None else None)])

    def shutdown(self):
        self.shut_down = True


def test_completion_to_generation_exact():
    lps = [{5: Logprob(-0.25), 6: Logprob(-3.0)}, {2: Logprob(-0.5)}]
    gen = completion_to_generation(Completion([5, 2], "stop", lps), with_logprobs=True)
    assert (gen.ids, gen.logprobs, gen.finish_reason) == ([5, 2], [-0.25, -0.5], "stop")
    assert completion_to_generation(Completion([7], "length"), with_logprobs=False).logprobs is None
    with pytest.raises(RuntimeError, match=r"finish_reason='abort' \(aborted or unfinished\)"):
        completion_to_generation(Completion([7], "abort"), with_logprobs=False)
    with pytest.raises(RuntimeError, match="do not include the sampled id 7"):
        completion_to_generation(Completion([7], "stop", [{8: Logprob(-1.0)}]), with_logprobs=True)
    with pytest.raises(RuntimeError, match="returned 0 log-prob entries for 1 ids"):
        completion_to_generation(Completion([7], "stop", None), with_logprobs=True)


def test_completion_to_generation_reads_flat_logprobs():
    gen = completion_to_generation(Completion([5, 2], "stop", flat([{5: Logprob(-0.25), 6: Logprob(-3.0)}, {2: Logprob(-0.5)}])), with_logprobs=True)
    assert (gen.ids, gen.logprobs) == ([5, 2], [-0.25, -0.5])
    with pytest.raises(RuntimeError, match="log-probs at position 1 do not include the sampled id 2"):
        completion_to_generation(Completion([5, 2], "stop", flat([{5: Logprob(-0.25)}, {3: Logprob(-0.5), 2: Logprob(-0.7)}])), with_logprobs=True)
    with pytest.raises(RuntimeError, match="log-probs at position 0 do not include the sampled id 5"):
        completion_to_generation(Completion([5], "stop", flat([{}])), with_logprobs=True)
    with pytest.raises(RuntimeError, match="returned 1 log-prob entries for 2 ids"):
        completion_to_generation(Completion([5, 2], "stop", flat([{5: Logprob(-0.25)}])), with_logprobs=True)


@pytest.mark.parametrize("has_flat", [True, False])
def test_flat_logprobs_are_asked_for_where_vllm_has_them(fake_vllm, tokenizer, monkeypatch, has_flat):
    import vllm

    if not has_flat:  # an older vLLM without the field
        monkeypatch.setattr(vllm.SamplingParams, "__struct_fields__", ("max_tokens", "logprobs"))
    engine = FakeEngine(reply=lambda p: [42, 2])
    with VLLMPolicy("smollm2", tokenizer=tokenizer, engine=engine) as policy:
        [gen] = policy.generate([[1, 9]], max_new_tokens=4)
        assert getattr(engine.requests[0][1], "flat_logprobs", None) is (True if has_flat else None)
        assert (gen.ids, gen.logprobs) == ([42, 2], [-0.5, -1.0])
    with VLLMPolicy("smollm2", tokenizer=tokenizer, engine=engine, logprobs=False) as policy:
        [gen] = policy.generate([[1, 9]], max_new_tokens=4)
        assert gen.logprobs is None and not hasattr(engine.requests[-1][1], "flat_logprobs")
    with VLLMPolicy("smollm2", tokenizer=tokenizer, engine=engine, sampling_kwargs={"flat_logprobs": False, "min_p": 0.1}) as policy:
        [gen] = policy.generate([[1, 9]], max_new_tokens=4)
        params = engine.requests[-1][1]
        assert (params.flat_logprobs, params.min_p, gen.logprobs) == (False, 0.1, [-0.5, -1.0])


def test_requests_carry_token_ids_and_stop_ids(fake_vllm, tokenizer):
    engine = FakeEngine(reply=lambda p: [42, 43, 2])
    policy = VLLMPolicy("smollm2", tokenizer=tokenizer, temperature=0.7, engine=engine)
    try:
        gens = policy.generate([[1, 9, 10], [1, 11]], max_new_tokens=2)
        assert [g.ids for g in gens] == [[42, 43], [42, 43]]  # cut at max_tokens: finish "length"
        assert [g.finish_reason for g in gens] == ["length", "length"]
        assert gens[0].logprobs == [-0.5, -1.0]
        prompts = sorted(r[0] for r in engine.requests)
        assert prompts == [[1, 9, 10], [1, 11]]
        params = engine.requests[0][1]
        eot = list(ChatTemplate(tokenizer).end_of_turn_ids)
        assert params.stop_token_ids == eot + ([tokenizer.eos_token_id] if tokenizer.eos_token_id not in eot else [])
        assert (params.temperature, params.max_tokens, params.logprobs, params.detokenize) == (0.7, 2, 0, False)
        assert params.output_kind.name == "FINAL_ONLY"
        full = asyncio.run(policy.agenerate([1, 9], max_new_tokens=8, ignore_eos=True))
        assert (full.ids, full.finish_reason) == ([42, 43, 2], "stop")
        assert engine.requests[-1][1].ignore_eos is True
        assert len({r[2] for r in engine.requests}) == len(engine.requests)  # a fresh request id each
    finally:
        policy.close()
    assert engine.shut_down is False  # an engine passed in belongs to the caller
    with pytest.raises(RuntimeError, match="this VLLMPolicy is closed"):
        policy.generate([[1]], max_new_tokens=1)


def test_bad_prompts_are_refused_before_reaching_vllm(fake_vllm, tokenizer):
    engine = FakeEngine(reply=lambda p: [2])
    with VLLMPolicy("smollm2", tokenizer=tokenizer, engine=engine) as policy:
        with pytest.raises(ValueError, match=rf"ids outside the vocabulary \[0, {len(tokenizer)}\): \[-1, {len(tokenizer)}\]"):
            policy.generate([[1, -1, len(tokenizer)]], max_new_tokens=4)
        with pytest.raises(ValueError, match="^every prompt needs at least one token$"):
            asyncio.run(policy.agenerate([], max_new_tokens=4))
        with pytest.raises(ValueError, match="max_new_tokens must be >= 1, got 0"):
            policy.generate([[1]], max_new_tokens=0)
    assert engine.requests == []


def test_async_runner_plays_gsm8k_tool_through_the_policy(fake_vllm, tokenizer):
    """A multi-turn episode: a calculator call, then the answer; the env's reward is exact."""
    template = ChatTemplate(tokenizer)
    eot = list(template.end_of_turn_ids)
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")
    _, info = env.reset(seed=0)
    answer = env.unwrapped.task.answer
    call = template.encode('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>') + eot
    final = template.encode(f"5 items.\n#### {answer}") + eot
    first_len = {}

    def reply(prompt):
        first_len.setdefault("n", len(prompt))
        return call if len(prompt) == first_len["n"] else final

    engine = FakeEngine(reply=reply)
    with VLLMPolicy("smollm2", tokenizer=tokenizer, engine=engine) as policy:
        result = run_episodes_concurrent(lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test"),
                                    policy, episodes=1, concurrency=1, max_new_tokens=256)
    (trajectory,) = result.trajectories
    assert [s.response_ids for s in trajectory.steps] == [call, final]
    assert trajectory.steps[-1].info["tool_calls"] == 1
    assert trajectory.reward == 1.0
    assert trajectory.steps[1].prompt_ids[: len(trajectory.steps[0].prompt_ids) + len(call)] == trajectory.steps[0].prompt_ids + call


def test_close_cancels_what_still_runs_on_the_engine_loop(fake_vllm, tokenizer):
    """AsyncLLM leaves an output-handler task on the loop it ran on; close() must not abandon it."""
    engine = FakeEngine(reply=lambda p: [2])
    policy = VLLMPolicy("smollm2", tokenizer=tokenizer, engine=engine)
    cancelled = []

    async def handler():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    policy._call(_start(handler))
    policy.close()
    assert cancelled == [True]
    policy.close()  # idempotent


async def _start(coro_fn):
    asyncio.ensure_future(coro_fn())
    await asyncio.sleep(0)


def test_cli_eval_on_the_vllm_backend(fake_vllm, tokenizer, tmp_path, capsys):
    """``agent-gym eval --backend vllm``: one request per episode, a calculator turn then the answer."""
    model = tmp_path / "model"
    tokenizer.save_pretrained(model)
    template = ChatTemplate(tokenizer)
    eot = list(template.end_of_turn_ids)
    call = template.encode('<tool_call>\n{"name": "calculate", "arguments": {"expression": "1 + 1"}}\n</tool_call>') + eot
    answer = template.encode("#### 2") + eot
    # the answer once the calculator has replied (a tool turn is in the prompt), else the call
    fake_vllm.next_engine = FakeEngine(reply=lambda p: answer if "<|im_start|>tool" in tokenizer.decode(p) else call)
    out = tmp_path / "runs.jsonl"
    code = main(["eval", "AgentR1/ArithmeticTool-v0", "--env-kwarg", "level=1", "--backend", "vllm", "--model", str(model),
                 "--episodes", "3", "--batch-size", "2", "--temperature", "1.0", "--json", "--no-progress", "--out", str(out)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["episodes"], summary["mean_turns"], summary["tool_calls"], summary["tool_errors"]) == (3, 2.0, 3, 0)
    assert fake_vllm.engine_args == [{"model": str(model), "gpu_memory_utilization": 0.5, "seed": 0, "disable_log_stats": True}]
    assert [c.value for c in fake_vllm.usage_contexts] == ["LLM_CLASS"]  # vLLM's offline-batch defaults, not 128 sequences
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["metadata"]["backend"] == "vllm" for line in lines)
    assert fake_vllm.next_engine.shut_down is True  # the CLI built the engine, so it shuts it down


def test_cli_vllm_backend_errors(tokenizer, capsys):
    assert main(["eval", "AgentR1/Arithmetic-v0", "--backend", "vllm", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        "agent-gym: error: --backend vllm needs --model, a Hugging Face model folder (vLLM cannot read the "
        "embedded GGUF file; `agent-gym export-model --out DIR` writes one)"
    )
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ImportError, match=r"^VLLMPolicy needs vLLM, which is not installed: pip install 'vllm>=0.24,<0.25' \(a CUDA machine\)$"):
        VLLMPolicy("some/folder", tokenizer=tokenizer)


BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "rollout_throughput.py"


def test_rollout_benchmark_gc_ab_reports_each_half(fake_vllm, tokenizer, tmp_path, monkeypatch, capsys):
    """benchmarks/rollout_throughput.py end to end on the fake engine: the GPU benchmark's own code (the
    runs, the gc A/B, the report and its JSON) is checked here, without a GPU."""
    template = ChatTemplate(tokenizer)
    eot = list(template.end_of_turn_ids)
    call = template.encode('<tool_call>\n{"name": "calculator", "arguments": {"expression": "3 * 6"}}\n</tool_call>') + eot
    answer = template.encode("#### 18") + eot

    def reply(prompt):  # a calculator call first, then the answer once the call is in the context (2 turns)
        made = any(prompt[i : i + len(call)] == call for i in range(len(prompt) - len(call) + 1))
        return answer if made else call

    fake_vllm.next_engine = engine = FakeEngine(reply)
    out = tmp_path / "tp.json"
    monkeypatch.setattr(sys, "argv", ["rollout_throughput.py", "--model", DEFAULT_MODEL, "--episodes", "6", "--concurrency", "3",
                                      "--repeats", "4", "--gc-ab", "--out", str(out)])
    try:
        runpy.run_path(str(BENCHMARK), run_name="__main__")
    finally:
        gc.unfreeze()
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert [r["gc_frozen"] for r in data["runs"]["env"]] == [False, True, True, False]  # A B B A
    assert set(data["groups"]) == {"gc normal", "gc frozen"}
    for group in data["groups"].values():
        env = group["medians"]["env"]
        assert env["episodes"] == 6 and env["mean_turns"] == 2.0 and env["tool_calls"] == 6
        assert group["ratio_env_raw"] == env["tokens_per_s"] / group["medians"]["raw"]["tokens_per_s"]
    assert "gc normal (medians of 2):" in text and "gc frozen (medians of 2):" in text
    assert "full collections per run" in text and "after gc.freeze()" in text
    raw = [r for r in engine.requests if r[1].__dict__.get("ignore_eos")]
    assert raw and all(r[1].min_tokens == r[1].max_tokens for r in raw)  # raw runs ask for exact token counts
    assert engine.shut_down


def test_rollout_benchmark_gc_off_pauses_the_collector_only_inside_runs(fake_vllm, tokenizer, tmp_path, monkeypatch, capsys):
    """--gc-off: no collection during any timed run (env and raw alike), one after each, and the
    collector is on again afterwards; --gc-off with --gc-ab is refused."""
    template = ChatTemplate(tokenizer)
    answer = template.encode("#### 18") + list(template.end_of_turn_ids)
    fake_vllm.next_engine = FakeEngine(lambda prompt: answer)
    seen: list[bool] = []  # the collector's state whenever the fake engine is asked for tokens
    real_generate = FakeEngine.generate

    async def watching_generate(self, *args, **kwargs):
        seen.append(gc.isenabled())
        async for item in real_generate(self, *args, **kwargs):
            yield item

    monkeypatch.setattr(FakeEngine, "generate", watching_generate)
    out = tmp_path / "tp.json"
    monkeypatch.setattr(sys, "argv", ["rollout_throughput.py", "--model", DEFAULT_MODEL, "--episodes", "4", "--concurrency", "2",
                                      "--repeats", "2", "--gc-off", "--out", str(out)])
    runpy.run_path(str(BENCHMARK), run_name="__main__")
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert gc.isenabled()
    # the 8 warm-up requests and the untimed env run's 4 ran with the collector on; then per repeat 4 env turns,
    # 4 raw and 4 raw_turns requests without
    assert seen == [True] * (8 + 4) + [False] * 2 * (4 + 4 + 4)
    for name in ("env", "raw", "raw_turns"):
        assert all(r["gc_after_s"] > 0 for r in data["runs"][name]), name
    assert all(r["gc_off"] and r["gc_full_collections"] == 0 and r["gc_s"] == 0.0 for r in data["runs"]["env"])
    assert "collector off during runs" in text and "collector off, one collection after the run took" in text

    monkeypatch.setattr(sys, "argv", ["rollout_throughput.py", "--model", DEFAULT_MODEL, "--gc-off", "--gc-ab"])
    with pytest.raises(SystemExit):
        runpy.run_path(str(BENCHMARK), run_name="__main__")
    assert "--gc-off and --gc-ab measure different things; pick one" in capsys.readouterr().err


def test_rollout_benchmark_capped_turns_keep_concurrency_and_turn_order(fake_vllm, tokenizer, tmp_path, monkeypatch, capsys):
    """--raw-turns-capped replays every turn's request in turn order with at most --concurrency in flight
    (raw_turns submits them all at once); the untimed warm-up env run comes first unless --no-warmup-run."""
    template = ChatTemplate(tokenizer)
    eot = list(template.end_of_turn_ids)
    call = template.encode('<tool_call>\n{"name": "calculator", "arguments": {"expression": "3 * 6"}}\n</tool_call>') + eot
    answer = template.encode("#### 18") + eot

    def made_call(prompt):
        return any(prompt[i : i + len(call)] == call for i in range(len(prompt) - len(call) + 1))

    seen: list[tuple[bool, int, bool]] = []  # per request: raw (ignore_eos), requests in flight with it, a call in the prompt
    in_flight = [0]
    real_generate = FakeEngine.generate

    async def counting_generate(self, prompt, params, request_id):
        in_flight[0] += 1
        seen.append((bool(params.__dict__.get("ignore_eos")), in_flight[0], made_call(list(prompt["prompt_token_ids"]))))
        try:
            await asyncio.sleep(0.02)  # (long enough for requests submitted together to overlap, even on a slow machine)
            async for item in real_generate(self, prompt, params, request_id):
                yield item
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(FakeEngine, "generate", counting_generate)
    out = tmp_path / "tp.json"
    for warmup in (True, False):
        seen.clear()
        fake_vllm.next_engine = FakeEngine(lambda prompt: answer if made_call(prompt) else call)
        argv = ["rollout_throughput.py", "--model", DEFAULT_MODEL, "--episodes", "6", "--concurrency", "3", "--repeats", "1",
                "--raw-turns-capped", "--out", str(out)] + ([] if warmup else ["--no-warmup-run"])
        monkeypatch.setattr(sys, "argv", argv)
        runpy.run_path(str(BENCHMARK), run_name="__main__")
        text = capsys.readouterr().out
        # 8 engine warm-up requests, the untimed env run's 12 turns (6 episodes x 2), the timed env run's 12
        assert sum(not raw for raw, _, _ in seen) == 8 + (12 if warmup else 0) + 12
        raw = [r for r in seen if r[0]]
        assert len(raw) == 6 + 12 + 12  # raw (a request per episode), raw_turns, raw_turns_capped
        raw_turns, capped = raw[6:18], raw[18:]
        assert max(n for _, n, _ in raw_turns) > 3  # all submitted at once: more in flight than the cap
        assert max(n for _, n, _ in capped) == 3  # never more than --concurrency, and that many at once
        assert [c for _, _, c in capped] == [False] * 6 + [True] * 6  # every first turn before any second turn
    data = json.loads(out.read_text())
    assert data["ratio_env_raw_turns_capped"] == data["medians"]["env"]["tokens_per_s"] / data["medians"]["raw_turns_capped"]["tokens_per_s"]
    assert "raw_turns_capped:" in text and "env/raw_turns_capped = " in text


def test_rollout_benchmark_reports_each_runs_hand_over_per_request(fake_vllm, tokenizer, tmp_path, monkeypatch, capsys):
    """Every request is handed to the engine's loop on its own (16 here: 4 one-turn episodes in the warm-up and
    the timed env run, 4 raw, 4 raw_turns), and each run reports the time its requests spent between the two
    loops (positive: the hand-over is never free)."""
    template = ChatTemplate(tokenizer)
    answer = template.encode("#### 18") + list(template.end_of_turn_ids)
    submitted: list[str] = []
    real_submit = VLLMPolicy._submit

    def counting_submit(self, coro):
        submitted.append(coro.__qualname__)
        return real_submit(self, coro)

    monkeypatch.setattr(VLLMPolicy, "_submit", counting_submit)
    fake_vllm.next_engine = FakeEngine(lambda prompt: answer)
    out = tmp_path / "tp.json"
    monkeypatch.setattr(sys, "argv", ["rollout_throughput.py", "--model", DEFAULT_MODEL, "--episodes", "4", "--concurrency", "2",
                                      "--repeats", "1", "--out", str(out)])
    runpy.run_path(str(BENCHMARK), run_name="__main__")
    text = capsys.readouterr().out
    data = json.loads(out.read_text())
    request = "TimedVLLMPolicy._generate_on_loop"
    assert submitted == ["VLLMPolicy._build_engine", "VLLMPolicy.generate.<locals>._all"] + [request] * 16 + ["_cancel_other_tasks"]
    assert {name: len(runs) for name, runs in data["runs"].items()} == {"env": 1, "raw": 1, "raw_turns": 1}
    assert all(runs[0]["handover_ms"] > 0 for runs in data["runs"].values())
    assert "hand-over between threads" in text and text.count(" ms per request)") == 2  # raw, raw_turns


@pytest.mark.parametrize("faked", ["0.25.0", "0.23.2", "1.0.0", "dev"])
def test_a_vllm_outside_the_tested_range_fails_loudly(fake_vllm, tokenizer, monkeypatch, faked):
    """The check reads the installed vLLM's version (its distribution metadata, absent here): faked."""
    from agent_gym.rollout import vllm as module

    monkeypatch.setattr(module, "installed_vllm_version", lambda: faked)
    with pytest.raises(module.UnsupportedVLLM) as raised:
        VLLMPolicy(DEFAULT_MODEL, tokenizer=tokenizer, engine=object())
    assert str(raised.value) == (
        f"VLLMPolicy is tested with vllm>=0.24,<0.25 and uses vLLM internals (agent_gym/rollout/vllm.py), "
        f"but vllm {faked} is installed: pip install 'vllm>=0.24,<0.25'"
    )


@pytest.mark.parametrize("faked", ["0.24.0", "0.24.1rc2"])
def test_a_vllm_in_the_tested_range_passes(monkeypatch, faked):
    from agent_gym.rollout import vllm as module

    monkeypatch.setattr(module, "installed_vllm_version", lambda: faked)
    assert module.check_vllm_version() == faked
    assert module.check_vllm_version("0.24.3") == "0.24.3"
