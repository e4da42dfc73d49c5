"""Turn verl's file-logger output into a CSV table and a PNG learning curve.

verl's ``FileLogger`` (``trainer.logger='["console","file"]'``, path from ``$VERL_FILE_LOGGER_PATH``)
writes one JSON line per logged step: ``{"step": <int>, "data": {<metric name>: <number>, ...}}``.
This script reads one or more such files (the parts of a run resumed from a checkpoint, in order),
merges them per step, and writes

* a CSV with one row per step: ``step, train_reward, val_reward``, the timing columns, then
  ``response_length/mean``, every ``agent_gym/*`` metric present, and the ``--columns`` extras;
* a PNG (matplotlib, only when ``--png`` is given) of train and validation reward against the step;
* a short summary on stdout.

    python examples/plot_training_curve.py metrics.jsonl --csv curve.csv --png curve.png

Run ``python examples/plot_training_curve.py --help`` for the details.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import statistics
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

TRAIN_KEYS: tuple[str, ...] = ("critic/score/mean", "critic/rewards/mean")
"""Train reward metrics, in order of preference (the first one present at a step is used)."""

VAL_PREFIX = "val-core/"
VAL_SUFFIXES: tuple[str, ...] = ("/reward/mean@1", "/acc/mean@1")
"""A validation reward key is ``val-core/<data_source>/reward/mean@1`` (or ``.../acc/mean@1``)."""

TIMING_KEYS: tuple[str, ...] = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/update_actor",
    "timing_s/testing",
)
RESPONSE_LENGTH_KEY = "response_length/mean"
AGENT_GYM_PREFIX = "agent_gym/"

SUMMARY_WINDOW = 5
"""The summary's train reward means cover this many first and last steps."""

Metrics = dict[str, float]
Run = dict[int, Metrics]

EPILOG = """\
input:
  Each FILE is a JSONL file written by verl's FileLogger: one line per logged step,
  {"step": <int>, "data": {<metric>: <number>, ...}}. Blank lines are skipped; any other
  line that is not such an object is an error naming the file and line number.
  A FILE named *.csv is examples/train_trl.py's --metrics-csv instead: its reward is the
  train reward, step_s the step time, policy_ids the response length, and correct, turns,
  tool_calls, tool_errors the agent_gym/* columns (TRL runs have no validation).
  Several FILEs are the parts of one run (resumed from a checkpoint), given in order:
  metrics are merged per step, and where two files (or two lines) log the same metric at
  the same step, the later one wins. null, NaN, infinite and non-numeric values count as
  absent.

columns:
  step          the training step (step 0 is the validation before training, if any)
  train_reward  critic/score/mean, else critic/rewards/mean
  val_reward    the val-core/<data_source>/reward/mean@1 (or .../acc/mean@1) metric; with
                several data sources, the unweighted mean of theirs. Only the steps that
                ran validation have one (e.g. step 0, then every trainer.test_freq steps).
  timing_s/step, timing_s/gen, timing_s/old_log_prob, timing_s/update_actor,
  timing_s/testing, response_length/mean
                always present, as logged
  agent_gym/*   every adapter metric found in the files, sorted by name
  --columns     the extra metrics asked for, in the order given
  A cell is empty when its metric was not logged at that step.

plot (--png, needs matplotlib):
  Train reward per step as a line, with a moving average when there are more than 10
  points; validation reward as markers joined by a line, its first and last values
  annotated. x = training step, y = mean reward.

summary (stdout):
  steps logged, first/last/max validation reward with their steps, mean train reward
  over the first and last 5 steps that have one, the median of each timing column.

exit status: 0 on success, 1 on a bad input file or a missing matplotlib, 2 on bad usage.

example:
  FileLogger truncates its file when it opens it, so give a resumed run a new path:
  export VERL_FILE_LOGGER_PATH=$HOME/runs/countdown.jsonl
  bash examples/run_smollm2-135m_countdown.sh      # stopped, then resumed with:
  VERL_FILE_LOGGER_PATH=$HOME/runs/countdown.part2.jsonl \\
      bash examples/run_smollm2-135m_countdown.sh
  python examples/plot_training_curve.py ~/runs/countdown.jsonl ~/runs/countdown.part2.jsonl \\
      --csv countdown.csv --png countdown.png --title "SmolLM2-135M GRPO, Countdown easy" \\
      --columns actor/entropy,actor/pg_clipfrac
"""


