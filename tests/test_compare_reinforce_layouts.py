"""examples/compare_reinforce_layouts.py: the paired report read from hand-made run CSVs."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "compare_reinforce_layouts.py"
COLUMNS = ["iteration", "mean_reward", "accuracy", "loss", "tokens", "tokens_total", "seconds", "greedy_accuracy", "greedy_se",
           "samples", "trained_tokens", "turns"]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_reinforce_layouts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


compare = _load()


def _write(path: Path, start: float, end: float, rewards: list[float], tokens: int, trained: int, rows: int, turns: float) -> None:
    table = [{**dict.fromkeys(COLUMNS, ""), "iteration": 0, "greedy_accuracy": start, "greedy_se": 0.05}]
    for i, r in enumerate(rewards, 1):
        table.append({**dict.fromkeys(COLUMNS, ""), "iteration": i, "mean_reward": r, "accuracy": r, "loss": 0.1,
                      "tokens": tokens, "tokens_total": tokens * i, "seconds": 1.0, "samples": rows, "trained_tokens": trained, "turns": turns})
    table[-1]["greedy_accuracy"], table[-1]["greedy_se"] = end, 0.05
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        writer.writerows(table)


def test_report_pairs_the_arms_by_seed(tmp_path) -> None:
    _write(tmp_path / "concat-seed1.csv", 0.5, 0.625, [0.5, 0.5, 0.75], 100, 1000, 4, 2.0)
    _write(tmp_path / "step-seed1.csv", 0.5, 0.75, [0.5, 0.75, 0.75], 110, 2000, 8, 2.0)
    _write(tmp_path / "concat-seed2.csv", 0.5, 0.5, [0.25, 0.5, 0.5], 100, 1000, 4, 2.0)
    _write(tmp_path / "step-seed2.csv", 0.5, 0.5, [0.5, 0.5, 0.5], 90, 2000, 8, 2.0)
    _write(tmp_path / "step-seed3.csv", 0.5, 1.0, [1.0], 100, 2000, 8, 2.0)  # no concat arm: not paired
    _write(tmp_path / "concat-seed4.csv", 0.5, 1.0, [1.0], 100, 2000, 8, 2.0)
    _write(tmp_path / "step-seed4.csv", 0.5, 1.0, [1.0, 1.0], 100, 2000, 8, 2.0)
    with open(tmp_path / "step-seed4.csv") as fh:  # its last iteration without the final eval: still running
        lines = fh.read().splitlines()
    (tmp_path / "step-seed4.csv").write_text("\n".join(lines[:-1]) + "\n")
    text, paired = compare.report(tmp_path, last=2)
    assert paired["seeds"] == [1, 2]
    assert paired["end"]["diffs"] == [0.125, 0.0]
    assert paired["end"]["mean"] == 0.0625 and paired["end"]["se"] == pytest.approx(0.0625)
    assert paired["reward"]["diffs"] == [0.125, 0.0]  # the mean of the last 2 iterations
    assert paired["tokens"]["diffs"] == [30, -30] and paired["tokens"]["mean"] == 0
    assert paired["trained"]["diffs"] == [3000, 3000] and paired["trained"]["se"] == 0
    assert paired["gain_step"]["mean"] == 0.125 and paired["gain_concat"]["mean"] == 0.0625
    assert "   3   step     1        0.500      1.000" in text
    assert "   4   step     1        0.500        nan" in text
    assert "step - concat, paired by seed (2 seeds: [1, 2]), mean ± SE:" in text
    assert "greedy end: +0.062 ± 0.062   per seed +0.125, +0.000" in text


def test_a_run_is_finished_when_its_last_iteration_has_its_eval(tmp_path) -> None:
    path = tmp_path / "concat-seed1.csv"
    assert not compare.finished(path, 3)
    _write(path, 0.5, 0.625, [0.5, 0.5, 0.75], 100, 1000, 4, 2.0)
    assert compare.finished(path, 3) and not compare.finished(path, 6)
    assert compare.iterations_of([]) == 6 and compare.iterations_of(["--iterations", "1"]) == 1
    assert math.isnan(compare.mean_se([1.0])[1])


def test_the_plot_is_written(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    _write(tmp_path / "concat-seed1.csv", 0.5, 0.625, [0.5, 0.5, 0.75], 100, 1000, 4, 2.0)
    _write(tmp_path / "step-seed1.csv", 0.5, 0.75, [0.5, 0.75, 0.75], 110, 2000, 8, 2.0)
    compare.main(["report", "--dir", str(tmp_path), "--png", str(tmp_path / "p.png")])
    assert (tmp_path / "p.png").stat().st_size > 0
