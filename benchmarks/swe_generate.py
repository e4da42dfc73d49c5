#!/usr/bin/env python3
"""SWE task generation: the validation rate and cost of mutating the packaged projects.

Runs :func:`agent_gym_swe.generate.generate_tasks` on ``--repo`` (default all four packaged projects) with
``--mutations`` single mutations and ``--combos`` pairs each, every test run in the env's sandbox, and
prints per project: mutations run, kept (FAIL_TO_PASS >= 1 and every other test passing), the reasons the
rest were dropped, the rate, the wall time, the test runs' own times (each run's ``grade`` call, its wait
for a free slot excluded) and the difficulty of the kept tasks. ``--out`` writes the tasks (what
``python -m agent_gym_swe.generate tasks`` writes for the same arguments), ``--json`` the figures.

    python benchmarks/swe_generate.py --repo inflection-0.5.1 --mutations 20 --combos 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agent_gym_swe import env as swe_env
from agent_gym_swe.generate import generate_tasks, write_tasks
from agent_gym_swe.tasks import packaged_repos

RUN_S: list[float] = []
_acall = swe_env.Workspace.acall


async def _timed_acall(self: Any, name: str, *args: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        return await _acall(self, name, *args)
    finally:
        if name == "grade":
            RUN_S.append(time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", action="append", default=None)
    parser.add_argument("--mutations", type=int, default=60)
    parser.add_argument("--combos", type=int, default=12)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the tasks of every project to this file (.jsonl or .jsonl.gz)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parser.parse_args()
    swe_env.Workspace.acall = _timed_acall  # type: ignore[method-assign]
    total: Counter[str] = Counter()
    rows, all_tasks = [], []
    t_all, load = time.perf_counter(), os.getloadavg()
    for repo in args.repo or sorted(packaged_repos()):
        RUN_S.clear()
        t0 = time.perf_counter()
        tasks, counts = generate_tasks([repo], mutations=args.mutations, combos=args.combos, concurrency=args.concurrency)
        wall = time.perf_counter() - t0
        total.update(counts)
        all_tasks += tasks
        by = Counter(t.difficulty for t in tasks)
        row = {"repo": repo, "counts": dict(counts), "rate": counts["valid"] / max(1, counts["run"]), "wall_s": wall,
               "test_runs": len(RUN_S), "test_run_s_median": statistics.median(RUN_S), "test_run_s_max": max(RUN_S),
               "tests": len(tasks[0].FAIL_TO_PASS) + len(tasks[0].PASS_TO_PASS) if tasks else None,
               "difficulty": {d: by.get(d, 0) for d in ("easy", "medium", "hard")}}
        rows.append(row)
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in ("run", "valid")) or "none"
        print(f"{repo}: {counts['valid']}/{counts['run']} kept ({row['rate']:.1%}), dropped: {dropped}; {wall:.0f} s, "
              f"{len(RUN_S)} test runs of {row['tests']} tests, median {row['test_run_s_median']:.2f} s, max {row['test_run_s_max']:.2f} s; "
              + ", ".join(f"{d} {n}" for d, n in row["difficulty"].items()))
    wall_all = time.perf_counter() - t_all
    print(f"all: {total['valid']}/{total['run']} kept ({total['valid'] / max(1, total['run']):.1%}) in {wall_all:.0f} s")
    if args.out:
        write_tasks(all_tasks, args.out)
        print(f"wrote {len(all_tasks)} tasks to {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "load_average_start_end": [list(load), list(os.getloadavg())],
            "args": vars(args), "repos": rows, "counts": dict(total), "rate": total["valid"] / max(1, total["run"]), "wall_s": wall_all,
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