class CurveError(Exception):
    """A problem with the input files or the environment, reported as ``error: <message>``."""


# --------------------------------------------------------------------------------------- reading


def _as_number(value: Any) -> float | None:
    """The metric value as a number, or None when it is null, non-finite, boolean or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


TRL_CSV_COLUMNS: dict[str, str] = {
    "reward": "critic/score/mean",
    "step_s": "timing_s/step",
    "policy_ids": RESPONSE_LENGTH_KEY,
    "correct": "agent_gym/correct",
    "turns": "agent_gym/turns",
    "tool_calls": "agent_gym/tool_calls",
    "tool_errors": "agent_gym/tool_errors",
}
"""``examples/train_trl.py --metrics-csv`` columns, under the verl metric names this script reads."""


def read_trl_csv(path: Path) -> Run:
    """Read a ``train_trl.py --metrics-csv`` file into ``{step: {metric: value}}`` (:data:`TRL_CSV_COLUMNS`:
    the episodes' mean return is the train reward, the optimizer step's seconds the step time)."""
    run: Run = {}
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "step" not in reader.fieldnames or "reward" not in reader.fieldnames:
                raise CurveError(f"{path}: not a train_trl.py --metrics-csv file (no step and reward columns)")
            for lineno, row in enumerate(reader, start=2):
                try:
                    step = int(row["step"])
                    values = {key: float(row[col]) for col, key in TRL_CSV_COLUMNS.items() if row.get(col)}
                except ValueError:
                    raise CurveError(f"{path}:{lineno}: malformed row, expected numbers") from None
                run.setdefault(step, {}).update({k: v for k, v in values.items() if math.isfinite(v)})
    except (OSError, UnicodeDecodeError) as exc:
        raise CurveError(f"cannot read {path}: {exc}") from None
    return run


def read_metrics_file(path: Path) -> Run:
    """Read one FileLogger JSONL file (or, named ``*.csv``, a ``train_trl.py --metrics-csv`` file: see
    :func:`read_trl_csv`) into ``{step: {metric: value}}``.

    Lines logging the same step are merged, a later line winning per metric. Values that are
    not finite numbers are dropped. Raises :class:`CurveError` for a missing or unreadable file
    and for a malformed line (naming file and line number).
    """
    if not path.is_file():
        raise CurveError(f"no such file: {path}")
    if path.suffix == ".csv":
        return read_trl_csv(path)
    run: Run = {}
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CurveError(f"{path}:{lineno}: malformed line, not JSON ({exc.msg})") from None
                step = record.get("step") if isinstance(record, dict) else None
                data = record.get("data") if isinstance(record, dict) else None
                if isinstance(step, bool) or not isinstance(step, int) or not isinstance(data, dict):
                    raise CurveError(
                        f'{path}:{lineno}: malformed line, expected {{"step": <int>, "data": {{...}}}}'
                    )
                metrics = run.setdefault(step, {})
                for key, value in data.items():
                    number = _as_number(value)
                    if number is not None:
                        metrics[key] = number
    except (OSError, UnicodeDecodeError) as exc:
        raise CurveError(f"cannot read {path}: {exc}") from None
    return run


def merge_runs(parts: Iterable[Run]) -> tuple[Run, list[int]]:
    """Merge the parts of one run in order, a later part winning per (step, metric).

    Returns the merged run and the sorted steps logged by more than one part.
    """
    merged: Run = {}
    overlap: set[int] = set()
    for part in parts:
        for step, metrics in part.items():
            if step in merged:
                overlap.add(step)
            merged.setdefault(step, {}).update(metrics)
    return merged, sorted(overlap)


def load_run(paths: Sequence[Path]) -> tuple[Run, list[int]]:
    """Read and merge ``paths`` (parts of one run, in order); see :func:`merge_runs`.

    Raises :class:`CurveError` when no file logs any step.
    """
    run, overlap = merge_runs(read_metrics_file(p) for p in paths)
    if not run:
        raise CurveError("no steps found in " + ", ".join(str(p) for p in paths))
    return run, overlap


# --------------------------------------------------------------------------------------- table


def train_reward(metrics: Metrics) -> float | None:
    """The step's train reward: the first of :data:`TRAIN_KEYS` present."""
    for key in TRAIN_KEYS:
        if key in metrics:
            return metrics[key]
    return None


