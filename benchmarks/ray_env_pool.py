#!/usr/bin/env python3
"""RayEnvPool throughput: GSM8KPython episodes stepped in 1, 2, ... Ray env workers, against the ideal.

Each episode of ``AgentR1/GSM8KPython-v0`` is ``--turns`` sandboxed python calls (``print(turn + 1)``,
code that sleeps ``--sleep-ms``, or code that keeps a core busy for ``--busy-ms``, as real code does) and then an answer, played by a scripted policy that costs
(almost) nothing, so the run measures the env side: resets, env steps, the sandbox, and for the pool
the Ray round trips. The episodes are driven from this process by
:func:`agent_gym.rollout.async_runner.arun_episodes` with ``pool.make_env`` as the env factory and
``--per-worker`` episodes in flight per worker (the pool's ``envs_per_worker``).

For each ``--workers`` count: a pool is started and warmed up (every env slot plays one episode:
the envs, their sandbox servers and the Ray workers exist before the clock starts), then
``--episodes`` episodes are timed ``--repeats`` times (median shown). ``ideal`` is the 1-worker rate
times the worker count (linear scaling); ``in process`` is the same episodes without Ray, one process,
for the cost of the round trips. Nothing is asserted: the numbers depend on the machine's cores and
load, both printed.

    python benchmarks/ray_env_pool.py                                   # 1 vs 2 workers (a 2-core machine)
    python benchmarks/ray_env_pool.py --workers 1 4 12 --episodes 1024  # a bigger machine
    RAY_ADDRESS=auto python benchmarks/ray_env_pool.py --workers 8 32   # a running cluster
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

ENV_ID = "AgentR1/GSM8KPython-v0"


class TurnPolicy:
    """Scripted replies at (almost) no cost: encoded once; the turn is read off the prompt as the number
    of end-of-turn ids in it (system + user, then assistant + tool per turn)."""

    def __init__(self, tokenizer: Any, replies: list[str]):
        from agent_gym.chat.template import ChatTemplate

        template = ChatTemplate(tokenizer)
        eot = list(template.end_of_turn_ids)
        self.eot = eot[-1]
        self.replies = [template.encode(r) + eot for r in replies]

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int) -> list[Any]:
        from agent_gym.rollout import Generation

        out = []
        for prompt in prompts:
            turn = (int(np.count_nonzero(np.asarray(prompt) == self.eot)) - 2) // 2
            out.append(Generation(ids=self.replies[min(turn, len(self.replies) - 1)]))
        return out


def replies(turns: int, sleep_ms: float, busy_ms: float = 0.0) -> list[str]:
    """``turns`` python calls, then the answer."""
    calls = []
    for turn in range(1, turns + 1):
        code = f"print({turn} + 1)"
        if sleep_ms:
            code = f"import time\ntime.sleep({sleep_ms / 1000})\n" + code
        if busy_ms:
            code = f"import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < {busy_ms / 1000}: pass\n" + code
        calls.append("<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": code}}) + "\n</tool_call>")
    return calls + ["#### 18"]


def play(envs: Any, policy: TurnPolicy, episodes: int, concurrency: int, first_seed: int) -> dict[str, Any]:
    """``episodes`` episodes, ``concurrency`` in flight; wall time and the check that each ran every tool turn."""
    from agent_gym.rollout.async_runner import arun_episodes, run_sync

    async def main() -> tuple[Any, float]:
        # timed inside the loop: asyncio.run's teardown restores its SIGINT handler, and the signal
        # module's repr of the old one (a partial holding the finished task) prints every trajectory
        started = time.perf_counter()
        result = await arun_episodes(envs, policy, episodes=episodes, concurrency=concurrency, base_seed=first_seed,
                                     max_new_tokens=512, generate_in_thread=False, max_batch_size=concurrency, progress=False)
        return result, time.perf_counter() - started

    result, wall = run_sync(main)
    calls = sum(t.final_info.get("tool_calls", 0) for t in result.trajectories)
    errors = sum(t.final_info.get("tool_errors", 0) for t in result.trajectories)
    return {"wall_s": wall, "episodes_per_s": episodes / wall, "tool_calls": calls, "tool_errors": errors}


def measure(name: str, envs: Any, policy: TurnPolicy, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    play(envs, policy, concurrency, concurrency, first_seed=10**6)  # warm-up: every slot's env made and used once
    runs = [play(envs, policy, args.episodes, concurrency, first_seed=(r + 1) * args.episodes) for r in range(args.repeats)]
    run = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    expected = args.episodes * args.turns
    if run["tool_calls"] != expected or run["tool_errors"]:
        print(f"  ({name}: {run['tool_calls']} tool calls, {run['tool_errors']} errors; expected {expected} calls without error)")
    return {"name": name, **run, "walls": [r["wall_s"] for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to run (default: 1 2)")
    parser.add_argument("--episodes", type=int, default=256, help="timed episodes per run (default: %(default)s)")
    parser.add_argument("--per-worker", type=int, default=32, help="episodes in flight per worker (default: %(default)s)")
    parser.add_argument("--turns", type=int, default=3, help="python calls per episode (default: %(default)s)")
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="each call's code sleeps this long (default: %(default)s)")
    parser.add_argument("--busy-ms", type=float, default=0.0,
                        help="each call's code keeps a core busy this long, as real code does (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per configuration; the median is shown (default: %(default)s)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer name or path (default: the default model's)")
    parser.add_argument("--no-local", action="store_true", help="skip the in-process run")
    args = parser.parse_args()

    import gymnasium as gym
    import ray

    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.models import load_tokenizer
    from agent_gym.rollout.ray_pool import RayEnvPool

    tokenizer = load_tokenizer(args.tokenizer)
    policy = TurnPolicy(tokenizer, replies(args.turns, args.sleep_ms, args.busy_ms))
    env_kwargs = {"split": "test", "max_turns": args.turns + 1}
    if os.environ.get("RAY_ADDRESS"):
        ray.init()
    else:
        ray.init(include_dashboard=False, log_to_driver=False)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    print(f"== {ENV_ID}: {args.episodes} episodes of {args.turns} python calls"
          f"{f' sleeping {args.sleep_ms:g} ms' if args.sleep_ms else ''}{f' busy for {args.busy_ms:g} ms' if args.busy_ms else ''}"
          f" + an answer; {args.per_worker} in flight per worker ==")
    print(f"this machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; Ray cluster: {cpus} CPUs, "
          f"{len(ray.nodes())} node(s); the driver (this process) uses a core too")

    rows: list[dict[str, Any]] = []
    if not args.no_local:
        envs = [gym.make(ENV_ID, tokenizer=tokenizer, **env_kwargs) for _ in range(args.per_worker)]
        rows.append(measure("in process, no Ray", envs, policy, args, args.per_worker))
        for env in envs:
            env.close()
    by_workers: dict[int, float] = {}
    for workers in args.workers:
        if workers > cpus:
            print(f"  (skipping {workers} workers: the cluster has {cpus} CPUs, one per worker)")
            continue
        with RayEnvPool(ENV_ID, num_workers=workers, envs_per_worker=args.per_worker, env_kwargs=env_kwargs,
                        tokenizer=args.tokenizer) as pool:
            row = measure(f"{workers} worker{'s' * (workers > 1)}", pool.make_env, policy, args, pool.capacity)
        by_workers[workers] = row["episodes_per_s"]
        rows.append({**row, "workers": workers})
    ray.shutdown()

    base = by_workers.get(1)
    print(f"\n{'':20} {'wall s':>8} {'episodes/s':>11} {'ideal':>8} {'of ideal':>9}   runs (s)")
    for row in rows:
        ideal = base * row["workers"] if base and "workers" in row else None
        share = f"{100 * row['episodes_per_s'] / ideal:8.0f}%" if ideal else f"{'':>9}"
        walls = " ".join(f"{w:.2f}" for w in row["walls"])
        print(f"{row['name']:20} {row['wall_s']:8.2f} {row['episodes_per_s']:11.1f} {f'{ideal:.1f}' if ideal else '':>8} {share}   {walls}")
    if base is None:
        print("(ideal = the 1-worker rate times the workers: add 1 to --workers to see it)")
    else:
        print(f"ideal: {base:.1f} episodes/s (1 worker) x workers; runs: every repeat's wall time (the median shown)")


if __name__ == "__main__":
    main()
