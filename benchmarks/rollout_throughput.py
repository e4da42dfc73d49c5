#!/usr/bin/env python3
"""Env-driven multi-turn rollout on vLLM against raw vLLM generating the same tokens (GPU).

The env run and three raw baselines on one ``AsyncLLM`` engine (:class:`agent_gym.rollout.vllm.VLLMPolicy`):

- ``env``: ``--episodes`` episodes of ``--env`` played by
  :func:`agent_gym.rollout.async_runner.arun_episodes` with ``--concurrency`` in flight: each
  episode awaits its own vLLM request per turn, then ``env.astep`` (parse, tool call, context
  update, tokenization) before its next request;
- ``raw``: each episode's first prompt, asked for exactly as many tokens as its episode generated
  over all its turns (``ignore_eos``, ``min_tokens``), all submitted at once: one long generation,
  which never reads the env's replies (the cost of multi-turn generation as such);
- ``raw_turns``: every turn's actual prompt (the full context at that turn) with that turn's token
  count, all at once: the same prompts, prefill and decode work without the turn-by-turn dependency
  (vLLM may run more of them at once than there are episodes in flight);
- ``raw_turns_capped`` (``--raw-turns-capped``): the same requests, turn by turn in order, with at most
  ``--concurrency`` in flight: the same work and parallelism as the env run, without waiting for envs.

Before the timed runs, one untimed env run warms the engine up for this workload (``--no-warmup-run``
skips it): on an H200 the first run on a fresh engine is up to half as fast as later ones.

The project's target (>= 0.8) is env-driven tokens/s over raw vLLM's for the same prompts and token counts:
the ``raw_turns`` baselines; ``raw`` is reported beside them. Where the rest goes is
reported from the env run: summed env-step and reset time; the hand-over per request between the
caller's event loop and the engine's (``VLLMPolicy`` runs vLLM's ``AsyncLLM`` on a loop of its own
thread: the time from ``agenerate`` to the start of ``engine.generate`` and from its end back, which
includes waiting for either loop to get to it; measured for the raw runs too); a timeline of
requests in flight (the time with no request in flight, when the GPU waits for envs; and the mean
number in flight, which falls in the tail as episodes finish at different turns), and the time Python's garbage collector ran
(a full collection walks every object of the process, vLLM's and torch's included, and stalls the
env loop and vLLM's output handling alike; ``--gc-freeze`` takes what exists after start-up out of
its way).

    python benchmarks/rollout_throughput.py --model /root/smollm2 --episodes 512 --out tp.json

Current figures and the commands behind them: docs/performance.md.

Each variant runs ``--repeats`` times, alternating; medians are printed. Needs a GPU and vLLM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from typing import Any, Iterator

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.cli.main import positive_int
from agent_gym.rollout.async_runner import run_episodes_concurrent
from agent_gym.rollout.policy import Generation
from agent_gym.rollout.vllm import VLLMPolicy  # (imports vllm only when an engine is built)


class InFlightTracker:
    """Wraps a policy's ``agenerate``: records every change of the number of requests in flight, and
    counts the requests and their summed time from call to return."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.in_flight = 0
        self.events: list[tuple[float, int]] = []
        self.requests = 0
        self.request_s = 0.0

    def reset(self) -> None:
        """Forget the events and counts (before each run)."""
        self.events.clear()
        self.requests, self.request_s = 0, 0.0

    async def agenerate(self, prompt: list[int], *, max_new_tokens: int, **overrides: Any) -> Generation:
        t0 = self._change(+1)
        try:
            return await self.policy.agenerate(prompt, max_new_tokens=max_new_tokens, **overrides)
        finally:
            self.request_s += self._change(-1) - t0
            self.requests += 1

    def _change(self, delta: int) -> float:
        self.in_flight += delta
        now = time.perf_counter()
        self.events.append((now, self.in_flight))
        return now

    def timeline(self, start: float, end: float) -> dict[str, float]:
        """Time with no request in flight, and the time-weighted mean number in flight, over [start, end]."""
        idle = weighted = 0.0
        level, t_prev = 0, start
        for t, n in self.events + [(end, 0)]:
            t = min(max(t, start), end)
            span = t - t_prev
            weighted += level * span
            if level == 0:
                idle += span
            level, t_prev = n, t
        wall = end - start
        return {"idle_s": idle, "mean_in_flight": weighted / wall if wall > 0 else 0.0}


class TimedVLLMPolicy(VLLMPolicy):
    """``VLLMPolicy`` that sums the time its requests spend on the engine's loop (``engine.generate`` to
    the final output, ``engine_side_s``): the rest of a request's time from the caller's side is the
    hand-over between the caller's thread and the engine's."""

    engine_side_s = 0.0

    async def _generate_on_loop(self, prompt: list[int], max_new_tokens: int, overrides: dict[str, Any]) -> Generation:
        t0 = time.perf_counter()
        try:
            return await super()._generate_on_loop(prompt, max_new_tokens, overrides)
        finally:
            self.engine_side_s += time.perf_counter() - t0


