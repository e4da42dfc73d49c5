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

``--workers N`` splits the episodes over N processes (each with its own event loop, envs and
sandbox server; started and warmed up before any timing, released together), so that a machine
with many cores can be used: one Python process steps its envs on one core. By default there are
three processes per two usable cores, each server with a worker pre-forked for every episode of its
process (``--prefork``): on a 32-core host 48 processes do best, 32 next, 16 and 24 worse (fewer
episodes per process shorten the chain of resets and first steps each process runs before its last
episode's first call; docs/performance.md).

    python benchmarks/sandbox_throughput.py                     # 512 episodes, stateful sessions, 3 processes per 2 cores
    python benchmarks/sandbox_throughput.py --stateless --episodes 256
    python benchmarks/sandbox_throughput.py --workers 1         # every episode in one process
    python benchmarks/sandbox_throughput.py --gc-freeze         # without full GC passes over the imports

Where the time goes (the breakdown table, per variant, for its median run; summed over workers):

- ``main CPU``: CPU time of the process(es) running the episodes (all threads), split into
  ``resets`` (env.reset: task, prompt rendering and tokenization), ``env steps`` (the synchronous
  part of env.astep: decoding and parsing the action, appending to the chat context, the
  observation), ``policy`` (the scripted policy's generate calls), ``sandbox submit`` (the client's
  synchronous part of a call) and ``runner+rest`` (what is left: the async runner and batcher, the
  event loop, trajectory records, the sandbox client's I/O threads). The four named parts are
  wall-clock sums of synchronous sections, so on a loaded machine they include time spent preempted;
  ``runner+rest`` is the remainder and can come out low (even negative) then. ``(gc)`` is the time
  Python's cyclic garbage collector ran during the run (inside whichever part was running; a full
  collection walks every object of the process, transformers' and torch's included: about 0.35 s on
  a 2-core VM, every other run or so; ``--gc-freeze`` calls ``gc.freeze()`` once the envs are built,
  which an application can do too);
- ``server CPU`` / ``worker CPU``: the sandbox server process (routing calls, forking workers) and
  the worker processes it forked (their start-up, the code, their exit);
- ``CPU/wall``: all of the above over the wall time: how many cores the run kept busy. The wall
  time cannot be below (total CPU) / (cores available).

``call overhead by stage`` splits the sleeping run's per-call overhead (``SandboxResult.stages``):
``to_server`` (the client submitted -> the server read the request), ``queued`` (-> handed to a worker),
``to_worker`` (-> the worker started the code), ``from_worker`` (the code ended -> the server had the
result), ``to_client`` (-> the client's reader thread delivered it; this includes waiting for the GIL
while the event loop's thread runs env code), for a worker's first call and for later calls of a session.

Env construction is excluded from every wall time (reported separately); resets are included (they
happen inside the runner); closing the run's sandbox sessions is not (it is done after each run and
its CPU counted). Each variant runs ``--repeats`` times, alternating, on the same envs but
on new tasks each time (so no cache sees the same prompt twice), and the medians are shown. The
numbers depend on the machine's cores and load; both are printed. Nothing is asserted about them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import resource
import statistics
import time
from typing import Any

import numpy as np

VARIANTS = ("sleeping code", "code without sleep", "calculator, no sandbox")


class TurnPolicy:
    """Scripted actions at (almost) no cost: the replies are encoded once, and the turn is read off the
    prompt as the number of end-of-turn tokens in it (system + user, then assistant + tool per turn)."""

    def __init__(self, tokenizer, replies: list[str]):
        from agent_gym.chat.template import ChatTemplate

        template = ChatTemplate(tokenizer)
        eot = list(template.end_of_turn_ids)
        self.eot = eot[-1]
        self.replies = [template.encode(r) + eot for r in replies]

    def generate(self, prompts, *, max_new_tokens):
        from agent_gym.rollout import Generation

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
    from agent_gym.sandbox import Sandbox

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


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(own CPU, CPU of reaped children) of a process, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Timer:
    """Accumulates the wall time spent inside wrapped synchronous callables."""

    def __init__(self):
        self.total = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t0

        return timed


class Player:
    """One process's share of the episodes: its envs (built once) and the variants it can run."""

    def __init__(self, args: argparse.Namespace, episodes: int, first_seed: int):
        import gymnasium as gym

        import agent_gym  # noqa: F401  (registers the envs)
        from agent_gym.models import load_tokenizer

        self.args, self.n, self.first_seed = args, episodes, first_seed
        self.tokenizer = load_tokenizer(args.tokenizer)
        turns = args.turns
        t0 = time.perf_counter()
        sandbox = {"prefork": args.prefork, "prefork_refill": args.prefork_refill}
        self.python_envs = [
            gym.make("AgentR1/GSM8KPython-v0", tokenizer=self.tokenizer, split="test", max_turns=turns + 1, stateful=not args.stateless, sandbox=sandbox)
            for _ in range(episodes)
        ]
        self.build = {"python": time.perf_counter() - t0}
        self.calc_envs: list = []
        if not args.no_baselines:
            t0 = time.perf_counter()
            self.calc_envs = [gym.make("AgentR1/GSM8KTool-v0", tokenizer=self.tokenizer, split="test", max_turns=turns + 1) for _ in range(episodes)]
            self.build["calculator"] = time.perf_counter() - t0
        self.sandbox = self.python_envs[0].unwrapped.python.sandbox if self.python_envs else None
        self.timers = {name: _Timer() for name in ("env steps", "sandbox submit")}
        for env in self.python_envs + self.calc_envs:
            u = env.unwrapped
            u._begin_step = self.timers["env steps"].wrap(u._begin_step)
            u._finish_step = self.timers["env steps"].wrap(u._finish_step)
        if self.sandbox is not None:
            self.sandbox.submit = self.timers["sandbox submit"].wrap(self.sandbox.submit)
        if args.gc_freeze:  # move everything built so far out of the collector's way (see --help)
            gc.collect()
            gc.freeze()
        sleep = args.sleep_ms / 1000
        self.codes = {
            "sleeping code": f"import time\ntime.sleep({sleep})\nprint({{turn}})",
            "code without sleep": "print({turn})",
            "calculator, no sandbox": None,
        }

    def _settle_sandbox(self) -> None:
        """Close this run's sessions and wait until the server has reaped their workers (so that
        their CPU time is counted for this run) and refilled its pool of pre-forked workers (so that
        the next run starts with a full pool, as a rollout batch after a trainer update would)."""
        for env in self.python_envs:
            env.unwrapped.python.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            s = self.sandbox.stats()
            if s["sessions"] == 0 and s["busy"] == 0 and s["workers"] <= s["idle"] and s["idle"] >= self.args.prefork:
                return
            time.sleep(0.01)

    def run(self, name: str, repeat: int, barrier: Any = None) -> dict[str, Any]:
        from agent_gym.rollout.async_runner import arun_episodes

        args, n = self.args, self.n
        code = self.codes[name]
        envs = self.calc_envs if code is None else self.python_envs
        policy = TurnPolicy(self.tokenizer, [tool_call(t, code) for t in range(1, args.turns + 1)] + ["#### 18"])
        for e in self.python_envs:
            e.unwrapped.python.results = []
        for t in self.timers.values():
            t.total = 0.0
        policy.generate = (policy_timer := _Timer()).wrap(policy.generate)
        sandbox = code is not None and self.sandbox is not None
        if sandbox:
            self._settle_sandbox()
            server0 = _proc_cpu(self.sandbox.server_pid)
            spawned0 = self.sandbox.stats()["spawned"]
        concurrency = args.concurrency or n
        box: dict[str, Any] = {}

        async def main() -> None:  # (the result goes in a box: see run_episodes_concurrent)
            box["result"] = await arun_episodes(
                envs, policy, episodes=n, base_seed=self.first_seed + (repeat + 1) * args.episodes, concurrency=concurrency,
                max_new_tokens=512, generate_in_thread=False, max_batch_size=concurrency,
            )

        if barrier is not None:
            barrier.wait()
        cpu0, t_start = _self_cpu(), time.monotonic()
        try:
            asyncio.run(main())
        finally:
            t_end, cpu1 = time.monotonic(), _self_cpu()
        result = box["result"]
        forks = self.sandbox.stats()["spawned"] - spawned0 if sandbox else 0  # workers forked inside the timed window
        sandbox_results = [r for e in self.python_envs for r in e.unwrapped.python.results] if sandbox else []
        server_cpu = worker_cpu = 0.0
        if sandbox:
            self._settle_sandbox()
            server1 = _proc_cpu(self.sandbox.server_pid)
            server_cpu, worker_cpu = server1[0] - server0[0], server1[1] - server0[1]
        ok = all(t.num_turns == args.turns + 1 for t in result.trajectories) and all(r.ok for r in sandbox_results)
        s = result.stats
        return {
            "t_start": t_start, "t_end": t_end, "wall": s["wall_s"], "ok": ok,
            "main_cpu": cpu1 - cpu0, "resets": s["reset_s"], "env steps": self.timers["env steps"].total,
            "policy": policy_timer.total, "sandbox submit": self.timers["sandbox submit"].total if sandbox else 0.0,
            "server_cpu": server_cpu, "worker_cpu": worker_cpu, "gc": result.stats["gc_s"],
            "latency": [r.latency_s for r in sandbox_results], "overhead": [r.overhead_s for r in sandbox_results],
            # a session's first call is the first its (pre-forked) worker serves: it says how long the worker took to start
            "stages": {"first": [r.stages for r in sandbox_results if r.stages and r.worker_setup_s is not None],
                       "later": [r.stages for r in sandbox_results if r.stages and r.worker_setup_s is None]},
            "generate_calls": s["generate_calls"], "mean_batch": s["mean_batch_size"], "step_p50": s["step_latency_p50_s"],
            "max_in_flight": s["max_in_flight"], "forks": forks,
        }

    def close(self) -> None:
        for e in self.python_envs + self.calc_envs:
            e.close()


def _child(conn: Any, args: argparse.Namespace, episodes: int, first_seed: int, barrier: Any) -> None:
    player = Player(args, episodes, first_seed)
    conn.send(player.build)
    while True:
        msg = conn.recv()
        if msg is None:
            break
        name, repeat = msg
        conn.send(player.run(name, repeat, barrier))
    player.close()


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's numbers over all worker processes: wall from the first start to the last end."""
    merged: dict[str, Any] = {"wall": max(p["t_end"] for p in parts) - min(p["t_start"] for p in parts), "ok": all(p["ok"] for p in parts)}
    for key in ("main_cpu", "resets", "env steps", "policy", "sandbox submit", "gc", "server_cpu", "worker_cpu", "generate_calls", "max_in_flight", "forks"):
        merged[key] = sum(p[key] for p in parts)
    merged["latency"] = [x for p in parts for x in p["latency"]]
    merged["overhead"] = [x for p in parts for x in p["overhead"]]
    merged["stages"] = {k: [x for p in parts for x in p["stages"][k]] for k in ("first", "later")}
    merged["mean_batch"] = statistics.fmean(p["mean_batch"] for p in parts)
    merged["step_p50"] = statistics.median(p["step_p50"] for p in parts)
    return merged


def main() -> None:
    from agent_gym.sandbox import PREFORK_REFILL_MODES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=512, help="episodes per run, over all workers; all in flight at once unless --concurrency (default 512)")
    parser.add_argument("--workers", type=int, default=0,
                        help="processes to split the episodes over, each with its own event loop and sandbox server "
                        "(default 0: three per two usable cores, at most one per episode)")
    parser.add_argument("--concurrency", type=int, default=0, help="episodes in flight per worker process (default: all of its episodes)")
    parser.add_argument("--turns", type=int, default=3, help="tool turns per episode before the answer (default 3)")
    parser.add_argument("--sleep-ms", type=float, default=50.0, help="how long each tool call's code sleeps (default 50)")
    parser.add_argument("--stateless", action="store_true", help="a fresh process per call instead of one session per episode")
    parser.add_argument("--prefork", type=int, default=0,
                        help="idle sandbox workers each server keeps forked ahead (default 0: as many as its process has episodes)")
    parser.add_argument("--prefork-refill", choices=PREFORK_REFILL_MODES, default="quiet",
                        help="when a server replaces pre-forked workers that calls took: once no call has run for 50 ms "
                        "(quiet, the sandbox's default) or also inside the burst (eager)")
    parser.add_argument("--serial-calls", type=int, default=200, help="calls for the per-call cost (default 200; 0 skips)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the no-sleep and calculator runs")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant, alternating; medians are shown (default 3)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer path/name (default: the embedded SmolLM2)")
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() after building the envs, so that full collections skip the imported libraries and the envs")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if args.workers == 0:
        args.workers = max(1, min(-(-3 * cores // 2), args.episodes))
    if args.workers < 1 or args.episodes < args.workers:
        parser.error("need 1 <= --workers <= --episodes (or 0: three per two cores)")
    if args.prefork == 0:
        args.prefork = -(-args.episodes // args.workers)  # every session's worker forked before the clock starts
    if args.prefork < 0:
        parser.error("--prefork must be >= 0")

    print(f"machine: {os.cpu_count()} cores ({cores} usable), load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.serial_calls:
        call_costs(args.serial_calls)

    n, turns, sleep, workers = args.episodes, args.turns, args.sleep_ms / 1000, args.workers
    mode = "stateless (a process per call)" if args.stateless else "stateful (a session per episode)"
    ideal = turns * sleep
    shares = [n // workers + (1 if k < n % workers else 0) for k in range(workers)]
    firsts = [sum(shares[:k]) for k in range(workers)]
    where = "one process" if workers == 1 else f"{workers} worker processes ({min(shares)}-{max(shares)} episodes each)"
    where += f"; at most {args.concurrency} in flight per process" if args.concurrency else ""
    where += "; gc.freeze() after construction" if args.gc_freeze else ""
    print(f"\n== {n} GSM8KPython episodes in flight, {turns} tool turns sleeping {args.sleep_ms:g} ms, then an answer; {mode}; {where} ==")
    variants = list(VARIANTS) if not args.no_baselines else [VARIANTS[0]]
    if workers == 1:
        player = Player(args, n, 0)
        build = player.build

        def run_all(name: str, repeat: int) -> dict[str, Any]:
            return _merge([player.run(name, repeat)])
    else:
        ctx = multiprocessing.get_context("spawn")  # (no tokenizer threads or sandbox sockets are inherited)
        barrier = ctx.Barrier(workers)
        conns, procs = [], []
        for k in range(workers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_child, args=(child, args, shares[k], firsts[k], barrier), daemon=True)
            p.start()
            conns.append(parent)
            procs.append(p)
        builds = [c.recv() for c in conns]
        build = {k: max(b[k] for b in builds) for k in builds[0]}

        def run_all(name: str, repeat: int) -> dict[str, Any]:
            for c in conns:
                c.send((name, repeat))
            return _merge([c.recv() for c in conns])

    print("env construction (not timed below): " + ", ".join(f"{k} {v:.1f} s" for k, v in build.items()))
    for name in variants:  # warm-up (first sessions, first prompts, lazy imports): not counted
        run_all(name, -1)
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for rep in range(args.repeats):  # the variants alternate, so that load changes hit them alike
        for name in variants:
            runs[name].append(run_all(name, rep))
    if workers > 1:
        for c in conns:
            c.send(None)
        for p in procs:
            p.join(timeout=60)
    if not all(r["ok"] for rs in runs.values() for r in rs):
        print("WARNING: some episode did not make all its turns, or some sandbox call failed")

    print(f"median of {args.repeats} runs each (all runs: wall in brackets)")
    print(f"{'run':24s} {'wall':>8s} {'x ideal':>8s} {'call p50':>11s} {'call p95':>11s} {'overhead p50':>13s}  all")
    walls, medians = {}, {}
    for name, rs in runs.items():
        walls[name] = statistics.median(r["wall"] for r in rs)
        r = medians[name] = min(rs, key=lambda r: abs(r["wall"] - walls[name]))  # the median run
        lat = f"{ms(statistics.median(r['latency']))} {ms(pct(r['latency'], 0.95))}" if r["latency"] else f"{'-':>11s} {'-':>11s}"
        ov = ms(statistics.median(r["overhead"])) if r["overhead"] else f"{'-':>11s}"
        every = " ".join(f"{x['wall']:.3f}" for x in rs)  # (3 decimals: 1.5x of 150 ms is 0.225 s)
        print(f"{name:24s} {walls[name]:7.3f}s {walls[name] / ideal:7.2f}x {lat} {ov:>13s}  [{every}]")
    print(f"ideal (turns x sleep, episodes concurrent): {ideal * 1e3:.0f} ms")

    print(f"\nwhere the time goes (seconds, median run, summed over {workers} process{'es' if workers > 1 else ''}; see --help)")
    parts = ("resets", "env steps", "policy", "sandbox submit")
    print(f"{'run':24s} {'main CPU':>9s} " + " ".join(f"{p:>9s}" for p in ("resets", "env steps", "policy", "submit", "runner+", "(gc)")) + f" {'server':>8s} {'workers':>8s} {'CPU/wall':>9s}")
    for name, r in medians.items():
        rest = r["main_cpu"] - sum(r[p] for p in parts)
        total = r["main_cpu"] + r["server_cpu"] + r["worker_cpu"]
        print(
            f"{name:24s} {r['main_cpu']:9.2f} " + " ".join(f"{r[p]:9.2f}" for p in parts) + f" {rest:9.2f} {r['gc']:9.2f}"
            f" {r['server_cpu']:8.2f} {r['worker_cpu']:8.2f} {total / r['wall']:8.1f}x"
        )
    r = medians[VARIANTS[0]]
    total = r["main_cpu"] + r["server_cpu"] + r["worker_cpu"]
    print(
        f"per episode ({VARIANTS[0]}): {1e3 * r['main_cpu'] / n:.2f} ms main CPU, {1e3 * r['server_cpu'] / n:.2f} ms server, "
        f"{1e3 * r['worker_cpu'] / n:.2f} ms workers; {total:.2f} CPU-s in all = at least {total / cores:.2f} s of wall on {cores} idle cores"
    )
    if not args.no_baselines:
        added = walls["sleeping code"] - walls["code without sleep"]
        print(f"sleep cost: wall(sleeping) - wall(no sleep) = {added * 1e3:.0f} ms = {added / ideal:.2f}x ideal")
        sandbox = walls["code without sleep"] - walls["calculator, no sandbox"]
        print(f"sandbox cost over the calculator env: {sandbox * 1e3:.0f} ms for {n * turns} calls = {sandbox / (n * turns) * 1e3:.2f} ms per call")
    print(
        f"runner: {r['generate_calls']} generate calls (mean batch {r['mean_batch']:.0f}), env step p50 "
        f"{r['step_p50'] * 1e3:.0f} ms, max in flight {r['max_in_flight']}"
    )
    print(
        f"sandbox workers forked inside the timed run ({VARIANTS[0]}): {r['forks']} for {n} episodes "
        f"(prefork {args.prefork} per server, refill {args.prefork_refill})"
    )
    for which, calls in r["stages"].items():
        if calls:
            parts = ", ".join(f"{k} {ms(statistics.median(c[k] for c in calls)).strip()}/{ms(pct([c[k] for c in calls], 0.95)).strip()}"
                              for k in calls[0])
            label = "a worker's first call" if which == "first" else "later calls of a session"
            print(f"call overhead by stage ({VARIANTS[0]}, {label}, {len(calls)} calls; p50/p95): {parts}")
    if workers == 1:
        player.close()


if __name__ == "__main__":
    main()
