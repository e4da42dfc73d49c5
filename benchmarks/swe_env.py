#!/usr/bin/env python3
"""SWE-v0 costs: one tool step, one submit's test run per project, and whole episodes at 16 and 64 in flight.

Part 1, steps, on the first easy train task: ``--steps`` rounds of ``bash`` (``echo hi``), ``view`` (20
lines of the file the bug is in) and ``edit`` (a no-op replacement of a line that occurs once), each timed
around ``env.step`` (the sandbox round trip, the tool's work, the env's bookkeeping and the observation's
tokens), median and p90; every step must come back without a tool error. The episode is reset every
``ROUNDS_PER_EPISODE`` rounds (the turn limit), and the reset and the first call after it (the worker
starts and unpacks the repository) are timed apart.

Part 2, submits: for each packaged project, its first train task whose demonstration is kept, played
``--submits`` times (reset, the demonstration's ``view`` and ``edit`` calls, ``submit``); the submit is
timed alone: a fresh copy, the agent's source changes, the project's whole test suite. Every reward must
be 1.0.

Part 3, episodes per second: ``--concurrency`` (default 16 and 64) episodes at once on one event loop
(``astep``), two workloads: ``calc``, a 3-test repository made here (reset, ``bash``, ``view``, ``edit``
with the fix, ``submit``: the env's own overhead shows), and ``packaged``, part 1's task played by its
demonstration (``view``, ``edit``, ``submit``: the project's tests run in every episode). One untimed
episode first (the sandbox server starts); the envs are made before the clock starts.

    python benchmarks/swe_env.py --json out.json       # about 10 minutes on 2 busy cores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.models import load_tokenizer

ENV_ID = "AgentR1/SWE-v0"
CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
TESTS = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_sub():\n    assert sub(5, 3) == 2\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n")
FIX = {"path": "calc.py", "old_str": "def sub(a, b):\n    return a + b", "new_str": "def sub(a, b):\n    return a - b"}
#: Rounds of three steps per episode: 9 x 3 + the first call stay under the default 30 turns.
ROUNDS_PER_EPISODE = 9


def call(env: Any, name: str, **arguments: Any) -> list[int]:
    e = env.unwrapped
    return e.template.encode(e.parser.format_calls([{"name": name, "arguments": arguments}])) + list(e.template.end_of_turn_ids)


def turn_ids(env: Any, text: str) -> list[int]:
    e = env.unwrapped
    return e.template.encode(text) + list(e.template.end_of_turn_ids)


def summary(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "median": statistics.median(s), "p90": s[min(len(s) - 1, int(0.9 * len(s)))], "min": s[0], "max": s[-1]}


def first_demo(env: Any, repo: str | None = None) -> tuple[str, list[str]]:
    """The first task of ``env``'s list (of ``repo``) whose demonstration is kept."""
    from agent_gym_swe.demonstrations import demonstrations

    tasks = env.unwrapped.tasks
    for n in range(len(tasks)):
        if repo is not None and tasks[n].repo != repo:
            continue
        ((task_id, turns, outcome),) = demonstrations(env, offset=n, limit=1)
        if turns is not None:
            return task_id, turns
    raise RuntimeError(f"no task of {repo or 'the split'} has a kept demonstration")


def steps(tok: Any, args: argparse.Namespace) -> dict[str, Any]:
    from agent_gym_swe.tasks import task_files

    env = gym.make(ENV_ID, tokenizer=tok, split="train", difficulty="easy")
    task_id, _ = first_demo(env)
    env.reset(options={"task_id": task_id})
    target = env.unwrapped.task.meta["mutations"][0]["file"]  # the file the bug is in
    text = task_files(env.unwrapped.task)[target].decode("utf-8")
    line = next(ln for ln in text.splitlines(keepends=True) if ln.strip() and text.count(ln) == 1)
    actions = {"bash": call(env, "bash", command="echo hi"),
               "view": call(env, "view", path=target, start_line=1, end_line=20),
               "edit": call(env, "edit", path=target, old_str=line, new_str=line)}
    times: dict[str, list[float]] = {"reset": [], "first_call": [], "bash": [], "view": [], "edit": []}
    for n in range(args.steps):
        if n % ROUNDS_PER_EPISODE == 0:
            t0 = time.perf_counter()
            env.reset(options={"task_id": task_id})
            t1 = time.perf_counter()
            *_, info = env.step(call(env, "bash", command="true"))  # the worker starts, unpacks the repository
            times["reset"].append(t1 - t0)
            times["first_call"].append(time.perf_counter() - t1)
            assert info["tool_errors"] == 0, info
        for name, action in actions.items():
            t0 = time.perf_counter()
            _, _, terminated, truncated, info = env.step(action)
            times[name].append(time.perf_counter() - t0)
            if info["tool_errors"] or terminated or truncated:
                raise RuntimeError(f"{name} step failed: {info}")
    env.close()
    out = {name: summary(xs) for name, xs in times.items()}
    for name, s in out.items():
        print(f"{name:10s}: median {s['median'] * 1000:7.1f} ms, p90 {s['p90'] * 1000:7.1f} ms ({s['n']} steps)")
    return {"task_id": task_id, "file": target, "steps": out}