def is_val_reward_key(key: str) -> bool:
    """Whether ``key`` is a ``val-core/<data_source>/{reward,acc}/mean@1`` metric."""
    return key.startswith(VAL_PREFIX) and key.endswith(VAL_SUFFIXES)


def val_reward(metrics: Metrics) -> float | None:
    """The step's validation reward: the mean over the data sources' val-core reward metrics."""
    values = [v for k, v in metrics.items() if is_val_reward_key(k)]
    if not values:
        return None
    return values[0] if len(values) == 1 else sum(values) / len(values)


def column_names(run: Run, extras: Sequence[str] = ()) -> list[str]:
    """The CSV header: fixed columns, the ``agent_gym/*`` metrics present, then ``extras``."""
    fixed = ["step", "train_reward", "val_reward", *TIMING_KEYS, RESPONSE_LENGTH_KEY]
    present = {k for metrics in run.values() for k in metrics}
    agent = sorted(k for k in present if k.startswith(AGENT_GYM_PREFIX))
    columns = fixed + agent
    for extra in extras:
        if extra not in columns:
            columns.append(extra)
    return columns


def build_rows(run: Run, columns: Sequence[str]) -> list[dict[str, float | None]]:
    """One dict per step (sorted), keyed by ``columns``; None where a metric is absent."""
    rows = []
    for step in sorted(run):
        metrics = run[step]
        row: dict[str, float | None] = {}
        for col in columns:
            if col == "step":
                row[col] = step
            elif col == "train_reward":
                row[col] = train_reward(metrics)
            elif col == "val_reward":
                row[col] = val_reward(metrics)
            else:
                row[col] = metrics.get(col)
        rows.append(row)
    return rows


def write_csv(path: Path, rows: Sequence[dict[str, float | None]], columns: Sequence[str]) -> None:
    """Write ``rows`` as CSV with header ``columns``; absent values are empty cells."""
    try:
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(columns)
            for row in rows:
                writer.writerow(["" if row[c] is None else row[c] for c in columns])
    except OSError as exc:
        raise CurveError(f"cannot write {path}: {exc}") from None


def _series(rows: Sequence[dict[str, float | None]], column: str) -> list[tuple[int, float]]:
    """The ``(step, value)`` pairs of ``column`` where it is present."""
    return [(int(r["step"]), r[column]) for r in rows if r[column] is not None]  # type: ignore[misc]


# --------------------------------------------------------------------------------------- summary


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _steps_label(points: Sequence[tuple[int, float]]) -> str:
    first, last = points[0][0], points[-1][0]
    return f"step {first}" if first == last else f"steps {first}-{last}"


