"""examples/selfplay.py: one real iteration of each training mode with the default model on CPU (the
measured learning run is in docs/performance.md#self-play-on-cpu), and its eval: the same test games in
each role before and after, paired."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "selfplay.py"


@pytest.fixture(scope="module")
def selfplay():
    spec = importlib.util.spec_from_file_location("selfplay_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_help_names_every_option(selfplay, capsys):
    with pytest.raises(SystemExit) as exit_:
        selfplay.parse_args(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for option in ["--game", "--opponent", "--advantage", "--rae-decay", "--iterations", "--tasks", "--group", "--lr",
                   "--eval-games", "--eval-role", "--eval-opponent", "--env-kwarg", "--csv", "--json", "--trajectories"]:
        assert option in text
    assert selfplay.parse_args(["--opponent", "self"]).advantage == "rae" and selfplay.parse_args([]).advantage == "group"


def test_one_iteration_against_random_and_a_paired_eval_in_each_role(selfplay, tmp_path):
    out = selfplay.main(["--game", "kuhnpoker", "--opponent", "random", "--iterations", "1", "--tasks", "1", "--group", "2",
                         "--eval-games", "3", "--eval-temperature", "0", "--eval-temperature", "1", "--max-new-tokens", "12", "--csv", str(tmp_path / "run.csv"),
                         "--json", str(tmp_path / "run.json"), "--png", str(tmp_path / "run.png")])
    assert json.loads((tmp_path / "run.json").read_text()) == json.loads(json.dumps(out))
    [row] = list(csv.DictReader(open(tmp_path / "run.csv")))
    assert row["iteration"] == "1" and row["games"] == "2" and int(row["tokens"]) > 0
    assert sorted(out["eval"]) == ["0", "1"]  # greedy, and sampled at T=1
    evals = out["eval"]["0"]
    assert sorted(evals) == ["all", "player_0", "player_1"]  # 3 test games in each role, the same seeds both times
    assert [evals[k]["before"]["games"] for k in ("all", "player_0", "player_1")] == [6, 3, 3]
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "run.png").unlink()
    assert selfplay.main(["--replot", "--csv", str(tmp_path / "run.csv"), "--json", str(tmp_path / "run.json"),
                          "--png", str(tmp_path / "run.png")]) == json.loads(json.dumps(out)) and (tmp_path / "run.png").stat().st_size > 0
    for k in evals:
        before, after = evals[k]["before"], evals[k]["after"]
        assert before["win"] + before["draw"] + before["loss"] + before["illegal_move"] == pytest.approx(1.0)
        assert evals[k]["win_rate_change"] == pytest.approx(after["win"] - before["win"])


def test_one_self_play_iteration_trains_on_both_roles(selfplay, tmp_path):
    out = selfplay.main(["--game", "kuhnpoker", "--opponent", "self", "--iterations", "1", "--tasks", "2", "--eval-games", "0",
                         "--max-new-tokens", "12", "--csv", str(tmp_path / "self.csv"), "--json", str(tmp_path / "self.json"),
                         "--trajectories", str(tmp_path / "games.jsonl")])
    [row] = list(csv.DictReader(open(tmp_path / "self.csv")))
    games = [json.loads(line) for line in open(tmp_path / "games.jsonl")]
    assert sorted(g["metadata"]["role"] for g in games) == ["player_0", "player_0", "player_1", "player_1"]  # 2 games, both roles
    # the trained ones: every role that moved (an illegal opening move ends a game before the other role's turn)
    assert int(row["games"]) == sum(bool(g["steps"]) for g in games) >= 2
    # RAE's running mean per role, of every role that moved
    assert set(out["baseline"]) == {f"AgentR1/KuhnPoker-v0/{g['metadata']['role']}" for g in games if g["steps"]}
