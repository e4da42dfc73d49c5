"""Held-out greedy accuracy and tool-call validity of a run trained in parts, from verl's metric files.

    python examples/plot_heldout_accuracy.py part1/metrics.jsonl part2/metrics.jsonl --csv curve.csv --png curve.png

Each FILE is what verl's FileLogger wrote (``VERL_FILE_LOGGER_PATH``; one ``{"step", "data"}`` line per
step, read by :func:`plot_training_curve.read_metrics_file`). The parts of a run that continues on a
fresh machine each start again at step 0 (``examples/learn_smollm2-135m_gsm8k_tool.sh``: the adapter goes
on, verl's step counter does not), so steps are offset: a file whose first step is 0 starts a new part,
placed after the last step of the part before it (``--offsets`` gives the offsets instead); a file that
starts later continues the file before it (verl resumed that part from a checkpoint) and is merged into
it, the later file winning where both log a step.

Per validation (``val-core/<source>/acc/mean@1``, the greedy accuracy over the held-out problems) the CSV
has one row: ``step`` (offset), ``part``, ``part_step``, ``val_acc``, ``val_se`` = sqrt(p (1 - p) / N),
``val_n`` (N: ``val-aux/<source>/episodes``, which the agent-gym trainer logs, else ``--val-n``),
``tool_call_validity`` (``val-aux/<source>/tool_call_validity``, else tool_calls_valid / tool_calls_answered
from their means), ``tool_calls_per_episode``, ``train_reward`` (``critic/score/mean`` of that step). The PNG
(``--png``, needs matplotlib) shows accuracy with +-1 SE error bars (N in the legend) and the train reward
of every step above tool-call validity (that panel only when the files log validity), parts separated by dotted lines. The summary gives the first and last accuracy with their
standard errors, the difference with its (unpaired) standard error, and the lowest validity.

``--x tokens`` puts validations at the tokens the policy had generated in training by then instead of at
their step: the sum of ``agent_gym/generated_tokens`` (logged every training step by
``agent_gym_verl.main_ppo``; env tokens not counted) over the steps before it, parts end to end. Runs that
sample differently (tree against flat rollouts, concat against step mode) then compare at equal cost; the
CSV gets a ``generated_tokens`` column. ``--run LABEL=FILE[,FILE...]`` (repeatable, instead of FILEs) puts
several runs, each in its parts, on one plot and one CSV (a ``run`` column first); the summary adds each
run's generated tokens and the difference of the last validations. ``--print-tokens`` prints, per run,
the generated tokens and the training steps the files cover, and nothing else (no validation needed).

Exit status: 0 on success, 1 on a bad input file (or no validation in it, or no N), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any, Sequence

_HERE = Path(__file__).resolve().parent


def _curve_module() -> Any:
    """examples/plot_training_curve.py (the reader of verl's metric files), loaded from its file."""
    spec = importlib.util.spec_from_file_location("plot_training_curve", _HERE / "plot_training_curve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_curve = _curve_module()
CurveError = _curve.CurveError
read_metrics_file = _curve.read_metrics_file

ACC_PREFIX, ACC_SUFFIX = "val-core/", "/acc/mean@1"
COLUMNS = ("step", "part", "part_step", "val_acc", "val_se", "val_n", "tool_call_validity", "tool_calls_per_episode", "train_reward")
TOKENS_METRIC = "agent_gym/generated_tokens"
Run = dict[int, dict[str, float]]


def split_parts(runs: Sequence[Run]) -> list[Run]:
    """Group files into parts: a file starting at step 0 starts a part, any other continues the last one."""
    parts: list[Run] = []
    for run in runs:
        if not run:
            continue
        if min(run) == 0 or not parts:
            parts.append({step: dict(metrics) for step, metrics in run.items()})
        else:
            for step, metrics in run.items():
                parts[-1].setdefault(step, {}).update(metrics)
    return parts


def sources(parts: Sequence[Run]) -> list[str]:
    """The data sources with a greedy-accuracy metric, sorted."""
    found = {
        key[len(ACC_PREFIX):-len(ACC_SUFFIX)]
        for part in parts for metrics in part.values() for key in metrics
        if key.startswith(ACC_PREFIX) and key.endswith(ACC_SUFFIX)
    }
    return sorted(found)


def standard_error(p: float, n: float) -> float:
    """sqrt(p (1 - p) / n): the standard error of a proportion p over n independent problems."""
    return math.sqrt(max(p * (1.0 - p), 0.0) / n)


def validity(metrics: dict[str, float], source: str) -> float | None:
    """Answered tool calls that parsed and ran, as a fraction of answered calls (None if not logged)."""
    direct = metrics.get(f"val-aux/{source}/tool_call_validity")
    if direct is not None:
        return direct
    valid = metrics.get(f"val-aux/{source}/tool_calls_valid/mean@1")
    answered = metrics.get(f"val-aux/{source}/tool_calls_answered/mean@1")
    if valid is None or answered is None or answered <= 0:
        return None
    return valid / answered


def part_offsets(parts: Sequence[Run], offsets: Sequence[int] | None = None) -> list[int]:
    """Each part's first step on the common axis: where the part before it ended, unless given."""
    if offsets is not None:
        if len(offsets) != len(parts):
            raise CurveError(f"--offsets gives {len(offsets)} offset(s) for {len(parts)} part(s)")
        return list(offsets)
    out, start = [], 0
    for part in parts:
        out.append(start)
        start += max(part)
    return out


def train_series(parts: Sequence[Run], offsets: Sequence[int]) -> list[tuple[int, float]]:
    """(step, critic/score/mean) of every training step, on the common axis."""
    return [(offset + step, part[step]["critic/score/mean"]) for part, offset in zip(parts, offsets)
            for step in sorted(part) if "critic/score/mean" in part[step]]


def cumulative_tokens(parts: Sequence[Run]) -> list[dict[int, float]]:
    """Per part, step -> the tokens generated in training up to and including that step, counting every
    earlier part whole. A validation at step s of a part follows the update of step s, so it sees these
    tokens; step 0 of a part is its start. Raises CurveError when a training step (any step > 0) does not
    log TOKENS_METRIC."""
    out: list[dict[int, float]] = []
    total = 0.0
    for k, part in enumerate(parts):
        cum: dict[int, float] = {}
        for step in sorted(part):
            if step > 0:
                tokens = part[step].get(TOKENS_METRIC)
                if tokens is None:
                    raise CurveError(
                        f"part {k + 1} step {step} logs no {TOKENS_METRIC} (agent_gym_verl.main_ppo logs it every training "
                        "step; an older run's files lack it): plot against steps (--x steps) instead")
                total += tokens
            cum[step] = total
        out.append(cum)
    return out


def training_steps(parts: Sequence[Run]) -> int:
    """The training steps the parts log (every step but a part's step 0, its start)."""
    return sum(len([s for s in part if s > 0]) for part in parts)


def token_totals(parts: Sequence[Run]) -> tuple[float, int]:
    """(generated tokens, training steps) over all parts: what a run has spent so far."""
    cum = cumulative_tokens(parts)
    return (cum[-1][max(cum[-1])] if cum and cum[-1] else 0.0), training_steps(parts)


def x_axis(x: str) -> tuple[str, str]:
    """The row key and the axis label of ``--x`` (``steps`` or ``tokens``)."""
    if x == "tokens":
        return "generated_tokens", "tokens generated in training (policy tokens)"
    return "step", "training step"


def build_rows(parts: Sequence[Run], source: str, *, val_n: int | None = None, offsets: Sequence[int] | None = None,
               tokens: bool = False) -> list[dict[str, Any]]:
    """One row per validation (see the module docstring), in step order; ``tokens`` adds generated_tokens."""
    rows: list[dict[str, Any]] = []
    cum = cumulative_tokens(parts) if tokens else None
    for k, (part, offset) in enumerate(zip(parts, part_offsets(parts, offsets))):
        for step in sorted(part):
            metrics = part[step]
            p = metrics.get(f"{ACC_PREFIX}{source}{ACC_SUFFIX}")
            if p is None:
                continue
            n = metrics.get(f"val-aux/{source}/episodes", val_n)
            if n is None:
                raise CurveError(f"part {k + 1} step {step}: how many problems the accuracy is over is not logged; pass --val-n N")
            rows.append({
                "step": offset + step,
                "part": k + 1,
                "part_step": step,
                "val_acc": p,
                "val_se": standard_error(p, n),
                "val_n": int(n),
                "tool_call_validity": validity(metrics, source),
                "tool_calls_per_episode": metrics.get(f"val-aux/{source}/tool_calls/mean@1"),
                "train_reward": metrics.get("critic/score/mean"),
                **({"generated_tokens": int(cum[k][step])} if cum is not None else {}),
            })
    if not rows:
        raise CurveError(f"no validation of {source} in the files")
    return rows


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """The rows under the header COLUMNS (plot_training_curve's writer), floats to 6 significant digits; a
    ``run`` column first and a ``generated_tokens`` one last when the rows have them."""
    columns = (("run",) if rows and "run" in rows[0] else ()) + COLUMNS + (
        ("generated_tokens",) if rows and "generated_tokens" in rows[0] else ())
    _curve.write_csv(path, [{c: f"{v:.6g}" if isinstance(v, float) else v for c, v in row.items()} for row in rows], columns)


def summarize(rows: Sequence[dict[str, Any]], source: str) -> str:
    first, last = rows[0], rows[-1]
    diff = last["val_acc"] - first["val_acc"]
    se = math.hypot(first["val_se"], last["val_se"])
    lines = [
        f"{source}: {len(rows)} validations over {last['step']} steps in {last['part']} part(s)",
        f"start: {first['val_acc']:.4f} +- {first['val_se']:.4f} (step {first['step']}, N={first['val_n']})",
        f"end:   {last['val_acc']:.4f} +- {last['val_se']:.4f} (step {last['step']}, N={last['val_n']})",
        f"difference: {diff:+.4f} +- {se:.4f} (unpaired SE; {diff / se:+.1f} SE)" if se > 0 else f"difference: {diff:+.4f}",
    ]
    best = max(rows, key=lambda r: r["val_acc"])
    lines.append(f"best: {best['val_acc']:.4f} +- {best['val_se']:.4f} (step {best['step']})")
    vals = [(r["tool_call_validity"], r["step"]) for r in rows if r["tool_call_validity"] is not None]
    if vals:
        low, at = min(vals)
        lines.append(f"tool-call validity: lowest {low:.4f} (step {at}), last {vals[-1][0]:.4f}")
    else:
        lines.append("tool-call validity: not logged")
    return "\n".join(lines)


def summarize_runs(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], source: str, totals: Sequence[tuple[float, int]]) -> str:
    """Each run's summary and spend, then (two runs or more) each run's last validation against the first run's."""
    lines = []
    for (label, rows), (tokens, steps) in zip(runs, totals):
        lines.append(f"== {label}")
        lines.append(summarize(rows, source))
        lines.append(f"generated tokens: {tokens:,.0f} in {steps} training steps"
                     + (f" ({tokens / steps:,.0f} per step)" if steps else ""))
    (base_label, base), base_tokens = runs[0], totals[0][0]
    for (label, rows), (tokens, _) in zip(runs[1:], totals[1:]):
        a, b = base[-1], rows[-1]
        diff, se = b["val_acc"] - a["val_acc"], math.hypot(a["val_se"], b["val_se"])
        ratio = f", at {tokens / base_tokens:.3f}x the generated tokens" if base_tokens > 0 else ""
        lines.append(f"last validation, {label} - {base_label}: {diff:+.4f} +- {se:.4f} (unpaired SE"
                     + (f"; {diff / se:+.1f} SE" if se > 0 else "") + f"){ratio}")
    return "\n".join(lines)


def plot_runs(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]], path: Path, title: str, x: str) -> None:
    """Several runs' held-out accuracy (+-1 SE) on one axis: training steps or generated tokens."""
    _curve.require_matplotlib()
    key, xlabel = x_axis(x)
    with _curve.png_figure(path, 1, 1, figsize=(8, 4.8), dpi=120) as (_, ax):
        for label, rows in runs:
            n = sorted({r["val_n"] for r in rows})
            ax.errorbar([r[key] for r in rows], [r["val_acc"] for r in rows], yerr=[r["val_se"] for r in rows], fmt="o-",
                        capsize=3, linewidth=1.5, label=f"{label}, N={'/'.join(map(str, n))} (+-1 SE)")
        ax.grid(True, alpha=0.3)
        ax.set_ylabel("held-out greedy accuracy")
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.legend(loc="best", fontsize=8)


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str, train: Sequence[tuple[int, float]] = (),
         x: str = "steps") -> None:
    _curve.require_matplotlib()
    ns = sorted({r["val_n"] for r in rows})
    n_label = f"N={ns[0]}" if len(ns) == 1 else "N=" + "/".join(map(str, ns))
    key, axis_label = x_axis(x)
    valid = [(r[key], 100 * r["tool_call_validity"]) for r in rows if r["tool_call_validity"] is not None]
    if x == "tokens":  # train rewards are placed by step: not on this axis
        train = ()
    layout = ({"figsize": (8, 6), "sharex": True, "gridspec_kw": {"height_ratios": [3, 1.4]}} if valid
              else {"figsize": (8, 4.5)})  # an env without tools logs no validity: no empty panel for it
    with _curve.png_figure(path, 2 if valid else 1, 1, dpi=120, **layout) as (_, axes):
        top, bottom = axes if valid else (axes, None)
        xs = [r[key] for r in rows]
        top.errorbar(xs, [r["val_acc"] for r in rows], yerr=[r["val_se"] for r in rows], fmt="o-", color="tab:orange",
                     capsize=3, linewidth=1.5, label=f"held-out greedy accuracy, {n_label} (+-1 SE)")
        for i in sorted({0, len(rows) - 1}):
            top.annotate(f"{rows[i]['val_acc']:.3f}", (xs[i], rows[i]["val_acc"]), textcoords="offset points",
                         xytext=(0, 9), ha="center", fontsize=9, color="tab:orange")
        if train:
            top.plot(*zip(*train), color="tab:blue", alpha=0.45, linewidth=1, label="train reward (sampled episodes)")
        starts = sorted({r[key] for r in rows if r["part_step"] == 0 and r["part"] > 1})
        for ax in (top, bottom) if bottom is not None else (top,):
            for x in starts:
                ax.axvline(x, color="grey", linestyle=":", linewidth=1)
            ax.grid(True, alpha=0.3)
        top.margins(y=0.15)
        top.set_ylabel("accuracy")
        top.set_title(title)
        top.legend(loc="best", fontsize=8)
        xlabel = axis_label + (" (dotted: a part starts on a fresh machine)" if starts else "")
        if bottom is None:
            top.set_xlabel(xlabel)
            return
        bottom.plot(*zip(*valid), "o-", color="tab:green", label="tool calls that parse and run")
        bottom.axhline(95, color="tab:red", linestyle="--", linewidth=1, label="95%")
        bottom.set_ylabel("validity (%)")
        bottom.set_xlabel(xlabel)
        bottom.legend(loc="lower left", fontsize=8)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plot_heldout_accuracy.py", description=__doc__.splitlines()[0],
                                     epilog="See the module docstring for the rules.")
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE", help="verl FileLogger JSONL files, in order")
    parser.add_argument("--run", action="append", default=[], metavar="LABEL=FILE[,FILE...]",
                        help="a run's files, in order, under a label (repeatable; instead of FILEs): runs on one plot")
    parser.add_argument("--x", choices=("steps", "tokens"), default="steps",
                        help="x-axis: training steps (default) or tokens generated in training (agent_gym/generated_tokens)")
    parser.add_argument("--print-tokens", action="store_true",
                        help="print each run's generated tokens and training steps (tab-separated) and stop")
    parser.add_argument("--csv", type=Path, metavar="PATH", help="write one row per validation here")
    parser.add_argument("--png", type=Path, metavar="PATH", help="draw accuracy and validity here (needs matplotlib)")
    parser.add_argument("--source", help="the data source, when the files validate on several")
    parser.add_argument("--val-n", type=int, metavar="N", help="problems per validation, when the files do not log it")
    parser.add_argument("--offsets", metavar="S0,S1,...", help="each part's first step (default: where the part before ended)")
    parser.add_argument("--title", default="Held-out greedy accuracy", help="plot title")
    args = parser.parse_args(argv)
    offsets = None
    if args.offsets:
        try:
            offsets = [int(x) for x in args.offsets.split(",")]
        except ValueError:
            parser.error(f"--offsets: comma-separated step numbers, got {args.offsets!r}")
    if args.val_n is not None and args.val_n <= 0:
        parser.error("--val-n must be positive")
    if bool(args.files) == bool(args.run):
        parser.error("give the FILEs of one run, or --run LABEL=FILE[,FILE...] for each of several")
    runs_in: list[tuple[str, list[Path]]] = []
    for spec in args.run:
        label, sep, files = spec.partition("=")
        if not sep or not label or not files:
            parser.error(f"--run: LABEL=FILE[,FILE...], got {spec!r}")
        runs_in.append((label, [Path(f) for f in files.split(",") if f]))
    if offsets is not None and args.run:
        parser.error("--offsets is for the FILEs of one run")
    try:
        if args.png is not None:
            _curve.require_matplotlib()
        named = [(label, split_parts([read_metrics_file(p) for p in files])) for label, files in (runs_in or [("", args.files)])]
        if args.print_tokens:
            for label, parts in named:
                tokens, steps = token_totals(parts)
                print(f"{label or 'run'}\t{tokens:.0f}\t{steps}")
            return 0
        found = sorted({src for _, parts in named for src in sources(parts)})
        if args.source is None and len(found) != 1:
            raise CurveError("no greedy accuracy (val-core/<source>/acc/mean@1) in the files" if not found
                             else f"validation on several data sources ({', '.join(found)}): pick one with --source")
        source = args.source or found[0]
        tokens = args.x == "tokens"
        if args.run:
            runs = [(label, [{"run": label, **row} for row in build_rows(parts, source, val_n=args.val_n, tokens=tokens)])
                    for label, parts in named]
            totals = [token_totals(parts) if tokens else (0.0, training_steps(parts)) for _, parts in named]
            if args.csv is not None:
                write_csv(args.csv, [row for _, rows in runs for row in rows])
            if args.png is not None:
                plot_runs(runs, args.png, args.title, args.x)
            text = summarize_runs(runs, source, totals) if tokens else "\n".join(
                f"== {label}\n{summarize(rows, source)}" for label, rows in runs)
        else:
            parts = named[0][1]
            rows = build_rows(parts, source, val_n=args.val_n, offsets=offsets, tokens=tokens)
            if args.csv is not None:
                write_csv(args.csv, rows)
            if args.png is not None:
                plot(rows, args.png, args.title, train_series(parts, part_offsets(parts, offsets)), x=args.x)
            text = summarize(rows, source)
            if tokens:
                total, steps = token_totals(parts)
                text += f"\ngenerated tokens: {total:,.0f} in {steps} training steps"
    except CurveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(text)
    for path in (args.csv, args.png):
        if path is not None:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
