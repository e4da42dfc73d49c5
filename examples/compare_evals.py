"""Compare two evaluations of the same tasks, task by task: is the second model's accuracy really higher?

    agent-gym eval AgentR1/GSM8KTool-v0 --split test --in-order --episodes 1319 --model START --out start.jsonl
    agent-gym eval AgentR1/GSM8KTool-v0 --split test --in-order --episodes 1319 --model END --out end.jsonl
    python examples/compare_evals.py start.jsonl end.jsonl --csv per_task.csv

Each FILE is the trajectory JSONL that ``agent-gym eval`` writes (any order; ``.jsonl.gz`` is read too), or
the per-task CSV that :func:`write_tasks` makes of one (``seed,task_id,correct,tool_calls,tool_errors``: what
a comparison reads, a few dozen KB where the trajectories of 1,319 GSM8K episodes take 4 MB compressed).
Episodes are paired by (seed, task id), so both files must hold the same episodes: two evals with the same
``--seed`` and ``--episodes`` (``--in-order`` for a fixed list of tasks). A task is solved when its last step's
``info["correct"]`` is True (``agent-gym eval``'s accuracy). ``--first N`` keeps the episodes of seeds
SEED..SEED+N-1 only (with ``--in-order``: the split's first N tasks, e.g. the 512 a verl validation file holds).

Printed (``--json``: as one JSON object): N; each file's accuracy (solved/N) and tool-call validity (calls that
parsed and ran / calls, when there were calls); the difference END - START with its paired standard error,
sqrt(var(d) / N) over the per-task differences d in {-1, 0, 1}, and the ratio of the two (z); the tasks only END
solved (gained) and only START solved (lost), with the exact two-sided sign test on them. Pairing removes the
spread between tasks that two unpaired accuracies carry: the same difference is measured with a smaller error.
``--csv`` writes one row per task: seed, task_id, start_correct, end_correct, start_tool_calls, end_tool_calls.

Exit status: 0 on success, 1 on an unreadable file or episodes that do not pair, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

Key = tuple[int, str]


class CompareError(Exception):
    """A file that cannot be read or episodes that do not pair."""


def read_episodes(path: str | Path) -> dict[Key, dict[str, Any]]:
    """(seed, task_id) -> {"correct", "tool_calls", "tool_errors"} for every trajectory of an eval file."""
    from agent_gym.trajectory import read_trajectories

    path = Path(path)
    if not path.is_file():
        raise CompareError(f"no trajectory file at {path}")
    if path.suffix == ".csv":
        return _task_rows(path)
    try:
        return _episodes(read_trajectories(path), path)  # plain or gzip-compressed JSONL
    except (OSError, ValueError) as exc:
        message = str(exc)  # read_trajectories' messages name the file and line already
        raise CompareError(message if str(path) in message else f"{path}: {message}") from None


def _episodes(trajectories: Any, path: Path) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for t in trajectories:
        if t.seed is None or t.task_id is None:
            raise CompareError(f"{path}: trajectory {t.id} has no seed or task id (not an `agent-gym eval` file)")
        key = (int(t.seed), str(t.task_id))
        if key in out:
            raise CompareError(f"{path}: seed {key[0]} (task {key[1]}) appears twice")
        info = t.final_info
        out[key] = {
            "correct": info.get("correct") is True,
            "tool_calls": int(info.get("tool_calls", 0) or 0),
            "tool_errors": int(info.get("tool_errors", 0) or 0),
        }
    if not out:
        raise CompareError(f"{path}: no trajectories")
    return out


TASK_COLUMNS = ("seed", "task_id", "correct", "tool_calls", "tool_errors")


def write_tasks(path: str | Path, episodes: dict[Key, dict[str, Any]]) -> None:
    """One evaluation's per-task CSV (TASK_COLUMNS, sorted by seed), which :func:`read_episodes` reads back."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(TASK_COLUMNS)
        for key in sorted(episodes):
            e = episodes[key]
            writer.writerow((key[0], key[1], int(e["correct"]), e["tool_calls"], e["tool_errors"]))


def _task_rows(path: Path) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != TASK_COLUMNS:
            raise CompareError(f"{path}: a per-task CSV has the header {','.join(TASK_COLUMNS)} (got {reader.fieldnames})")
        for line, row in enumerate(reader, 2):
            try:
                key = (int(row["seed"]), row["task_id"])
                episode = {"correct": row["correct"] == "1", "tool_calls": int(row["tool_calls"]),
                           "tool_errors": int(row["tool_errors"])}
            except (TypeError, ValueError):
                raise CompareError(f"{path}:{line}: not a row of {','.join(TASK_COLUMNS)}: {row}") from None
            if key in out:
                raise CompareError(f"{path}: seed {key[0]} (task {key[1]}) appears twice")
            out[key] = episode
    if not out:
        raise CompareError(f"{path}: no tasks")
    return out


