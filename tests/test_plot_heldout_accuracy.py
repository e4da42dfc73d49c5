"""examples/plot_heldout_accuracy.py: held-out accuracy +- SE and tool-call validity of a run trained in parts.

The script is loaded from its file and driven through ``main(argv)``; the PNG test needs matplotlib.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "plot_heldout_accuracy.py"
SRC = "AgentR1/GSM8KTool-v0"
ACC = f"val-core/{SRC}/acc/mean@1"


def _load():
    spec = importlib.util.spec_from_file_location("plot_heldout_accuracy", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pha = _load()


def _val(acc, *, validity=None, valid=None, answered=None, calls=3.5, episodes=512):
    data = {ACC: acc, f"val-aux/{SRC}/tool_calls/mean@1": calls}
    if episodes is not None:
        data[f"val-aux/{SRC}/episodes"] = episodes
    if validity is not None:
        data[f"val-aux/{SRC}/tool_call_validity"] = validity
    if valid is not None:
        data[f"val-aux/{SRC}/tool_calls_valid/mean@1"] = valid
        data[f"val-aux/{SRC}/tool_calls_answered/mean@1"] = answered
    return data


def _jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def parts(tmp_path):
    """Part 1: steps 0-10 (validation at 0, 5, 10), stopped after step 7 and resumed by verl from its
    step-5 checkpoint (a second file starting at 5); part 2, on a fresh machine, starts at step 0 again."""
    a = _jsonl(tmp_path / "part1.jsonl", [
        {"step": 0, "data": _val(0.0625, validity=1.0)},
        *({"step": s, "data": {"critic/score/mean": 0.02 * s}} for s in range(1, 8)),
        {"step": 5, "data": {**_val(0.0800, validity=0.99), "critic/score/mean": 0.1}},
    ])
    a2 = _jsonl(tmp_path / "part1.resumed.jsonl", [
        {"step": 5, "data": _val(0.0820, validity=0.97)},  # re-validated after the resume: wins
        *({"step": s, "data": {"critic/score/mean": 0.03 * s}} for s in range(6, 10)),
        {"step": 10, "data": {**_val(0.1, validity=0.98), "critic/score/mean": 0.25}},
    ])
    b = _jsonl(tmp_path / "part2.jsonl", [
        {"step": 0, "data": _val(0.0990, valid=3.5, answered=3.6)},  # validity from the two means
        {"step": 1, "data": {"critic/score/mean": 0.2}},
        {"step": 2, "data": {**_val(0.125, validity=0.96, episodes=None), "critic/score/mean": 0.3}},
    ])
    return a, a2, b


EXPECTED_CSV = """\
step,part,part_step,val_acc,val_se,val_n,tool_call_validity,tool_calls_per_episode,train_reward
0,1,0,0.0625,0.0106977,512,1,3.5,
5,1,5,0.082,0.0121253,512,0.97,3.5,0.1
10,1,10,0.1,0.0132583,512,0.98,3.5,0.25
10,2,0,0.099,0.0131991,512,0.972222,3.5,
12,2,2,0.125,0.0146158,512,0.96,3.5,0.3
"""


def test_parts_are_offset_resumed_files_merged_and_se_from_n(parts, tmp_path, capsys):
    out = tmp_path / "curve.csv"
    assert pha.main([*map(str, parts), "--csv", str(out), "--val-n", "512"]) == 0
    assert out.read_text() == EXPECTED_CSV
    se0, se1 = math.sqrt(0.0625 * 0.9375 / 512), math.sqrt(0.125 * 0.875 / 512)
    assert f"{se0:.4f}" == "0.0107" and f"{math.hypot(se0, se1):.4f}" == "0.0181"  # the summary's, by hand
    assert capsys.readouterr().out == (
        f"{SRC}: 5 validations over 12 steps in 2 part(s)\n"
        "start: 0.0625 +- 0.0107 (step 0, N=512)\n"
        "end:   0.1250 +- 0.0146 (step 12, N=512)\n"
        "difference: +0.0625 +- 0.0181 (unpaired SE; +3.5 SE)\n"
        "best: 0.1250 +- 0.0146 (step 12)\n"
        "tool-call validity: lowest 0.9600 (step 12), last 0.9600\n"
        f"wrote {out}\n"
    )


def test_explicit_offsets_and_errors(parts, tmp_path, capsys):
    out = tmp_path / "c.csv"
    assert pha.main([*map(str, parts), "--csv", str(out), "--val-n", "512", "--offsets", "0,8"]) == 0
    assert [line.split(",")[0] for line in out.read_text().splitlines()[1:]] == ["0", "5", "10", "8", "10"]
    capsys.readouterr()
    # part 2's last validation does not log its episode count, and no --val-n is given
    assert pha.main([str(p) for p in parts]) == 1
    assert capsys.readouterr().err == "error: part 2 step 2: how many problems the accuracy is over is not logged; pass --val-n N\n"
    assert pha.main([*map(str, parts), "--val-n", "512", "--offsets", "0"]) == 1
    assert capsys.readouterr().err == "error: --offsets gives 1 offset(s) for 2 part(s)\n"
    other = _jsonl(tmp_path / "other.jsonl", [{"step": 0, "data": {"val-core/x/acc/mean@1": 0.5, ACC: 0.1, f"val-aux/{SRC}/episodes": 4}}])
    assert pha.main([str(other)]) == 1
    assert capsys.readouterr().err == f"error: validation on several data sources ({SRC}, x): pick one with --source\n"
    assert pha.main([str(other), "--source", SRC]) == 0
    assert "start: 0.1000 +- 0.1500 (step 0, N=4)" in capsys.readouterr().out
    empty = _jsonl(tmp_path / "train_only.jsonl", [{"step": 1, "data": {"critic/score/mean": 0.1}}])
    assert pha.main([str(empty)]) == 1
    assert capsys.readouterr().err == "error: no greedy accuracy (val-core/<source>/acc/mean@1) in the files\n"


def test_png(parts, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    assert pha.main([*map(str, parts), "--val-n", "512", "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_png_of_an_env_without_tools_has_no_validity_panel(tmp_path, monkeypatch):
    """Countdown-v0 logs no tool-call validity: the figure is the accuracy panel alone."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    run = _jsonl(tmp_path / "run.jsonl", [{"step": 0, "data": _val(0.18, calls=0, episodes=256)},
                                          {"step": 5, "data": {**_val(0.27, calls=0, episodes=256), "critic/score/mean": 0.3}}])
    figures = []
    subplots = plt.subplots
    monkeypatch.setattr(plt, "subplots", lambda *a, **k: figures.append(subplots(*a, **k)) or figures[-1])
    assert pha.main([str(run), "--png", str(tmp_path / "c.png")]) == 0
    assert len(figures[0][0].axes) == 1 and figures[0][0].axes[0].get_ylabel() == "accuracy"
    assert figures[0][0].axes[0].get_xlabel() == "training step"
    figures.clear()
    assert pha.main([str(tmp_path / "run.jsonl"), str(_jsonl(tmp_path / "v.jsonl", [
        {"step": 0, "data": _val(0.1, validity=1.0)}])), "--png", str(tmp_path / "d.png")]) == 0
    assert [ax.get_ylabel() for ax in figures[0][0].axes] == ["accuracy", "validity (%)"]