def submits(tok: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    from agent_gym_swe.tasks import packaged_repos

    env = gym.make(ENV_ID, tokenizer=tok, split="train")
    rows = []
    for repo in sorted(packaged_repos()):
        task_id, turns = first_demo(env, repo)
        times, rewards = [], []
        for _ in range(args.submits):
            env.reset(options={"task_id": task_id})
            for t in turns[:-1]:
                env.step(turn_ids(env, t))
            t0 = time.perf_counter()
            _, reward, _, _, info = env.step(turn_ids(env, turns[-1]))
            times.append(time.perf_counter() - t0)
            rewards.append(reward)
        tests = info["tests"]["fail_to_pass"][1] + info["tests"]["pass_to_pass"][1]
        row = {"repo": repo, "task_id": task_id, "tests": tests, "submit_s": summary(times), "rewards": rewards}
        print(f"submit {task_id} ({tests} tests): median {row['submit_s']['median']:.2f} s, max {row['submit_s']['max']:.2f} s, rewards {rewards}")
        rows.append(row)
    env.close()
    return rows


def throughput(tok: Any, args: argparse.Namespace, task_id: str) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "calc"
        root.mkdir()
        (root / "calc.py").write_text(CALC)
        (root / "test_calc.py").write_text(TESTS)
        subprocess.run(["git", "-C", str(root), "init", "-q"], check=True)
        task = {"instance_id": "calc", "repo": "calc", "problem_statement": "sub(5, 3) returns 8, not 2.",
                "FAIL_TO_PASS": ["test_calc.py::test_sub"], "PASS_TO_PASS": ["test_calc.py::test_add", "test_calc.py::test_add_zero"]}
        (Path(tmp) / "t.jsonl").write_text(json.dumps(task) + "\n")
        for workload in args.workload:
            for n in args.concurrency:
                if workload == "calc":
                    envs = [gym.make(ENV_ID, tokenizer=tok, tasks=str(Path(tmp) / "t.jsonl"), repo=str(root)) for _ in range(n)]
                    tid = "calc"
                    actions = [call(envs[0], "bash", command="ls"), call(envs[0], "view", path="calc.py"),
                               call(envs[0], "edit", **FIX), call(envs[0], "submit")]
                else:
                    envs = [gym.make(ENV_ID, tokenizer=tok, split="train", difficulty="easy") for _ in range(n)]
                    tid = task_id
                    from agent_gym_swe.demonstrations import fix_turns

                    envs[0].reset(options={"task_id": tid})
                    turns, _ = fix_turns(envs[0].unwrapped, envs[0].unwrapped.task)
                    assert turns is not None
                    actions = [turn_ids(envs[0], t) for t in turns]

                async def episode(env: Any) -> float:
                    e = env.unwrapped
                    e.reset(options={"task_id": tid})
                    for action in actions:
                        _, reward, terminated, truncated, info = await e.astep(action)
                    assert terminated, info
                    return float(reward)

                async def run() -> tuple[float, list[float]]:
                    await episode(envs[0])  # the sandbox server starts, the archive is cached
                    t0 = time.perf_counter()
                    rewards = [r for _ in range(args.rounds) for r in await asyncio.gather(*(episode(e) for e in envs))]
                    return time.perf_counter() - t0, rewards

                wall, rewards = asyncio.run(run())
                for e in envs:
                    e.close()
                row = {"workload": workload, "task_id": tid, "concurrency": n, "episodes": len(rewards), "steps_per_episode": len(actions),
                       "wall_s": wall, "episodes_per_s": len(rewards) / wall, "resolved": sum(r == 1.0 for r in rewards)}
                print(f"{workload:8s} {n:3d} in flight: {len(rewards)} episodes ({len(actions)} steps each, submit included) in {wall:.1f} s = "
                      f"{row['episodes_per_s']:.2f} episodes/s; {row['resolved']}/{len(rewards)} resolved")
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=27, help="rounds of bash, view, edit (default 27)")
    parser.add_argument("--submits", type=int, default=3, help="submits per project (default 3)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--workload", nargs="+", choices=["calc", "packaged"], default=["calc", "packaged"])
    parser.add_argument("--rounds", type=int, default=1, help="batches of --concurrency episodes timed (default 1)")
    parser.add_argument("--json", default=None, help="write every figure to this JSON file")
    args = parser.parse_args()
    tok = load_tokenizer()
    t0, load = time.time(), os.getloadavg()
    part1 = steps(tok, args)
    part2 = submits(tok, args)
    part3 = throughput(tok, args, part1["task_id"])
    if args.json:
        result = {"date": time.strftime("%Y-%m-%d", time.gmtime(t0)), "machine": platform.machine(), "cpus": os.cpu_count(),
                  "load_average_start_end": [list(load), list(os.getloadavg())], "args": vars(args), "steps": part1, "submits": part2,
                  "throughput": part3, "wall_s": time.time() - t0}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