def sign_test_p(gained: int, lost: int) -> float:
    """Exact two-sided sign test: the chance of a split at least this uneven if either side were as likely."""
    m = gained + lost
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, k) for k in range(min(gained, lost) + 1)) / 2**m
    return min(1.0, 2 * tail)


def compare(start: dict[Key, dict[str, Any]], end: dict[Key, dict[str, Any]], first: int | None = None) -> dict[str, Any]:
    """The paired comparison of two evaluations (see the module docstring); raises CompareError when unpaired."""
    if set(start) != set(end):
        only_start, only_end = len(set(start) - set(end)), len(set(end) - set(start))
        raise CompareError(
            f"the files hold different episodes ({only_start} only in START, {only_end} only in END): evaluate both "
            "with the same --seed and --episodes (and --in-order)"
        )
    keys = sorted(start)
    if first is not None:
        lowest = keys[0][0]
        keys = [k for k in keys if k[0] < lowest + first]
    n = len(keys)
    solved_start = sum(start[k]["correct"] for k in keys)
    solved_end = sum(end[k]["correct"] for k in keys)
    gained = sum(end[k]["correct"] and not start[k]["correct"] for k in keys)
    lost = sum(start[k]["correct"] and not end[k]["correct"] for k in keys)
    diff = (solved_end - solved_start) / n
    se = math.sqrt(max((gained + lost) / n - diff**2, 0.0) / n)

    def side(eps: dict[Key, dict[str, Any]], solved: int) -> dict[str, Any]:
        calls = sum(eps[k]["tool_calls"] for k in keys)
        errors = sum(eps[k]["tool_errors"] for k in keys)
        return {"solved": solved, "accuracy": solved / n, "se": math.sqrt(solved / n * (1 - solved / n) / n),
                "tool_calls": calls, "tool_call_validity": None if calls == 0 else (calls - errors) / calls}

    return {
        "n": n,
        "start": side(start, solved_start),
        "end": side(end, solved_end),
        "difference": diff,
        "paired_se": se,
        "z": None if se == 0 else diff / se,
        "gained": gained,
        "lost": lost,
        "sign_test_p": sign_test_p(gained, lost),
        "keys": keys,
    }


def write_csv(path: str | Path, result: dict[str, Any], start: dict[Key, dict[str, Any]], end: dict[Key, dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(("seed", "task_id", "start_correct", "end_correct", "start_tool_calls", "end_tool_calls"))
        for key in result["keys"]:
            writer.writerow((key[0], key[1], int(start[key]["correct"]), int(end[key]["correct"]),
                             start[key]["tool_calls"], end[key]["tool_calls"]))


def _describe(name: str, side: dict[str, Any], n: int) -> str:
    text = f"{name:<6} {side['accuracy']:.4f} ({side['solved']}/{n}), SE {side['se']:.4f}"
    if side["tool_call_validity"] is not None:
        text += f"; tool-call validity {side['tool_call_validity']:.4f} of {side['tool_calls']} calls"
    return text


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="compare_evals.py",
        description="Paired comparison of two `agent-gym eval` trajectory files of the same tasks: accuracies, "
        "the difference with its paired standard error, tasks gained and lost, and the sign test.",
        epilog="example: python examples/compare_evals.py start.jsonl end.jsonl --first 512 --csv per_task.csv",
    )
    p.add_argument("start", help="the first evaluation's trajectories (JSONL or .jsonl.gz) or per-task CSV, e.g. before training")
    p.add_argument("end", help="the second evaluation's, of the same episodes")
    p.add_argument("--first", type=int, default=None, metavar="N",
                   help="only the episodes of the first N seeds (with --in-order: the split's first N tasks)")
    p.add_argument("--csv", default=None, help="write one row per task here")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args(argv)
    if args.first is not None and args.first < 1:
        p.error(f"--first must be >= 1, got {args.first}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        start, end = read_episodes(args.start), read_episodes(args.end)
        result = compare(start, end, args.first)
    except CompareError as exc:
        print(f"compare_evals.py: {exc}", file=sys.stderr)
        return 1
    if args.csv:
        write_csv(args.csv, result, start, end)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "keys"}, indent=2))
        return 0
    n = result["n"]
    print(f"{n} tasks, paired by seed and task id")
    print(_describe("start", result["start"], n))
    print(_describe("end", result["end"], n))
    z = "" if result["z"] is None else f", z {result['z']:.2f}"
    print(f"end - start {result['difference']:+.4f}, paired SE {result['paired_se']:.4f}{z}; "
          f"gained {result['gained']}, lost {result['lost']} (sign test p = {result['sign_test_p']:.2g})")
    if args.csv:
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