def summarize(rows: Sequence[dict[str, float | None]]) -> str:
    """A few lines describing the run: steps, validation and train reward, median timings."""
    steps = [int(r["step"]) for r in rows]  # type: ignore[arg-type]
    lines = [f"steps: {len(steps)} logged, {steps[0]} to {steps[-1]}"]

    val = _series(rows, "val_reward")
    if val:
        best_step, best = max(val, key=lambda p: p[1])  # the earliest step on ties
        lines.append(
            f"val reward: first {val[0][1]:.4f} (step {val[0][0]}), last {val[-1][1]:.4f} "
            f"(step {val[-1][0]}), max {best:.4f} (step {best_step}); {_plural(len(val), 'validation')}"
        )
    else:
        lines.append("val reward: not logged")

    train = _series(rows, "train_reward")
    if train:
        head, tail = train[:SUMMARY_WINDOW], train[-SUMMARY_WINDOW:]
        lines.append(
            f"train reward: mean {statistics.fmean(v for _, v in head):.4f} over the first "
            f"{len(head)} ({_steps_label(head)}), {statistics.fmean(v for _, v in tail):.4f} over the "
            f"last {len(tail)} ({_steps_label(tail)}); {_plural(len(train), 'step')} with a train reward"
        )
    else:
        lines.append("train reward: not logged")

    width = max(len(k) for k in TIMING_KEYS)
    for key in TIMING_KEYS:
        values = [v for _, v in _series(rows, key)]
        median = f"{statistics.median(values):.2f} s over {_plural(len(values), 'step')}" if values else "not logged"
        lines.append(f"median {key:<{width}}  {median}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- plot


def require_matplotlib() -> None:
    """Raise :class:`CurveError` with an install hint when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CurveError("--png needs matplotlib, which is not installed: pip install matplotlib") from None


@contextlib.contextmanager
def png_figure(path: Path, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """``plt.subplots(*args, **kwargs)`` (headless), drawn by the ``with`` body, then written to ``path`` as
    a PNG and closed; an OSError while drawing or writing becomes :class:`CurveError`."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(*args, **kwargs)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, format="png")
    except OSError as exc:
        raise CurveError(f"cannot write {path}: {exc}") from None
    finally:
        plt.close(fig)


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average; the first ``window - 1`` points average what is there so far."""
    out: list[float] = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_curve(rows: Sequence[dict[str, float | None]], path: Path, title: str) -> None:
    """Draw train and validation reward against the training step into ``path`` (PNG)."""
    require_matplotlib()  # before the data checks: a missing matplotlib is what --png reports first
    train = _series(rows, "train_reward")
    val = _series(rows, "val_reward")
    if not train and not val:
        raise CurveError("nothing to plot: no train or validation reward in any step")

    with png_figure(path, figsize=(8, 4.5), dpi=120) as (_, ax):
        if train:
            xs, ys = zip(*train)
            ax.plot(xs, ys, color="tab:blue", linewidth=1.2, alpha=0.8, label="train reward")
            if len(train) > 10:
                window = max(5, len(train) // 20)
                ax.plot(
                    xs,
                    moving_average(ys, window),
                    color="tab:blue",
                    linewidth=3,
                    alpha=0.3,
                    label=f"train reward, moving average ({window} steps)",
                )
        if val:
            xs, ys = zip(*val)
            ax.plot(xs, ys, color="tab:orange", marker="o", linewidth=1.5, label="validation reward")
            for i in sorted({0, len(val) - 1}):
                ax.annotate(
                    f"{ys[i]:.3f}",
                    (xs[i], ys[i]),
                    textcoords="offset points",
                    xytext=(0, 8),
                    ha="center",
                    fontsize=9,
                    color="tab:orange",
                )
        ax.margins(y=0.12)  # room above the top point for its label
        ax.set_xlabel("training step")
        ax.set_ylabel("mean reward")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")


# --------------------------------------------------------------------------------------- CLI


def _split_columns(values: Sequence[str] | None) -> list[str]:
    """Flatten repeated comma-separated ``--columns`` values, dropping blanks and duplicates."""
    out: list[str] = []
    for value in values or ():
        for name in value.split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring and ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="plot_training_curve.py",
        description="Turn verl file-logger JSONL output into a per-step CSV, a PNG learning curve "
        "and a short summary on stdout.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="verl FileLogger JSONL file(s); several are parts of one resumed run, in order",
    )
    parser.add_argument("--csv", type=Path, metavar="PATH", help="write the per-step table here")
    parser.add_argument("--png", type=Path, metavar="PATH", help="draw the learning curve here (needs matplotlib)")
    parser.add_argument("--title", help="plot title (default: the first FILE's name)")
    parser.add_argument(
        "--columns",
        action="append",
        metavar="NAMES",
        help="extra metrics for the CSV, comma-separated (may be repeated), e.g. actor/entropy,actor/pg_loss",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (errors go to stderr as ``error: <message>``)."""
    args = build_parser().parse_args(argv)
    extras = _split_columns(args.columns)
    try:
        if args.png is not None:
            require_matplotlib()  # fail before writing anything
        run, overlap = load_run(args.files)
        if overlap:
            print(
                f"note: {len(overlap)} step(s) logged by more than one file ({overlap[0]} to {overlap[-1]}); "
                "the later file's values win",
                file=sys.stderr,
            )
        columns = column_names(run, extras)
        rows = build_rows(run, columns)
        missing = [c for c in extras if all(r[c] is None for r in rows)]
        if missing:
            print(f"note: not logged at any step: {', '.join(missing)}", file=sys.stderr)
        if args.csv is not None:
            write_csv(args.csv, rows, columns)
        if args.png is not None:
            plot_curve(rows, args.png, args.title or f"Training curve: {args.files[0].name}")
    except CurveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(summarize(rows))
    if args.csv is not None:
        print(f"wrote {args.csv}")
    if args.png is not None:
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
