"""examples/compare_evals.py: the paired comparison of two `agent-gym eval` trajectory files.

The files are written with the project's own TrajectoryWriter, one single-step episode per task whose last
info carries ``correct`` and the tool counters, as `agent-gym eval` writes them.
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import math
from pathlib import Path

import pytest

from agent_gym.trajectory import StepRecord, Trajectory, TrajectoryWriter

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "compare_evals.py"
spec = importlib.util.spec_from_file_location("compare_evals", SCRIPT)
ce = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ce)


def _write(path: Path, correct: list[bool], *, calls: int = 2, errors: int = 0, order=None) -> Path:
    with TrajectoryWriter(path, mode="w") as writer:
        for i in order or range(len(correct)):
            tid = f"run-{i}"
            info = {"correct": correct[i], "tool_calls": calls, "tool_errors": errors if i == 0 else 0}
            step = StepRecord(trajectory_id=tid, step=0, prompt_ids=[1], response_ids=[2], reward=float(correct[i]),
                              terminated=True, truncated=False, info=info)
            writer.write(Trajectory(id=tid, env_id="AgentR1/GSM8KTool-v0", task_id=f"test-{i}", seed=i, steps=[step],
                                    reward=float(correct[i])))
    return path


# 10 tasks: both solve 0-1, only END solves 2-5 (gained 4), only START solves 6 (lost 1), neither 7-9.
START = [True, True, False, False, False, False, True, False, False, False]
END = [True, True, True, True, True, True, False, False, False, False]


def test_paired_difference_se_gained_lost_and_sign_test(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", START, errors=1)
    b = _write(tmp_path / "b.jsonl", END, order=list(reversed(range(10))))  # file order does not matter
    assert ce.main([str(a), str(b), "--json", "--csv", str(tmp_path / "t.csv")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 10
    assert (out["start"]["solved"], out["end"]["solved"]) == (3, 6)
    assert out["difference"] == pytest.approx(0.3)
    # d = +1 on 4 tasks, -1 on 1, 0 on 5: var = 5/10 - 0.3^2 = 0.41
    assert out["paired_se"] == pytest.approx(math.sqrt(0.41 / 10))
    assert (out["gained"], out["lost"]) == (4, 1)
    assert out["sign_test_p"] == pytest.approx(2 * (1 + 5) / 32)  # P(X <= 1), X ~ Bin(5, 1/2), two-sided
    assert out["start"]["tool_call_validity"] == pytest.approx(19 / 20)  # one failed call of 20
    assert out["end"]["tool_call_validity"] == 1.0
    rows = list(csv.DictReader(open(tmp_path / "t.csv")))
    assert [r["task_id"] for r in rows] == [f"test-{i}" for i in range(10)]
    assert rows[2] == {"seed": "2", "task_id": "test-2", "start_correct": "0", "end_correct": "1",
                       "start_tool_calls": "2", "end_tool_calls": "2"}


def test_first_n_keeps_the_first_seeds_and_gz_files_are_read(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", START)
    b = _write(tmp_path / "b.jsonl", END)
    gz = tmp_path / "b.jsonl.gz"
    gz.write_bytes(gzip.compress(b.read_bytes()))
    assert ce.main([str(a), str(gz), "--first", "4"]) == 0
    text = capsys.readouterr().out
    assert "4 tasks, paired by seed and task id" in text
    assert "start  0.5000 (2/4)" in text and "end    1.0000 (4/4)" in text
    assert "end - start +0.5000" in text and "gained 2, lost 0" in text


def test_gz_files_the_writer_writes_are_read_and_damage_names_file_and_line(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl.gz", START)  # `agent-gym eval --out a.jsonl.gz`: one gzip member per line
    b = _write(tmp_path / "b.jsonl", END)
    assert gzip.decompress(a.read_bytes()).count(b"\n") == 10
    assert ce.main([str(a), str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n"], out["start"]["solved"], out["end"]["solved"], out["gained"], out["lost"]) == (10, 3, 6, 4, 1)
    lines = gzip.decompress(a.read_bytes()).split(b"\n")
    lines[4] = lines[4][:20]  # line 5 of 10 cut short: corruption, not a torn last line
    a.write_bytes(gzip.compress(b"\n".join(lines)))
    assert ce.main([str(a), str(b)]) == 1
    assert capsys.readouterr().err == (
        f"compare_evals.py: {a}:5: corrupt trajectory line: Invalid JSON: control character (\\u0000-\\u001F) found while parsing a string at line 2 column 0\n"
    )


def test_files_of_other_episodes_do_not_pair(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", START)
    b = _write(tmp_path / "b.jsonl", END[:8])
    assert ce.main([str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert "the files hold different episodes (2 only in START, 0 only in END)" in err
    assert ce.main([str(a), str(tmp_path / "missing.jsonl")]) == 1
    assert "no trajectory file at" in capsys.readouterr().err


def test_sign_test_edges():
    assert ce.sign_test_p(0, 0) == 1.0
    assert ce.sign_test_p(3, 3) == 1.0
    assert ce.sign_test_p(10, 0) == pytest.approx(2 / 1024)


def test_a_per_task_csv_pairs_like_its_trajectories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _write(tmp_path / "a.jsonl", START, errors=1), _write(tmp_path / "b.jsonl", END)
    ce.write_tasks(tmp_path / "a.csv", ce.read_episodes(a))
    assert (tmp_path / "a.csv").read_text().splitlines()[:2] == ["seed,task_id,correct,tool_calls,tool_errors", "0,test-0,1,2,1"]
    assert ce.read_episodes(tmp_path / "a.csv") == ce.read_episodes(a)
    assert ce.main([str(tmp_path / "a.csv"), str(b), "--json"]) == 0
    from_csv = json.loads(capsys.readouterr().out)
    assert ce.main([str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == from_csv
    assert from_csv["gained"] == 4 and from_csv["lost"] == 1
    (tmp_path / "bad.csv").write_text("seed,task,correct\n0,x,1\n")
    assert ce.main([str(tmp_path / "bad.csv"), str(b)]) == 1
    assert "a per-task CSV has the header seed,task_id,correct,tool_calls,tool_errors" in capsys.readouterr().err
