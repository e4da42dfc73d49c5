"""examples/plot_training_curve.py: verl FileLogger JSONL to CSV, summary and PNG.

The script is loaded from its file and driven through ``main(argv)``; only the PNG test needs
matplotlib (skipped without it).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "plot_training_curve.py"

VAL = "val-core/AgentR1/Countdown-v0/reward/mean@1"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plot_training_curve", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ptc = _load()


def _jsonl(path: Path, records: list[dict] | list[str]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _timing(step: float, gen: float, old: float, upd: float) -> dict[str, float]:
    return {"timing_s/step": step, "timing_s/gen": gen, "timing_s/old_log_prob": old, "timing_s/update_actor": upd}


@pytest.fixture
def resumed_run(tmp_path: Path) -> tuple[Path, Path]:
    """Part 1 logs steps 0-4 and dies; part 2 resumes from the step-3 checkpoint.

    Part 2 re-validates step 3 (val_before_train) and redoes step 4, so steps 3 and 4 overlap.
    """
    part1 = _jsonl(
        tmp_path / "run.jsonl",
        [
            {"step": 0, "data": {VAL: 0.15, "timing_s/testing": 10.0}},
            {
                "step": 1,
                "data": {
                    "critic/score/mean": 0.1,
                    "critic/rewards/mean": 0.09,
                    **_timing(20.0, 12.0, 1.0, 4.0),
                    "agent_gym/turns/mean": 2.5,
                    "response_length/mean": 40.0,
                    "actor/entropy": 1.5,
                },
            },
            {"step": 2, "data": {"critic/score/mean": 0.2, **_timing(22.0, 13.0, 1.5, 5.0), "actor/entropy": 1.25}},
            {
                "step": 3,
                "data": {"critic/score/mean": 0.3, VAL: 0.25, "timing_s/testing": 9.0, **_timing(30.0, 14.0, 2.0, 6.0)},
            },
            {"step": 4, "data": {"critic/score/mean": 0.4, "agent_gym/step/padding_fraction": None}},
        ],
    )
    part2 = _jsonl(
        tmp_path / "run.part2.jsonl",
        [
            {"step": 3, "data": {VAL: 0.27, "timing_s/testing": 11.0}},
            "",  # blank lines are skipped
            {
                "step": 4,
                "data": {
                    "critic/score/mean": 0.45,
                    "agent_gym/step/padding_fraction": 0.125,
                    **_timing(24, 15, 2.5, 7),  # ints stay ints in the CSV
                },
            },
            {"step": 5, "data": {"critic/rewards/mean": 0.5, **_timing(26.0, 16.0, 3.0, 8.0)}},
            {"step": 6, "data": {"critic/score/mean": 0.6, VAL: 0.4, "timing_s/testing": 12.0, "actor/entropy": "x"}},
        ],
    )
    return part1, part2


EXPECTED_CSV = """\
step,train_reward,val_reward,timing_s/step,timing_s/gen,timing_s/old_log_prob,timing_s/update_actor,\
timing_s/testing,response_length/mean,agent_gym/step/padding_fraction,agent_gym/turns/mean,actor/entropy,actor/missing
0,,0.15,,,,,10.0,,,,,
1,0.1,,20.0,12.0,1.0,4.0,,40.0,,2.5,1.5,
2,0.2,,22.0,13.0,1.5,5.0,,,,,1.25,
3,0.3,0.27,30.0,14.0,2.0,6.0,11.0,,,,,
4,0.45,,24,15,2.5,7,,,0.125,,,
5,0.5,,26.0,16.0,3.0,8.0,,,,,,
6,0.6,0.4,,,,,12.0,,,,,
"""

EXPECTED_SUMMARY = """\
steps: 7 logged, 0 to 6
val reward: first 0.1500 (step 0), last 0.4000 (step 6), max 0.4000 (step 6); 3 validations
train reward: mean 0.3100 over the first 5 (steps 1-5), 0.4100 over the last 5 (steps 2-6); 6 steps with a train reward
median timing_s/step          24.00 s over 5 steps
median timing_s/gen           14.00 s over 5 steps
median timing_s/old_log_prob  2.00 s over 5 steps
median timing_s/update_actor  6.00 s over 5 steps
median timing_s/testing       11.00 s over 3 steps
"""


def test_resumed_run_csv_and_summary(resumed_run, tmp_path, capsys):
    part1, part2 = resumed_run
    out = tmp_path / "curve.csv"
    extras = ["--columns", "actor/entropy, actor/missing", "--columns", "actor/entropy"]  # duplicates dropped
    argv = [str(part1), str(part2), "--csv", str(out), *extras]
    assert ptc.main(argv) == 0
    assert out.read_text(encoding="utf-8") == EXPECTED_CSV
    captured = capsys.readouterr()
    assert captured.out == EXPECTED_SUMMARY + f"wrote {out}\n"
    assert captured.err == (
        "note: 2 step(s) logged by more than one file (3 to 4); the later file's values win\n"
        "note: not logged at any step: actor/missing\n"
    )


def test_order_of_files_decides_which_value_wins(resumed_run, tmp_path, capsys):
    part1, part2 = resumed_run
    out = tmp_path / "reversed.csv"
    assert ptc.main([str(part2), str(part1), "--csv", str(out)]) == 0
    rows = out.read_text(encoding="utf-8").splitlines()
    assert rows[0].split(",")[:3] == ["step", "train_reward", "val_reward"]
    # step 3: val 0.25 from part 1 now wins; step 4: part 1's 0.4 wins, part 2's padding_fraction stays
    assert rows[4] == "3,0.3,0.25,30.0,14.0,2.0,6.0,9.0,,,"
    assert rows[5] == "4,0.4,,24,15,2.5,7,,,0.125,"


def test_val_reward_averages_data_sources_and_accepts_acc(tmp_path, capsys):
    path = _jsonl(
        tmp_path / "m.jsonl",
        [
            {
                "step": 0,
                "data": {
                    "val-core/AgentR1/Countdown-v0/reward/mean@1": 0.25,
                    "val-core/AgentR1/GSM8K-v0/acc/mean@1": 0.75,
                    "val-aux/AgentR1/GSM8K-v0/reward/mean@1": 0.0,  # not val-core: ignored
                    "val-core/AgentR1/GSM8K-v0/acc/best@4/mean": 1.0,  # not mean@1: ignored
                },
            },
            {"step": 1, "data": {"critic/score/mean": float("nan"), "critic/rewards/mean": 0.5}},
            {"step": 2, "data": {"critic/score/mean": True}},
        ],
    )
    out = tmp_path / "m.csv"
    assert ptc.main([str(path), "--csv", str(out)]) == 0
    assert out.read_text(encoding="utf-8").splitlines()[1:] == [
        "0,,0.5,,,,,,",
        "1,0.5,,,,,,,",  # NaN score: falls back to critic/rewards/mean
        "2,,,,,,,,",  # a boolean is not a metric value
    ]
    assert capsys.readouterr().out.splitlines()[:3] == [
        "steps: 3 logged, 0 to 2",
        "val reward: first 0.5000 (step 0), last 0.5000 (step 0), max 0.5000 (step 0); 1 validation",
        "train reward: mean 0.5000 over the first 1 (step 1), 0.5000 over the last 1 (step 1); "
        "1 step with a train reward",
    ]


def test_summary_without_rewards_or_timings(tmp_path, capsys):
    path = _jsonl(tmp_path / "m.jsonl", [{"step": 7, "data": {"agent_gym/turns/mean": 3}}])
    assert ptc.main([str(path)]) == 0
    assert capsys.readouterr().out == (
        "steps: 1 logged, 7 to 7\n"
        "val reward: not logged\n"
        "train reward: not logged\n"
        "median timing_s/step          not logged\n"
        "median timing_s/gen           not logged\n"
        "median timing_s/old_log_prob  not logged\n"
        "median timing_s/update_actor  not logged\n"
        "median timing_s/testing       not logged\n"
    )


def test_missing_file(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert ptc.main([str(missing), "--csv", str(tmp_path / "x.csv")]) == 1
    assert capsys.readouterr().err == f"error: no such file: {missing}\n"
    assert not (tmp_path / "x.csv").exists()


def test_malformed_json_line_names_file_and_line(resumed_run, capsys):
    part1, part2 = resumed_run
    with part2.open("a", encoding="utf-8") as fh:
        fh.write('{"step": 7, "data": {"critic/score/mean": 0.7}\n')  # missing closing brace
    assert ptc.main([str(part1), str(part2)]) == 1
    assert capsys.readouterr().err == f"error: {part2}:6: malformed line, not JSON (Expecting ',' delimiter)\n"


@pytest.mark.parametrize(
    "line",
    ['{"step": "3", "data": {}}', '{"step": 3}', '{"step": 3, "data": [1]}', '{"step": true, "data": {}}', "[3, {}]"],
)
def test_line_of_the_wrong_shape(tmp_path, capsys, line):
    path = _jsonl(tmp_path / "m.jsonl", [{"step": 0, "data": {}}, line])
    assert ptc.main([str(path)]) == 1
    assert capsys.readouterr().err == f'error: {path}:2: malformed line, expected {{"step": <int>, "data": {{...}}}}\n'


def test_no_steps(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    blank = _jsonl(tmp_path / "blank.jsonl", ["", "   "])
    assert ptc.main([str(empty), str(blank)]) == 1
    assert capsys.readouterr().err == f"error: no steps found in {empty}, {blank}\n"


def test_png_without_matplotlib(resumed_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    out_csv = tmp_path / "c.csv"
    assert ptc.main([str(resumed_run[0]), "--csv", str(out_csv), "--png", str(tmp_path / "c.png")]) == 1
    assert capsys.readouterr().err == "error: --png needs matplotlib, which is not installed: pip install matplotlib\n"
    assert not out_csv.exists()  # fails before writing anything


def test_help_mentions_example(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit) as exc:
        ptc.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and "--columns" in out and "pip install matplotlib" not in out


def test_moving_average():
    assert ptc.moving_average([1.0, 2.0, 3.0, 4.0, 5.0], 3) == [1.0, 1.5, 2.0, 3.0, 4.0]


def test_png(resumed_run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    part1, part2 = resumed_run
    # more than 10 train points, so the moving average is drawn too
    long_run = _jsonl(
        tmp_path / "long.jsonl", [{"step": s, "data": {"critic/score/mean": s / 20}} for s in range(7, 20)]
    )
    png = tmp_path / "curve.png"
    assert ptc.main([str(part1), str(part2), str(long_run), "--png", str(png), "--title", "test run"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.endswith(f"wrote {png}\n")


TRL_HEADER = "step,wall_s,step_s,reward,reward_std,correct,turns,tool_calls,tool_errors,policy_ids\n"


def test_train_trl_metrics_csv_is_read_as_a_run(tmp_path, capsys):
    """examples/train_trl.py --metrics-csv: reward -> train_reward, step_s -> timing_s/step, the env's
    counts -> agent_gym/*; a NaN step time (a step the callback missed) is left empty."""
    trl = tmp_path / "trl.csv"
    trl.write_text(TRL_HEADER + "1,40.5,38.2,0.125,0.33,0.125,1,0,0,41.5\n2,47.0,nan,0.25,0.43,0.25,1,0,0,39\n", encoding="utf-8")
    out = tmp_path / "curve.csv"
    assert ptc.main([str(trl), "--csv", str(out)]) == 0
    rows = out.read_text(encoding="utf-8").splitlines()
    header = rows[0].split(",")
    assert header[:3] == ["step", "train_reward", "val_reward"]
    first, second = (dict(zip(header, r.split(","))) for r in rows[1:])
    assert (first["step"], first["train_reward"], first["val_reward"], first["timing_s/step"]) == ("1", "0.125", "", "38.2")
    assert (second["train_reward"], second["timing_s/step"], second["response_length/mean"]) == ("0.25", "", "39.0")
    assert first["agent_gym/correct"] == "0.125" and first["agent_gym/tool_calls"] == "0.0"
    assert capsys.readouterr().out.startswith("steps: 2 logged, 1 to 2\nval reward: not logged\ntrain reward: mean 0.1875 over the first 2")


def test_a_csv_that_is_not_train_trl_output(tmp_path, capsys):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n", encoding="utf-8")
    assert ptc.main([str(other)]) == 1
    assert capsys.readouterr().err == f"error: {other}: not a train_trl.py --metrics-csv file (no step and reward columns)\n"
    bad = tmp_path / "bad.csv"
    bad.write_text(TRL_HEADER + "1,2.5,1,zero,0,0,1,0,0,3\n", encoding="utf-8")
    assert ptc.main([str(bad)]) == 1
    assert capsys.readouterr().err == f"error: {bad}:2: malformed row, expected numbers\n"
