#!/usr/bin/env python3
"""Sandbox throughput: many GSM8KPython episodes in flight whose tool calls wait, against the ideal.

Part 1, the cost of one sandboxed call on an otherwise idle sandbox (``--serial-calls`` calls of
``pass``, one after another):

- ``warm``: a stateless call served by a pre-forked worker: submit -> result, minus the code's own
  run time (the pipe round trip plus the worker's work around the code);
- ``cold``: the same with no pre-forked worker (``prefork=0``): the worker is forked for the call, so
  this is process start to result;
- ``session``: a call in a stateful session (the worker already exists);
- ``worker start``: a worker's own fork-to-ready time (locking itself down), as it reports it.

Part 2, ``--episodes`` episodes of ``AgentR1/GSM8KPython-v0`` played concurrently by
:func:`agent_gym.rollout.async_runner.arun_episodes` with a scripted policy: ``--turns`` tool turns
whose code sleeps ``--sleep-ms``, then a final answer. Since the episodes run concurrently, the
ideal wall time is ``turns x sleep`` (150 ms by default). The same run is repeated with code that
does not sleep (the CPU floor of env steps + sandbox calls on this machine) and, as a baseline with
no sandbox at all, with ``AgentR1/GSM8KTool-v0``'s calculator; ``sleep cost`` = wall(sleeping) -
wall(not sleeping) is the time the sleeps added, which concurrency should keep near the ideal.

    python benchmarks/sandbox_throughput.py                     # 512 episodes, stateful sessions
    python benchmarks/sandbox_throughput.py --stateless --episodes 256

Env construction is excluded from every wall time (reported separately); resets are included (they
happen inside the runner; their summed time is printed). Each variant runs ``--repeats`` times,
alternating, on the same envs, and the medians are shown. The scripted policy costs next to nothing
(pre-encoded replies). The numbers depend on the machine's cores and load; both are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import gymnasium as gym
import numpy as np

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.chat.template import ChatTemplate
from agent_gym.models import load_tokenizer
from agent_gym.rollout import Generation
from agent_gym.rollout.async_runner import arun_episodes
from agent_gym.sandbox import Sandbox


class TurnPolicy:
    """Scripted actions at (almost) no cost: the replies are encoded once, and the turn is read off the
    prompt as the number of end-of-turn tokens in it (system + user, then assistant + tool per turn)."""

    def __init__(self, tokenizer, replies: list[str]):
        template = ChatTemplate(tokenizer)
        eot = list(template.end_of_turn_ids)
        self.eot = eot[-1]
        self.replies = [template.encode(r) + eot for r in replies]

    def generate(self, prompts, *, max_new_tokens):
        out = []
        for prompt in prompts:
            turn = (int(np.count_nonzero(np.asarray(prompt) == self.eot)) - 2) // 2
            out.append(Generation(ids=self.replies[min(turn, len(self.replies) - 1)]))
        return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def ms(x: float) -> str:
    return f"{1e3 * x:8.2f} ms"


def call_costs(n: int) -> None:
    print(f"\n== one call, idle sandbox ({n} calls of `pass`, one after another) ==")
    print(f"{'':14s} {'p50':>11s} {'p95':>11s}")
    rows = {}
    with Sandbox(prefork=4) as sb:
        for _ in range(20):
            sb.run("pass")
        results = []
        for _ in range(n):
            results.append(sb.run("pass"))
            time.sleep(0.002)  # let the server re-fill its pool, as between real tool calls
        rows["warm"] = [r.overhead_s for r in results]
        rows["worker start"] = [r.worker_setup_s for r in results if r.worker_setup_s is not None]
        with sb.session() as session:
            session.run("pass")
            rows["session"] = [session.run("pass").overhead_s for _ in range(n)]
        isolation = sb.isolation
    with Sandbox(prefork=0) as sb:
        sb.run("pass")
        rows["cold"] = [sb.run("pass").overhead_s for _ in range(max(20, n // 4))]
    for name in ("warm", "cold", "session", "worker start"):
        print(f"{name:14s} {ms(statistics.median(rows[name]))} {ms(pct(rows[name], 0.95))}")
    layers = [k for k in ("setuid", "chroot", "netns", "seccomp", "audit_hook") if isolation.get(k)]
    print(f"isolation in force: {', '.join(layers)}")


def tool_call(turn: int, code: str | None) -> str:
    if code is None:
        call = {"name": "calculate", "arguments": {"expression": f"{turn} + 1"}}
    else:
        call = {"name": "python", "arguments": {"code": code.format(turn=turn)}}
    return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"


def episodes_run(envs: list, n: int, turns: int, code: str | None, tokenizer) -> dict:
    policy = TurnPolicy(tokenizer, [tool_call(t, code) for t in range(1, turns + 1)] + ["#### 18"])
    for e in envs:
        if hasattr(e.unwrapped, "python"):
            e.unwrapped.python.results = []

    async def main():
        return await arun_episodes(envs, policy, episodes=n, concurrency=n, max_new_tokens=512, generate_in_thread=False, max_batch_size=n)

    result = asyncio.run(main())
    sandbox_results = [r for e in envs if hasattr(e.unwrapped, "python") for r in e.unwrapped.python.results]
    assert all(t.num_turns == turns + 1 for t in result.trajectories), "every episode should make all its turns"
    assert all(r.ok for r in sandbox_results), {r.kind for r in sandbox_results}
    return {
        "wall": result.stats["wall_s"],
        "overhead": [r.overhead_s for r in sandbox_results],
        "latency": [r.latency_s for r in sandbox_results],
        "stats": result.stats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=512, help="episodes in flight at once (default 512)")
    parser.add_argument("--turns", type=int, default=3, help="tool turns per episode before the answer (default 3)")
    parser.add_argument("--sleep-ms", type=float, default=50.0, help="how long each tool call's code sleeps (default 50)")
    parser.add_argument("--stateless", action="store_true", help="a fresh process per call instead of one session per episode")
    parser.add_argument("--serial-calls", type=int, default=200, help="calls for the per-call cost (default 200; 0 skips)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the no-sleep and calculator runs")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant, alternating; medians are shown (default 3)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer path/name (default: the embedded SmolLM2)")
    args = parser.parse_args()

    print(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.serial_calls:
        call_costs(args.serial_calls)

    tokenizer = load_tokenizer(args.tokenizer)
    n, turns, sleep = args.episodes, args.turns, args.sleep_ms / 1000
    mode = "stateless (a process per call)" if args.stateless else "stateful (a session per episode)"
    ideal = turns * sleep
    print(f"\n== {n} GSM8KPython episodes in flight, {turns} tool turns sleeping {args.sleep_ms:g} ms, then an answer; {mode} ==")
    t0 = time.perf_counter()
    python_envs = [
        gym.make("AgentR1/GSM8KPython-v0", tokenizer=tokenizer, split="test", max_turns=turns + 1, stateful=not args.stateless, sandbox={"prefork": 16})
        for _ in range(n)
    ]
    build = {"python": time.perf_counter() - t0}
    variants = {"sleeping code": (python_envs, f"import time\ntime.sleep({sleep})\nprint({{turn}})")}
    if not args.no_baselines:
        t0 = time.perf_counter()
        calc_envs = [gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_turns=turns + 1) for _ in range(n)]
        build["calculator"] = time.perf_counter() - t0
        variants["code without sleep"] = (python_envs, "print({turn})")
        variants["calculator, no sandbox"] = (calc_envs, None)
    print("env construction (not timed below): " + ", ".join(f"{k} {v:.1f} s" for k, v in build.items()))
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(args.repeats):  # the variants alternate, so that load changes hit them alike
        for name, (envs, code) in variants.items():
            runs[name].append(episodes_run(envs, n, turns, code, tokenizer))
    print(f"median of {args.repeats} runs each (all runs: wall in brackets)")
    print(f"{'run':24s} {'wall':>8s} {'x ideal':>8s} {'resets':>7s} {'call p50':>11s} {'call p95':>11s} {'overhead p50':>13s}  all")
    walls = {}
    for name, rs in runs.items():
        walls[name] = statistics.median(r["wall"] for r in rs)
        r = min(rs, key=lambda r: abs(r["wall"] - walls[name]))  # the median run
        lat = f"{ms(statistics.median(r['latency']))} {ms(pct(r['latency'], 0.95))}" if r["latency"] else f"{'-':>11s} {'-':>11s}"
        ov = ms(statistics.median(r["overhead"])) if r["overhead"] else f"{'-':>11s}"
        every = " ".join(f"{x['wall']:.2f}" for x in rs)
        print(f"{name:24s} {walls[name]:7.2f}s {walls[name] / ideal:7.1f}x {r['stats']['reset_s']:6.2f}s {lat} {ov:>13s}  [{every}]")
    print(f"ideal (turns x sleep, episodes concurrent): {ideal * 1e3:.0f} ms")
    if not args.no_baselines:
        added = walls["sleeping code"] - walls["code without sleep"]
        print(f"sleep cost: wall(sleeping) - wall(no sleep) = {added * 1e3:.0f} ms = {added / ideal:.2f}x ideal")
        sandbox = walls["code without sleep"] - walls["calculator, no sandbox"]
        print(f"sandbox cost over the calculator env: {sandbox * 1e3:.0f} ms for {n * turns} calls = {sandbox / (n * turns) * 1e3:.2f} ms per call")
    s = runs["sleeping code"][0]["stats"]
    print(
        f"runner: {s['generate_calls']} generate calls (mean batch {s['mean_batch_size']:.0f}), env step p50 "
        f"{s['step_latency_p50_s'] * 1e3:.0f} ms, max in flight {s['max_in_flight']}"
    )
    for e in python_envs + (calc_envs if not args.no_baselines else []):
        e.close()


if __name__ == "__main__":
    main()
