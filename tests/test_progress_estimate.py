"""The progress bar's time left: estimated from the turns played, not from the episodes finished."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

from agent_gym.rollout import ScriptedPolicy, run_episodes
from agent_gym.rollout.progress import TurnEstimate, format_remaining, progress_bar
from agent_gym.tools import HermesParser


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def play_round(estimate: TurnEstimate, episodes: list[int], seconds: float, clock: Clock) -> None:
    """One lockstep round: every running episode gets one turn, ``seconds`` after the last round."""
    clock.now += seconds
    for i in episodes:
        estimate.turn_done(i)


def test_the_first_finished_episode_of_a_batch_predicts_the_turns_not_the_episode_rate():
    """20 episodes in one batch, 30 s a round, episode 0 answering at once: the run the episode rate
    (1 done in 30 s: 19 * 30 = 570 s left) got wrong by a factor of ten."""
    clock = Clock()
    estimate = TurnEstimate(20, clock=clock)
    for i in range(20):
        estimate.episode_started(i)
    assert estimate.remaining() is None  # nothing said yet about how long an episode is
    play_round(estimate, list(range(20)), 30.0, clock)
    assert estimate.remaining() is None  # turns played, but no episode over: still nothing
    estimate.episode_done(0)
    # Started episodes take (1 + 19 * 2) / 20 = 1.95 turns by what is known; the 19 running ones at
    # least 2 each: 39 turns in all, 20 played in 30 s, so 19 * 1.5 s are left.
    assert estimate.expected_turns() == 39
    assert estimate.remaining() == pytest.approx(28.5)

    # Round 2: five more end after their second turn; the 14 others run on.
    play_round(estimate, list(range(1, 20)), 30.0, clock)
    for i in range(1, 6):
        estimate.episode_done(i)
    assert estimate.turns_done == 39
    assert estimate.expected_turns() == 1 + 5 * 2 + 14 * 3
    assert estimate.remaining() == pytest.approx(60.0 * 14 / 39)

    # The last two rounds end everything: nothing is left.
    play_round(estimate, list(range(6, 20)), 30.0, clock)
    play_round(estimate, list(range(6, 20)), 30.0, clock)
    for i in range(6, 20):
        estimate.episode_done(i)
    assert estimate.running == {} and estimate.finished == 20 and estimate.turns_done == 1 + 10 + 14 * 4
    assert estimate.remaining() == 0.0


def test_episodes_not_started_count_the_mean_and_a_long_runner_one_more_turn():
    clock = Clock()
    estimate = TurnEstimate(10, clock=clock)  # two slots: eight episodes wait
    estimate.episode_started(0)
    estimate.episode_started(1)
    for _ in range(4):
        play_round(estimate, [0, 1], 5.0, clock)
    estimate.episode_done(1)  # 4 turns
    estimate.episode_started(2)
    play_round(estimate, [0, 2], 5.0, clock)
    # Started: 1 (4 turns), 0 (5 played: at least 6), 2 (1 played: at least 2): a mean of 4 turns.
    # Episode 0 is past it (6), episode 2 gets the mean (4); the 7 not started 4 each.
    assert estimate.expected_turns() == 4 + 6 + 4 + 7 * 4
    assert estimate.turns_done == 10
    assert estimate.remaining() == pytest.approx(25.0 * (42 - 10) / 10)


def test_the_bar_draws_the_estimate_in_place_of_the_episode_rate(capsys):
    clock = Clock()
    estimate = TurnEstimate(20, clock=clock)
    bar = progress_bar(20, True, estimate)
    try:
        for i in range(20):
            estimate.episode_started(i)
        assert re.search(r"\| 0/20 \[\d\d:\d\d<\?\]$", str(bar)), str(bar)
        play_round(estimate, list(range(20)), 30.0, clock)
        estimate.episode_done(0)
        bar.update(1)
        assert re.search(r"\| 1/20 \[\d\d:\d\d<00:28\]$", str(bar)), str(bar)  # 28.5 s; tqdm's rate: 570 s
        bar.set_postfix(turns=20, refresh=False)
        assert re.search(r"\| 1/20 \[\d\d:\d\d<00:28, turns=20\]$", str(bar)), str(bar)
    finally:
        bar.close()
    assert format_remaining(None) == "?" and format_remaining(3725.0) == "1:02:05"
    assert "<00:28" in capsys.readouterr().err


def test_a_run_shows_no_estimate_before_an_episode_ends_and_none_left_at_the_end(tokenizer, capsys):
    """A real run (GSM8KTool-v0, scripted turns): the bar's time left is "?" in every draw before the
    first episode ends, and 00:00 once all have."""

    def calc(expression: str) -> str:
        return HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": expression}}])

    def script(conversation: int, turn: int) -> str:
        # Episode i calls the calculator i times, then answers: 1, 2, 3 turns.
        return calc("2 + 2") if turn <= conversation else "#### 4"

    make_env = lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")  # noqa: E731
    capsys.readouterr()
    result = run_episodes(make_env, ScriptedPolicy(tokenizer, script), episodes=3, batch_size=3, progress=True)
    assert [t.num_turns for t in result.trajectories] == [1, 2, 3]
    draws = re.findall(r"\| (\d)/3 \[\d\d:\d\d<([^,\]]+)", capsys.readouterr().err)
    assert draws, "no bar drawn"
    assert {left for done, left in draws if done == "0"} == {"?"}
    assert all(left != "?" for done, left in draws if done != "0")
    assert draws[-1] == ("3", "00:00")
