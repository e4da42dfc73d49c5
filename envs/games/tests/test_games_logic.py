"""Game logic without a tokenizer: level generation (solvable, seeded, split-disjoint), rules, Wordle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_gym_games import frozenlake, sokoban, wordle
from agent_gym_games.common import last_tag, parse_moves, split_of

# -- Sokoban ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("difficulty, count", [("easy", 40), ("medium", 15), ("hard", 4)])
def test_sokoban_levels_are_solved_by_their_reverse_play_solution(difficulty, count):
    cfg = sokoban.LEVELS[difficulty]
    for n in range(count):
        level = sokoban.generate_level(n, difficulty, "train" if n % 3 else "test")
        assert (level.height, level.width, len(level.boxes)) == (cfg.height, cfg.width, cfg.boxes)
        assert not set(level.boxes) & set(level.targets)  # nothing starts solved
        game = sokoban.SokobanGame(level)
        for move in sokoban.moves_from_letters(level.solution):
            assert game.move(move) != "blocked"  # every move of the certificate is legal
        assert game.solved, level.rows()


def test_sokoban_bfs_confirms_easy_levels_and_finds_shorter_solutions():
    for n in range(15):
        level = sokoban.generate_level(n, "easy")
        best = sokoban.solve(level)
        assert best is not None and 1 <= len(best) <= len(level.solution)
        game = sokoban.SokobanGame(level)
        for move in sokoban.moves_from_letters(best):
            game.move(move)
        assert game.solved


def test_sokoban_rules_and_xsb_round_trip():
    level = sokoban.SokobanLevel.from_rows(["######", "#@$_.#", "#_$__#", "#___.#", "######"])
    game = sokoban.SokobanGame(level)
    assert game.move("up") == "blocked"  # wall
    assert game.move("down") == "moved"
    assert game.move("right") == "pushed" and game.boxes == {(1, 2), (2, 3)}
    assert sokoban.SokobanLevel.from_rows(level.rows()).rows() == level.rows()
    assert sokoban.solve(sokoban.SokobanLevel.from_rows(["#####", "#@$.#", "#####"])) == "R"
    assert sokoban.solve(sokoban.SokobanLevel.from_rows(["######", "#@_$.#", "######"])) == "RR"
    assert sokoban.solve(sokoban.SokobanLevel.from_rows(["#####", "#$@.#", "#####"])) is None  # box stuck
    for bad, message in [
        (["#####", "#$$.#", "#####"], "exactly one player"),
        (["#####", "#@$_#", "#####"], "as many targets as boxes"),
        (["#####", "_@$._", "#####"], "border"),
        (["#####", "#@$x#", "#####"], "unknown Sokoban symbol"),
    ]:
        with pytest.raises(ValueError, match=message):
            sokoban.SokobanLevel.from_rows(bad)


def test_sokoban_push_into_box_is_blocked():
    game = sokoban.SokobanGame(sokoban.SokobanLevel.from_rows(["#######", "#@$$..#", "#######"]))
    assert game.move("right") == "blocked"
    assert game.player == (1, 1)


# -- FrozenLake -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("difficulty", sorted(frozenlake.LEVELS))
def test_frozenlake_levels_have_a_safe_path(difficulty):
    cfg = frozenlake.LEVELS[difficulty]
    for n in range(30):
        level = frozenlake.generate_level(n, difficulty, "train" if n % 2 else "test")
        assert len(level.rows) == cfg.size and all(len(r) == cfg.size for r in level.rows)
        assert len(level.solution) >= cfg.min_distance
        game = frozenlake.LakeGame(level)
        for letter in level.solution:
            game.move({"U": "up", "D": "down", "L": "left", "R": "right"}[letter])
        assert game.won and not game.fell


def test_frozenlake_rules():
    level = frozenlake.level_from_mapping({"grid": ["SFH", "FHF", "FFG"]})
    game = frozenlake.LakeGame(level)
    assert game.move("up") == ("blocked", "up")
    assert game.progress() == 0.0
    assert game.move("down")[0] == "moved" and game.progress() == pytest.approx(0.25)
    assert game.move("right") == ("fell", "right") and game.over and not game.won
    assert game.progress() == 0.0
    with pytest.raises(ValueError, match="no safe path"):
        frozenlake.level_from_mapping({"grid": ["SH", "HG"]})
    with pytest.raises(ValueError, match="exactly one S"):
        frozenlake.level_from_mapping({"grid": ["FF", "FG"]})


def test_frozenlake_slipping_is_seeded():
    import numpy as np

    level = frozenlake.generate_level(3, "hard")

    def walk(seed):
        game = frozenlake.LakeGame(level, slip_prob=0.6, rng=np.random.default_rng(seed))
        return [game.move(m) for m in ["up", "left", "down", "right"] * 3 if not game.over]

    assert walk(1) == walk(1)
    assert any(actual != intended for (_, actual), intended in zip(walk(1), ["up", "left", "down", "right"] * 3))


# -- Wordle ---------------------------------------------------------------------------------------------


def test_word_list_is_valid():
    words = wordle.words()
    assert len(words) >= 300 and len(set(words)) == len(words)
    assert all(len(w) == 5 and w.isascii() and w.isalpha() and w.islower() for w in words)
    easy = wordle.answers("easy")
    assert 100 <= len(easy) < len(words) and words[: len(easy)] == easy


@pytest.mark.parametrize(
    "guess, answer, pattern",
    [
        ("crane", "crane", "GGGGG"),
        ("level", "hello", "YG__Y"),
        ("speed", "abide", "__Y_Y"),  # one E in the answer: only the first loose E is marked
        ("eerie", "sleep", "YY___"),  # two E in the answer: the third E gets nothing
        ("allee", "apple", "GY__G"),  # the green E uses up the only E
        ("babes", "abbey", "YYGG_"),
        ("mamma", "maxim", "GGY__"),
    ],
)
def test_wordle_feedback_duplicate_rules(guess, answer, pattern):
    assert wordle.score_guess(guess, answer) == pattern


def _reference_score(guess: str, answer: str) -> str:
    """An independent (slow, obvious) statement of the rules."""
    marks = ["_"] * 5
    unused = list(answer)
    for i in range(5):
        if guess[i] == answer[i]:
            marks[i] = "G"
            unused[i] = None
    for i in range(5):
        if marks[i] != "G" and guess[i] in unused:
            marks[i] = "Y"
            unused[unused.index(guess[i])] = None
    return "".join(marks)


@given(st.text(alphabet="abcde", min_size=5, max_size=5), st.text(alphabet="abcde", min_size=5, max_size=5))
@settings(max_examples=500, deadline=None)
def test_wordle_feedback_matches_reference(guess, answer):
    pattern = wordle.score_guess(guess, answer)
    assert pattern == _reference_score(guess, answer)
    marked = Counter(g for g, p in zip(guess, pattern) if p != "_")
    assert all(marked[c] <= answer.count(c) for c in marked)


def test_wordle_game_rules_and_hard_mode():
    game = wordle.WordleGame("crane", max_guesses=3)
    assert game.guess("toolong") == (None, "a guess must be one word of 5 letters a-z, got 'toolong'")
    assert game.guess("slate")[0] == "__G_G" and not game.over
    assert "Known letters: _ _ A _ E" in game.letter_hints() and "Not in the word: L S T" in game.letter_hints()
    assert game.guess("crane")[0] == "GGGGG" and game.won and game.over
    hard = wordle.WordleGame("crane", hard_mode=True)
    hard.guess("brace")
    assert hard.guess("stone")[1] == "hard mode: letter 2 must be R"
    assert hard.guess("frame")[1] == "hard mode: the guess must contain C"
    assert hard.guess("grace")[1] is None and len(hard.guesses) == 2
    strict = wordle.WordleGame("crane", word_list_only=True)
    assert "not in the word list" in strict.guess("zzzzz")[1]


# -- shared ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("I go <action>up</action>", "up"),
        ("<action>up</action> hmm <Action> left, down </Action>", "left, down"),
        ("cut <action>right, right", "right, right"),
        ("nothing", None),
    ],
)
def test_last_tag(text, expected):
    assert last_tag(text, ("action",)) == expected


def test_parse_moves():
    assert parse_moves("up, U; Left -> d", 5) == (["up", "up", "left", "down"], None, 0)
    assert parse_moves("up up up", 2) == (["up", "up"], None, 1)
    moves, error, _ = parse_moves("up, jump", 5)
    assert moves == [] and error.startswith("unknown move 'jump'")
    assert parse_moves("", 5)[1].startswith("the <action> tag holds no move")


_SNIPPET = (
    "import json\n"
    "from agent_gym_games import sokoban, frozenlake, wordle\n"
    "out = [sokoban.generate_level(n, 'medium', s).rows() for n in (1, 2) for s in ('train', 'test')]\n"
    "out += [list(frozenlake.generate_level(n, 'hard', s).rows) for n in (1, 2) for s in ('train', 'test')]\n"
    "out += [wordle.generate_task(n, 'medium', s).answer for n in range(5) for s in ('train', 'test')]\n"
    "print(json.dumps(out))\n"
)


def test_levels_are_the_same_in_a_fresh_process():
    env = {**os.environ, "PYTHONHASHSEED": "987"}
    result = subprocess.run([sys.executable, "-c", _SNIPPET], capture_output=True, text=True, env=env, timeout=60, check=True)
    here = [sokoban.generate_level(n, "medium", s).rows() for n in (1, 2) for s in ("train", "test")]
    here += [list(frozenlake.generate_level(n, "hard", s).rows) for n in (1, 2) for s in ("train", "test")]
    here += [wordle.generate_task(n, "medium", s).answer for n in range(5) for s in ("train", "test")]
    assert json.loads(result.stdout) == here


def test_splits_are_disjoint():
    train = {"\n".join(frozenlake.generate_level(n, "easy", "train").rows) for n in range(200)}
    test = {"\n".join(frozenlake.generate_level(n, "easy", "test").rows) for n in range(200)}
    assert train and test and not (train & test)
    rooms = {s: {sokoban.split_key(sokoban.generate_level(n, "easy", s)) for n in range(30)} for s in ("train", "test")}
    assert not (rooms["train"] & rooms["test"])
    assert all(split_of(k) == s for s, keys in rooms.items() for k in keys)
    words = {s: {w for w in wordle.answers("all") if split_of("wordle:" + w) == s} for s in ("train", "test")}
    assert words["test"] and not (words["train"] & words["test"])
    assert {wordle.generate_task(n, "medium", "test").answer for n in range(50)} <= words["test"]
