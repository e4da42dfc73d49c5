"""Step against concat sample layouts through examples/reinforce.py on CPU: the runs, then their paired comparison.

    python examples/compare_reinforce_layouts.py run      # the 6 runs, one after the other (skips finished ones)
    python examples/compare_reinforce_layouts.py report   # the table, the paired difference, the plot

`run` trains `--seeds` x (concat, step) with the same settings (COMMON below: ArithmeticTool-v0 level 3 with
its few-shot demonstration, the default model, 6 iterations of 4 tasks x 4 episodes, greedy eval on 64
fixed test tasks at the start and the end, loss seq-mean-token-mean, the aggregation under which the
layouts differ; see reinforce.py's docstring) and writes `<arm>-seed<N>.csv` and `.log` into `--dir`, seed
pair by seed pair, so a stopped run leaves whole pairs. The two arms of a seed play the same training
tasks, start from the same weights and the same sampling seed: their first batch is the same episodes.

`report` reads every `<arm>-seed<N>.csv` in `--dir` and prints, per seed and as the mean over the seeds whose
two arms both ended (their final eval written) with its standard error (sd of the per-seed differences / sqrt(seeds)): greedy accuracy at
the start and the end, the sampled training reward of the last `--last` iterations, generated tokens and
the tokens the update trained on; with `--png` it plots greedy accuracy and training reward against
generated tokens. Reads the CSV columns only, so it runs without torch.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = ("concat", "step")
COMMON = ["--env-id", "AgentR1/ArithmeticTool-v0", "--env-kwarg", "few_shot=true", "--env-kwarg", "level=3",
          "--model", "smollm2-135m-tool", "--iterations", "6", "--prompts", "4", "--group", "4", "--lr", "1e-5",
          "--max-new-tokens", "48", "--eval-tasks", "64", "--eval-every", "0", "--loss-agg", "seq-mean-token-mean",
          "--threads", "2"]


def run_command(arm: str, seed: int, out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, str(HERE / "reinforce.py"), *COMMON, *extra, "--samples", arm, "--seed", str(seed),
            "--csv", str(out / f"{arm}-seed{seed}.csv")]


def finished(path: Path, iterations: int) -> bool:
    """Whether the CSV at `path` holds a run's last iteration with its eval."""
    if not path.exists():
        return False
    rows = read(path)
    return bool(rows) and int(rows[-1]["iteration"]) == iterations and rows[-1]["greedy_accuracy"] != ""


def read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def iterations_of(argv: list[str]) -> int:
    args = COMMON + argv
    return int(args[len(args) - 1 - args[::-1].index("--iterations") + 1])


