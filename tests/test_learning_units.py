"""examples/learning_units.py: which unit runs next, its exact commands and its token budget, from result
folders laid out as a committed unit's (no GPU: nothing is trained or evaluated here)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("learning_units", ROOT / "examples" / "learning_units.py")
assert spec is not None and spec.loader is not None
lu = importlib.util.module_from_spec(spec)
sys.modules["learning_units"] = lu  # its dataclasses look their module up there
spec.loader.exec_module(lu)


def write_metrics(path: Path, tokens: list[float]) -> None:
    """A verl FileLogger file: step 0 (validation only), then one line a training step with its tokens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 0, "data": {"val-core/AgentR1/GSM8KTool-v0/acc/mean@1": 0.0625}}]
    lines += [{"step": k, "data": {"agent_gym/generated_tokens": t, "critic/score/mean": 0.05}} for k, t in enumerate(tokens, 1)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def finish(results: Path, name: str, tokens: list[float] | None = None) -> None:
    (results / name).mkdir(parents=True, exist_ok=True)
    if tokens is not None:
        write_metrics(results / name / "metrics.jsonl", tokens)
    (results / name / "eval.json").write_text("{}")


def paths(tmp_path: Path) -> "lu.Paths":
    return lu.Paths(tmp_path / "runs", tmp_path / "models", tmp_path / "data", tmp_path / "results")


def test_units_run_in_order_and_resume_from_results(tmp_path: Path) -> None:
    p = paths(tmp_path)
    assert lu.next_unit(p.results).name == "gsm8k-step-seed1"
    # a unit whose folder has metrics but no eval.json (it stopped midway) is not done
    write_metrics(p.results / "gsm8k-step-seed1" / "metrics.jsonl", [1000.0])
    assert lu.next_unit(p.results).name == "gsm8k-step-seed1"
    finish(p.results, "gsm8k-step-seed1", [1000.0] * 40)
    assert lu.next_unit(p.results).name == "gsm8k-concat-seed1"
    for name in ("gsm8k-concat-seed1", "gsm8k-step-seed2", "gsm8k-concat-seed2", "gsm8k-step-seed3", "gsm8k-concat-seed3"):
        finish(p.results, name)
    assert lu.next_unit(p.results).name == "searchqa-step-seed1"
    finish(p.results, "searchqa-step-seed1")
    assert lu.next_unit(p.results).name == "gsm8k-tree-seed1"
    finish(p.results, "gsm8k-tree-seed1")
    assert lu.next_unit(p.results) is None  # the start models' evaluations run beside the units
    assert lu.main(["next", "--results", str(p.results)]) == 0


def test_next_prints_the_first_units_exact_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = paths(tmp_path)
    args = ["--runs", str(p.runs), "--models", str(p.models), "--data", str(p.data), "--results", str(p.results)]
    assert lu.main(["next", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# unit gsm8k-step-seed1"
    assert lines[1] == (f"[ -e {p.models}/smollm2-135m-tool/config.json ] || agent-gym export-model --model smollm2-135m-tool "
                        f"--out {p.models}/smollm2-135m-tool")
    assert lines[3].endswith(f"agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out {p.data}/gsm8k_tool_val512 --mode step")
    train = shlex.split(lines[4])
    assert train[:12] == ["STEPS=30", "BATCH=32", "N=8", "TEST_FREQ=10", "SAVE_FREQ=10", "MODE=step", "DATA_SEED=1", "PART=1",
                          f"MODEL_PATH={p.models}/smollm2-135m-tool", f"RUN_DIR={p.runs}/gsm8k-step-seed1", "bash",
                          "examples/learn_smollm2-135m_gsm8k_tool.sh"]
    assert (ROOT / train[11]).is_file()
    final = f"{p.runs}/gsm8k-step-seed1/final"
    assert lines[5] == f"agent-gym export-model --model {p.runs}/gsm8k-step-seed1/partK/adapter --out {final}/model --force"
    assert shlex.split(lines[7])[:11] == ["agent-gym", "eval", "AgentR1/GSM8KTool-v0", "--split", "test", "--in-order",
                                          "--episodes", "1319", "--model", f"{final}/model", "--backend"]
    assert lines[7].endswith(f"> {final}/eval.part.json && mv {final}/eval.part.json {final}/eval.json")


def test_concat_trains_to_the_committed_step_units_tokens(tmp_path: Path) -> None:
    p = paths(tmp_path)
    concat = lu.BY_NAME["gsm8k-concat-seed1"]
    with pytest.raises(lu.UnitError, match="gsm8k-step-seed1, which has no results"):
        lu.budget(concat, p.results)
    finish(p.results, "gsm8k-step-seed1", [1000.0] * 30 + [1200.0] * 10)
    write_metrics(p.results / "gsm8k-step-seed1" / "metrics_part2.jsonl", [500.0, 500.0])  # a second part counts too
    assert lu.budget(concat, p.results) == 30 * 1000 + 10 * 1200 + 1000
    # 40 steps of 900 tokens: 7,000 short of 43,000 at 900 a step -> 8 more steps (7.8 rounded)
    assert lu.steps_to_budget(43000.0, 36000.0, 40) == 8
    assert lu.steps_to_budget(43000.0, 42800.0, 40) == 0  # within half a step
    assert lu.steps_to_budget(43000.0, 50000.0, 40) == 0  # over: never negative
    top_up = shlex.split(lu.part_command(concat, p, 2, steps=8))
    assert "STEPS=8" in top_up and "PART=2" in top_up and "MODE=concat" in top_up
    assert "DATA_SEED=1001" in top_up  # its own order of problems, not part 1's again
    assert f"ADAPTER={p.runs}/gsm8k-concat-seed1/part1/adapter" in top_up
    tree = lu.BY_NAME["gsm8k-tree-seed1"]
    assert tree.budget_of == "gsm8k-step-seed1" and tree.settings["TREE_WIDTH"] == "2"


def test_collect_copies_a_runs_files_in_the_results_layout(tmp_path: Path) -> None:
    p = paths(tmp_path)
    run = p.runs / "gsm8k-concat-seed1"
    write_metrics(run / "part1" / "metrics.jsonl", [900.0] * 3)
    write_metrics(run / "part2" / "metrics.jsonl", [900.0])
    (run / "final").mkdir(parents=True)
    # a real `agent-gym eval` trajectory file (64 SearchQA episodes, 39 solved) as the unit's evaluation
    with gzip.open(ROOT / "docs" / "data" / "searchqa-warmstart" / "warm64.jsonl.gz") as fh:
        (run / "final" / "eval.jsonl").write_bytes(fh.read())
    (run / "command.txt").write_text("bash x\n")
    out = tmp_path / "out"
    unit = lu.BY_NAME["gsm8k-concat-seed1"]
    # before the summary the trajectories may be half written: no per-task file yet
    assert sorted(f.name for f in lu.collect(unit, p, out)) == ["command.txt", "metrics.jsonl", "metrics_part2.jsonl"]
    (run / "final" / "eval.json").write_text("{}")
    got = lu.collect(unit, p, out)
    assert sorted(f.name for f in got) == ["command.txt", "eval.json", "eval_tasks.csv", "metrics.jsonl", "metrics_part2.jsonl"]
    assert lu.tokens_of(lu.metrics_files(out)) == (3600.0, 4)
    rows = (out / "eval_tasks.csv").read_text().splitlines()
    assert rows[0] == "seed,task_id,correct,tool_calls,tool_errors" and len(rows) == 65
    assert sum(line.split(",")[2] == "1" for line in rows[1:]) == 39