async def _raw(policy: Any, jobs: list[tuple[list[int], int]], limit: int | None = None) -> tuple[float, int]:
    """Ask for every job's exact token count; all at once, or at most ``limit`` in flight (in job order)."""
    gate = asyncio.Semaphore(limit) if limit else contextlib.nullcontext()

    async def one(prompt: list[int], n: int) -> Generation:
        async with gate:
            return await policy.agenerate(prompt, max_new_tokens=n, ignore_eos=True, min_tokens=n)

    started = time.perf_counter()
    outs = await asyncio.gather(*(one(p, n) for p, n in jobs if n > 0))
    wall = time.perf_counter() - started
    return wall, sum(len(g.ids) for g in outs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model folder vLLM loads (e.g. the converted SmolLM2)")
    parser.add_argument("--env", default="AgentR1/GSM8KTool-v0", help="env id (default: %(default)s)")
    parser.add_argument("--env-kwargs", default="{}", help='JSON env constructor arguments, e.g. \'{"split": "test"}\'')
    parser.add_argument("--episodes", type=int, default=512, help="episodes per env run (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=512, help="episodes in flight (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="token limit of one turn (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5, help="vLLM's GPU share (default: %(default)s)")
    parser.add_argument("--engine-kwargs", default="{}",
                        help='JSON AsyncEngineArgs fields for the engine, e.g. \'{"max_num_seqs": 128}\' (default: none)')
    parser.add_argument("--sampling-kwargs", default="{}",
                        help='JSON SamplingParams fields for every request, env and raw runs alike, e.g. \'{"flat_logprobs": false}\' (default: none)')
    parser.add_argument("--no-logprobs", action="store_true", help="requests ask for no log-probs (env and raw runs alike)")
    parser.add_argument("--repeats", type=positive_int, default=2, help="runs of each variant, alternating (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="episode i is reset with seed SEED+i (default: %(default)s)")
    gc_mode = parser.add_mutually_exclusive_group()
    gc_mode.add_argument("--gc-freeze", action="store_true",
                         help="gc.freeze() once the engine and envs are built, so that full collections skip them")
    gc_mode.add_argument("--gc-ab", action="store_true",
                         help="alternate repeats (A B B A ...) between the normal collector and gc.freeze() (gc.unfreeze() in between) "
                         "on the same engine, and report each half's medians: an A/B without a second engine start")
    parser.add_argument("--raw-turns-capped", action="store_true",
                        help="also run every turn's requests in turn order with at most --concurrency in flight (raw_turns_capped)")
    parser.add_argument("--no-warmup-run", action="store_true", help="skip the untimed env run before the timed ones")
    parser.add_argument("--gc-off", action="store_true",
                        help="gc.disable() during every timed run (env and raw alike) and gc.collect() after it, untimed: "
                        "what the collector's stalls cost (the collection's time is reported as gc_after_s)")
    parser.add_argument("--py-spy", metavar="PREFIX",
                        help="sample this process and its children (vLLM's engine core) with py-spy (on PATH) during each env run, 250 Hz, per thread; "
                        "raw collapsed stacks go to PREFIX-<repeat>.txt")
    parser.add_argument("--out", help="write all numbers as JSON here")
    args = parser.parse_args()
    if args.gc_off and args.gc_ab:
        parser.error("--gc-off and --gc-ab measure different things; pick one")

    t0 = time.perf_counter()
    policy = TimedVLLMPolicy(args.model, temperature=args.temperature, gpu_memory_utilization=args.gpu_memory_utilization,
                             engine_kwargs=json.loads(args.engine_kwargs), sampling_kwargs=json.loads(args.sampling_kwargs),
                             logprobs=not args.no_logprobs)
    engine_start_s = time.perf_counter() - t0
    tracked = InFlightTracker(policy)
    env_kwargs = json.loads(args.env_kwargs)
    t0 = time.perf_counter()
    envs = [gym.make(args.env, tokenizer=policy.tokenizer, **env_kwargs) for _ in range(min(args.concurrency, args.episodes))]
    env_build_s = time.perf_counter() - t0
    policy.generate([[1, 2, 3]] * 8, max_new_tokens=8)  # warm-up: first-request paths, CUDA graphs
    if args.gc_freeze:
        gc.collect()
        gc.freeze()

    def env_run(generator: Any, progress: bool) -> Any:
        return run_episodes_concurrent(envs, generator, episodes=args.episodes, base_seed=args.seed, concurrency=args.concurrency,
                                  max_new_tokens=args.max_new_tokens, progress=progress)

    def start_run() -> None:
        tracked.reset()
        policy.engine_side_s = 0.0

    def handover_ms() -> float:
        """Mean time per request of the last run spent between the caller's thread and the engine's loop."""
        return 1e3 * (tracked.request_s - policy.engine_side_s) / tracked.requests if tracked.requests else 0.0

    if not args.no_warmup_run:  # untimed: vLLM's first run of a workload is slower than the rest
        env_run(policy, progress=False)
    runs: dict[str, list[dict[str, Any]]] = {"env": [], "raw": [], "raw_turns": []}
    if args.raw_turns_capped:
        runs["raw_turns_capped"] = []
    for repeat in range(args.repeats):
        # --gc-ab runs A B B A A B B A ...: neither half always gets the first run after the warm-up
        frozen = args.gc_freeze or (args.gc_ab and repeat % 4 in (1, 2))
        if args.gc_ab:
            gc.collect()
            if frozen:
                gc.freeze()
            else:
                gc.unfreeze()
        start_run()
        sampler = _start_py_spy(f"{args.py_spy}-{repeat + 1}.txt") if args.py_spy else None
        try:
            with _collector_paused(args.gc_off) as after:
                result = env_run(tracked, progress=True)
        finally:
            if sampler is not None:
                _stop_py_spy(sampler)
        stats = result.stats
        end = tracked.events[-1][0] if tracked.events else 0.0
        timeline = tracked.timeline(end - stats["wall_s"], end)
        trajectories = result.trajectories
        turns = [len(t.steps) for t in trajectories]
        tool_calls = sum(int(t.steps[-1].info.get("tool_calls", 0)) for t in trajectories if t.steps)  # cumulative per episode
        runs["env"].append({
            "wall_s": stats["wall_s"], "tokens": result.generated_tokens,
            "tokens_per_s": result.generated_tokens / stats["wall_s"],
            "episodes": len(trajectories), "steps": stats["steps"], "mean_turns": statistics.fmean(turns),
            "max_turns": max(turns), "multi_turn_episodes": sum(t > 1 for t in turns), "tool_calls": tool_calls,
            "mean_reward": statistics.fmean(t.reward for t in trajectories),
            "env_step_s_summed": stats["env_step_s"], "step_latency_p50_ms": 1e3 * stats["step_latency_p50_s"],
            "step_latency_p95_ms": 1e3 * stats["step_latency_p95_s"], "reset_s_summed": stats["reset_s"],
            "no_request_in_flight_s": timeline["idle_s"], "mean_requests_in_flight": timeline["mean_in_flight"],
            "gc_s": stats["gc_s"], "gc_longest_ms": 1e3 * stats["gc_longest_s"], "gc_full_collections": stats["gc_full_collections"],
            "gc_frozen": frozen, "gc_off": args.gc_off, "gc_after_s": after.get("s", 0.0), "handover_ms": handover_ms(),
        })
        per_episode = [[([int(x) for x in s.prompt_ids], len(s.response_ids)) for s in t.steps] for t in trajectories]
        first = [(jobs[0][0], sum(n for _, n in jobs)) for jobs in per_episode]
        every = [job for jobs in per_episode for job in jobs]
        turns = sorted(((turn, job) for jobs in per_episode for turn, job in enumerate(jobs)), key=lambda x: x[0])
        by_turn = [job for _, job in turns]  # (a stable sort: episode order within a turn)
        variants = [("raw", first, None), ("raw_turns", every, None)]
        if args.raw_turns_capped:
            variants.append(("raw_turns_capped", by_turn, args.concurrency))
        for name, jobs, limit in variants:
            start_run()
            with _collector_paused(args.gc_off) as after:
                wall, tokens = asyncio.run(_raw(tracked, jobs, limit))
            runs[name].append({"wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall, "requests": len(jobs), "gc_frozen": frozen,
                               "gc_after_s": after.get("s", 0.0), "handover_ms": handover_ms()})
        print(f"repeat {repeat + 1}{' (gc frozen)' if frozen else ''}: "
              + ", ".join(f"{k} {v[-1]['tokens_per_s']:,.0f} tok/s" for k, v in runs.items()), flush=True)
    policy.close()

    groups = {"all runs": runs}
    if args.gc_ab:
        groups = {f"gc {label}": {k: [r for r in v if r["gc_frozen"] == frozen] for k, v in runs.items()}
                  for label, frozen in (("normal", False), ("frozen", True))}
    print(f"\n{args.env}, {args.episodes} episodes, {args.concurrency} in flight, max {args.max_new_tokens} tokens/turn, "
          f"temperature {args.temperature}; engine kwargs {args.engine_kwargs}; sampling kwargs {args.sampling_kwargs}"
          f"{'; no log-probs' if args.no_logprobs else ''}{'; collector off during runs' if args.gc_off else ''}; engine start {engine_start_s:.1f} s, envs built {env_build_s:.1f} s")
    summary = {label: _report(group, args.concurrency, label) for label, group in groups.items() if group["env"]}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "engine_start_s": engine_start_s, "env_build_s": env_build_s,
                       "runs": runs, **(summary["all runs"] if not args.gc_ab else {"groups": summary})}, f, indent=2)


def _report(runs: dict[str, list[dict[str, Any]]], concurrency: int, label: str) -> dict[str, Any]:
    """Print one group's medians and ratios (and where the env run's time went); return them."""
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in runs.items()}
    baselines = [name for name in runs if name != "env"]
    ratios = {f"ratio_env_{name}": med["env"]["tokens_per_s"] / med[name]["tokens_per_s"] for name in baselines}
    e = med["env"]
    print(f"{label} (medians of {len(runs['env'])}):")
    print(f"  env-driven : {e['tokens_per_s']:>9,.0f} tok/s  ({e['tokens']:,.0f} tokens in {e['wall_s']:.2f} s; "
          f"{e['mean_turns']:.2f} turns/episode, max {e['max_turns']:.0f}, {e['multi_turn_episodes']:.0f} multi-turn, "
          f"{e['tool_calls']:.0f} tool calls, reward {e['mean_reward']:.3f})")
    for name in baselines:
        r = med[name]
        print(f"  {name:<11}: {r['tokens_per_s']:>9,.0f} tok/s  ({r['tokens']:,.0f} tokens in {r['wall_s']:.2f} s, {r['requests']:.0f} requests; "
              f"hand-over {r['handover_ms']:.2f} ms per request)")
    print("  ratio " + "; ".join(f"env/{name} = {ratios[f'ratio_env_{name}']:.2f}" + (" (target >= 0.8)" if name.startswith("raw_turns") else "")
                                 for name in baselines))
    print(f"  where the env run's time goes: env steps {e['env_step_s_summed']:.2f} s summed over episodes "
          f"(p50 {e['step_latency_p50_ms']:.2f} ms, p95 {e['step_latency_p95_ms']:.2f} ms per step), resets "
          f"{e['reset_s_summed']:.2f} s summed; hand-over between threads {e['handover_ms']:.2f} ms per request; no request in flight for {e['no_request_in_flight_s']:.2f} s of "
          f"{e['wall_s']:.2f} s; mean requests in flight {e['mean_requests_in_flight']:.0f} of {concurrency}; "
          f"garbage collector {e['gc_s']:.2f} s (full collections per run: "
          f"{', '.join(str(r['gc_full_collections']) for r in runs['env'])}; longest "
          f"{max(r['gc_longest_ms'] for r in runs['env']):.0f} ms{', after gc.freeze()' if e['gc_frozen'] else ''})"
          + (f"; collector off, one collection after the run took {e['gc_after_s']:.2f} s" if e["gc_off"] else ""))
    return {"medians": med, **ratios}


@contextlib.contextmanager
def _collector_paused(paused: bool) -> Iterator[dict[str, float]]:
    """With ``paused``: the cyclic garbage collector off inside the block, then one full collection,
    whose duration goes in the yielded dict (``"s"``). Without: nothing changes."""
    times: dict[str, float] = {}
    if not paused:
        yield times
        return
    gc.disable()
    try:
        yield times
    finally:
        gc.enable()
        t0 = time.perf_counter()
        gc.collect()
        times["s"] = time.perf_counter() - t0


def _start_py_spy(path: str) -> subprocess.Popen | None:
    """py-spy sampling this process (all threads, each on its own) until :func:`_stop_py_spy`; ``None``
    (with the reason printed) if it cannot run here: the benchmark itself goes on without it."""
    if shutil.which("py-spy") is None:
        print("WARNING: --py-spy: py-spy is not on PATH (pip install py-spy); not profiling")
        return None
    cmd = ["py-spy", "record", "--pid", str(os.getpid()), "--rate", "250", "--threads", "--subprocesses", "--nonblocking",
           "--format", "raw", "--output", path]
    log = open(path + ".log", "w")  # (a file, not a pipe: nobody reads py-spy's stderr while it runs)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    time.sleep(0.5)  # (it attaches in a few ms; a run is seconds long)
    if proc.poll() is not None:
        with open(path + ".log") as f:
            print(f"WARNING: --py-spy: py-spy exited at once ({proc.returncode}): {f.read().strip()}; not profiling")
        return None
    return proc


def _stop_py_spy(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        print("py-spy did not stop within 30 s; killed (its output may be missing)")


if __name__ == "__main__":
    main()