def cmd_run(args: argparse.Namespace, extra: list[str]) -> None:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    iterations = iterations_of(extra)
    with open(out / "commands.txt", "a") as fh:
        for seed in args.seeds:
            for arm in ARMS:
                fh.write("nice -n 10 python examples/reinforce.py " + " ".join(run_command(arm, seed, out, extra)[2:]) + "\n")
    for seed in args.seeds:
        for arm in ARMS:
            csv_path = out / f"{arm}-seed{seed}.csv"
            if finished(csv_path, iterations):
                print(f"{csv_path.name}: done, skipped", flush=True)
                continue
            print(f"{csv_path.name}: running", flush=True)
            with open(out / f"{arm}-seed{seed}.log", "w") as log:
                env = {**os.environ, "TQDM_MININTERVAL": "30"}
                code = subprocess.run(run_command(arm, seed, out, extra), stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            if code:
                sys.exit(f"{csv_path.name}: reinforce.py exited with {code}; see {csv_path.with_suffix('.log')}")


def summary(rows: list[dict], last: int) -> dict:
    """One run's figures: greedy accuracy at the start and the end, mean sampled reward of the last `last`
    iterations, generated tokens, trained tokens, the update's rows and turns per episode."""
    evals = [r for r in rows if r["greedy_accuracy"] != ""]
    train = [r for r in rows if r["mean_reward"] != ""]
    tail = train[-last:]
    return {
        "start": float(evals[0]["greedy_accuracy"]) if evals and int(evals[0]["iteration"]) == 0 else math.nan,
        "end": float(evals[-1]["greedy_accuracy"]) if evals and int(evals[-1]["iteration"]) > 0 else math.nan,
        "reward": sum(float(r["mean_reward"]) for r in tail) / len(tail) if tail else math.nan,
        "tokens": int(train[-1]["tokens_total"]) if train else 0,
        "trained": sum(int(r["trained_tokens"]) for r in train),
        "samples": sum(int(r["samples"]) for r in train),
        "turns": sum(float(r["turns"]) for r in train) / len(train) if train else math.nan,
        "iterations": len(train),
    }


def mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and its standard error (nan with fewer than 2 values)."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, math.nan
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def runs_in(folder: Path) -> dict[tuple[str, int], Path]:
    found = {}
    for path in sorted(folder.glob("*-seed*.csv")):
        m = re.fullmatch(r"(concat|step)-seed(\d+)\.csv", path.name)
        if m:
            found[(m.group(1), int(m.group(2)))] = path
    return found


def report(folder: Path, last: int) -> tuple[str, dict]:
    """The printed table and the paired figures (step - concat per seed with both arms)."""
    runs = {key: summary(read(path), last) for key, path in runs_in(folder).items()}
    lines = [f"{'seed':>4} {'arm':>6} {'iters':>5} {'greedy start':>12} {'greedy end':>10} {'reward last ' + str(last):>14} "
             f"{'gen tokens':>10} {'trained tokens':>14} {'rows':>5} {'turns':>5}"]
    for (arm, seed), s in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(f"{seed:>4} {arm:>6} {s['iterations']:>5} {s['start']:>12.3f} {s['end']:>10.3f} {s['reward']:>14.3f} "
                     f"{s['tokens']:>10} {s['trained']:>14} {s['samples']:>5} {s['turns']:>5.2f}")
    # a run without its final eval (still going, or stopped) is listed but not paired
    ended = {key for key, v in runs.items() if not math.isnan(v["end"])}
    seeds = sorted({seed for _, seed in ended if ("concat", seed) in ended and ("step", seed) in ended})
    paired: dict = {"seeds": seeds}
    if seeds:
        lines.append("")
        lines.append(f"step - concat, paired by seed ({len(seeds)} seeds: {seeds}), mean ± SE:")
        for key, name in (("end", "greedy end"), ("reward", f"reward last {last}"), ("tokens", "generated tokens"),
                          ("trained", "trained tokens")):
            diffs = [runs[("step", s)][key] - runs[("concat", s)][key] for s in seeds]
            m, se = mean_se(diffs)
            paired[key] = {"diffs": diffs, "mean": m, "se": se}
            lines.append(f"  {name:>18}: {m:+.3f} ± {se:.3f}   per seed {', '.join(f'{d:+.3f}' for d in diffs)}")
        for arm in ARMS:
            m, se = mean_se([runs[(arm, s)]["end"] - runs[(arm, s)]["start"] for s in seeds])
            paired[f"gain_{arm}"] = {"mean": m, "se": se}
            lines.append(f"  {arm} greedy end - start: {m:+.3f} ± {se:.3f}")
    return "\n".join(lines), paired


def plot(folder: Path, png: str, last: int = 3) -> None:
    """Left: each seed's final greedy accuracy in both arms (a line per seed), the start dashed. Right: the
    sampled training reward against generated tokens, each run faint, each arm's mean over seeds bold."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"concat": "tab:blue", "step": "tab:orange"}
    runs = runs_in(folder)
    _, paired = report(folder, last)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.6]})
    starts = []
    labels: dict[float, list[int]] = {}  # step's end -> its seeds (one label for equal ends)
    for seed in paired["seeds"]:
        ends = [summary(read(runs[(arm, seed)]), last)["end"] for arm in ARMS]
        starts.append(summary(read(runs[(ARMS[0], seed)]), last)["start"])
        left.plot([0, 1], ends, "-", color="gray", alpha=0.6)
        left.scatter([0, 1], ends, c=[colors[a] for a in ARMS], zorder=3)
        labels.setdefault(ends[1], []).append(seed)
    for y, seeds in labels.items():
        left.annotate(("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds)), (1.04, y), fontsize=8, va="center")
    if starts:
        left.axhline(sum(starts) / len(starts), ls="--", color="black", alpha=0.5, label="start (the same model)")
        d = paired["end"]
        left.set_title(f"held-out greedy accuracy at the end\nstep - concat {d['mean']:+.3f} ± {d['se']:.3f} ({len(paired['seeds'])} seeds)",
                       fontsize=10)
        left.legend(loc="lower left", fontsize=8)
    left.set(xticks=[0, 1], xticklabels=list(ARMS), xlim=(-0.3, 1.35), ylabel="greedy accuracy, 64 held-out tasks")
    left.grid(alpha=0.3)
    for arm in ARMS:
        curves = []
        for (a, seed), path in sorted(runs.items()):
            if a != arm:
                continue
            tr = [r for r in read(path) if r["mean_reward"] != ""]
            curves.append([(int(r["tokens_total"]), float(r["mean_reward"])) for r in tr])
            right.plot(*zip(*curves[-1]), "-", color=colors[arm], alpha=0.2)
        n = min(map(len, curves)) if curves else 0
        if n:
            xs = [sum(c[i][0] for c in curves) / len(curves) for i in range(n)]
            ys = [sum(c[i][1] for c in curves) / len(curves) for i in range(n)]
            right.plot(xs, ys, "o-", color=colors[arm], lw=2, label=f"{arm}, mean of {len(curves)} seeds")
    right.set(xlabel="generated tokens (the run so far)", ylabel="mean reward, 16 episodes at T=1", ylim=(0, 1.05),
              title="training reward (sampled, fresh tasks each iteration)")
    right.grid(alpha=0.3)
    right.legend(loc="lower right", fontsize=8)
    fig.suptitle("REINFORCE on ArithmeticTool-v0 level 3 (few-shot), smollm2-135m-tool, CPU: step vs concat layout", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["run", "report"])
    p.add_argument("--dir", default="docs/data/cpu-step-vs-concat", help="the runs' CSVs and logs (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="run: the seeds, one pair each (default: 1 2 3)")
    p.add_argument("--last", type=int, default=3, help="report: training iterations averaged at the end (default: %(default)s)")
    p.add_argument("--png", default=None, help="report: write the plot here (matplotlib)")
    args, extra = p.parse_known_args(argv)
    if args.command == "run":
        cmd_run(args, extra)  # extra: reinforce.py options that override COMMON (e.g. --iterations 1)
        return
    if extra:
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    text, _ = report(Path(args.dir), args.last)
    print(text)
    if args.png:
        plot(Path(args.dir), args.png, args.last)


if __name__ == "__main__":
    main()
