#!/usr/bin/env python3
"""SWE-v0's packaged tasks, each played by its demonstration: how many it resolves, and how long that takes.

Every task of both splits is reset, its demonstration (:func:`agent_gym_swe.demonstrations.fix_turns`: the
reference fix as ``view``, ``edit`` and ``submit`` calls) played through the env with ``astep``, and the
outcome counted: ``resolved`` (reward 1.0), ``unresolved``, or the reason ``fix_turns`` gave no
demonstration. ``--concurrency`` episodes at once on one event loop (one env each, per split).

    python benchmarks/swe_demonstrations.py --json out.json    # about 13 minutes on 2 busy cores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.models import load_tokenizer
from agent_gym_swe.demonstrations import fix_turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--json", default=None, help="write each task's outcome and test counts to this JSON file")
    args = parser.parse_args()
    tok = load_tokenizer()
    envs = {s: [gym.make("AgentR1/SWE-v0", tokenizer=tok, split=s) for _ in range(args.concurrency)] for s in ("train", "test")}
    jobs = [(s, t.instance_id) for s in ("train", "test") for t in envs[s][0].unwrapped.tasks]
    results: dict[str, dict[str, Any]] = {}

    async def worker(k: int) -> None:
        while jobs:
            split, task_id = jobs.pop(0)
            e = envs[split][k].unwrapped
            e.reset(options={"task_id": task_id})
            turns, outcome = fix_turns(e, e.task)
            if turns is None:
                results[task_id] = {"outcome": outcome}
                continue
            for turn in turns:
                _, reward, _, _, info = await e.astep(e.template.encode(turn) + list(e.template.end_of_turn_ids))
            results[task_id] = {"outcome": "resolved" if reward == 1.0 else "unresolved", "tests": info.get("tests")}

    async def run() -> None:
        await asyncio.gather(*(worker(k) for k in range(args.concurrency)))

    t0, load = time.perf_counter(), os.getloadavg()
    asyncio.run(run())
    wall = time.perf_counter() - t0
    for split_envs in envs.values():
        for env in split_envs:
            env.close()
    by_repo = Counter((task_id.split("__")[0], r["outcome"]) for task_id, r in results.items())
    for (repo, outcome), n in sorted(by_repo.items()):
        print(f"{repo}: {outcome} {n}")
    total = Counter(r["outcome"] for r in results.values())
    print(f"all: {dict(total)} of {len(results)} tasks in {wall:.0f} s ({args.concurrency} in flight)")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                                               "load_average_start_end": [list(load), list(os.getloadavg())],
                                               "wall_s": wall, "counts": dict(total), "tasks": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
