"""The rules, without a tokenizer: OpenSpiel's games through our move words and board views (every
reachable TicTacToe position against an independent line check, Connect Four's four directions and full
columns, every Kuhn Poker deal and betting line), and Simple Negotiation (our own rules) move by move."""

from __future__ import annotations

import copy
import itertools
import pickle

import numpy as np
import pytest

from agent_gym_multiagent.games import (
    ENV_IDS,
    GAMES,
    ConnectFourState,
    KuhnPokerState,
    NegotiationState,
    TicTacToeState,
    new_game,
)

RNG = np.random.default_rng(0)


def _lines_3x3(cells: str, mark: str) -> bool:
    lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
    return any(all(cells[i] == mark for i in line) for line in lines)


def _cells(state: TicTacToeState) -> str:
    return "".join("".join(row) for row in state.grid())


def test_games_and_env_ids():
    assert list(GAMES) == ["tictactoe", "kuhnpoker", "connectfour", "negotiation"]
    assert ENV_IDS == {"tictactoe": "AgentR1/TicTacToe-v0", "kuhnpoker": "AgentR1/KuhnPoker-v0",
                       "connectfour": "AgentR1/ConnectFour-v0", "negotiation": "AgentR1/Negotiation-v0"}
    with pytest.raises(ValueError, match="unknown game 'chess'; known: tictactoe, kuhnpoker, connectfour, negotiation"):
        new_game("chess", RNG)
    with pytest.raises(TypeError, match="TicTacToe takes no game options, got \\['max_moves'\\]"):
        new_game("tictactoe", RNG, max_moves=4)


def test_every_reachable_tictactoe_position_agrees_with_a_line_check():
    """Depth-first over all 5,478 positions: OpenSpiel's terminal flag and returns, read through our grid,
    equal what an independent three-in-a-row check says; every free cell is a legal move word and every
    taken one is refused."""
    seen: set[str] = set()
    stack = [TicTacToeState(RNG)]
    while stack:
        state = stack.pop()
        cells = _cells(state)
        if cells in seen:
            continue
        seen.add(cells)
        x_won, o_won = _lines_3x3(cells, "x"), _lines_3x3(cells, "o")
        full = "." not in cells
        assert state.over == (x_won or o_won or full), cells
        if state.over:
            assert state.returns() == ([1.0, -1.0] if x_won else [-1.0, 1.0] if o_won else [0.0, 0.0]), cells
            continue
        player = cells.count("x") - cells.count("o")  # x moves when the counts are equal
        assert state.current == player
        free = [str(i + 1) for i, c in enumerate(cells) if c == "."]
        assert state.legal_moves(player) == free and state.legal_moves(1 - player) == []
        for i, c in enumerate(cells):
            if c != ".":
                probe = copy.deepcopy(state)
                assert probe.play(player, str(i + 1)) == f"{i + 1} is not a legal move now (legal: {', '.join(free)})"
                assert _cells(probe) == cells
        for move in free:
            child = copy.deepcopy(state)
            assert child.play(player, move) is None
            stack.append(child)
    assert len(seen) == 5478


def test_tictactoe_move_words_views_and_heuristic():
    s = TicTacToeState(RNG)
    assert s.play(1, "5") == "it is not O's turn"
    assert s.play(0, "10") == "cell 10 does not exist (1 to 9)"
    assert s.play(0, "5 or 6") == "write one cell number from 1 to 9, got '5 or 6'"
    assert s.play(0, "cell 5.") is None
    assert s.describe(0, "cell 5.") == "X played cell 5."
    for player, move in [(1, "1"), (0, "9"), (1, "3")]:
        assert s.play(player, move) is None
    assert s.view(0) == s.view(1) == "O 2 O\n4 X 6\n7 8 X"
    rng = np.random.default_rng(1)
    assert s.heuristic_move(0, rng) == "2"  # block O's 1-2-3
    s.play(0, "7")
    assert s.heuristic_move(1, rng) == "2"  # O wins at 2 (before blocking X's 3-5-7 line, which 7 made)
    assert TicTacToeState(RNG).heuristic_move(0, rng) == "5"  # the centre


def test_connect_four_lines_columns_and_full_column():
    def play(moves: str) -> ConnectFourState:
        s = ConnectFourState(RNG)
        for k, column in enumerate(moves):
            assert s.play(k % 2, column) is None, (moves, k)
        return s

    vertical = play("1212121")
    assert vertical.over and vertical.returns() == [1.0, -1.0]
    horizontal = play("1122334")
    assert horizontal.over and horizontal.returns() == [1.0, -1.0]
    diagonal = play("12234334544")  # x: 1, 2(row 2), 3(row 3), 4(row 4)
    assert diagonal.over and diagonal.returns() == [1.0, -1.0], diagonal.view(0)
    anti = play("176651554444")  # o: column 7 row 1, 6 row 2, 5 row 3, 4 row 4
    assert anti.over and anti.returns() == [-1.0, 1.0], anti.view(0)
    s = play("111111")
    assert s.play(0, "1") == "1 is not a legal move now (legal: 2, 3, 4, 5, 6, 7)"
    assert s.view(0).splitlines() == ["O . . . . . .", "X . . . . . .", "O . . . . . .", "X . . . . . .",
                                      "O . . . . . .", "X . . . . . .", "1 2 3 4 5 6 7"]
    assert ConnectFourState(RNG).play(0, "8") == "column 8 does not exist (1 to 7)"
    block = play("44556")
    assert block.heuristic_move(1, np.random.default_rng(0)) in ("3", "7")  # x threatens 3-4-5-6 and 4-5-6-7
    win = play("445566")
    assert win.heuristic_move(0, np.random.default_rng(0)) in ("3", "7")  # x wins at either end


@pytest.mark.parametrize("cards", list(itertools.permutations(range(3), 2)))
def test_kuhn_poker_every_deal_and_betting_line(cards):
    """Each player's card from the chance outcomes; the payoffs of all five betting lines."""
    high = 0 if cards[0] > cards[1] else 1
    sign = [1.0, -1.0] if high == 0 else [-1.0, 1.0]
    lines = {
        ("pass", "pass"): [1 * sign[0], 1 * sign[1]],
        ("bet", "call"): [2 * sign[0], 2 * sign[1]],
        ("bet", "fold"): [1.0, -1.0],
        ("check", "bet", "call"): [2 * sign[0], 2 * sign[1]],
        ("check", "bet", "fold"): [-1.0, 1.0],
    }
    for line, returns in lines.items():
        s = KuhnPokerState(RNG)
        s.history[:2] = list(cards)  # the deal, as OpenSpiel's two chance actions
        s._state = None
        assert [s.card(0), s.card(1)] == ["JQK"[cards[0]], "JQK"[cards[1]]]
        for k, move in enumerate(line):
            assert s.current == k % 2
            assert s.play(k % 2, move) is None
        assert s.over and s.returns() == returns, line


def test_kuhn_poker_words_and_descriptions():
    s = KuhnPokerState(np.random.default_rng(3))
    assert s.play(0, "raise") == "write pass or bet, got 'raise'"
    assert s.play(0, "Check.") is None and s.describe(0, "check") == "player_0 checks."
    assert s.play(1, "bet") is None and s.describe(1, "bet") == "player_1 bets 1 chip."
    assert s.view(0).splitlines()[1] == "Pot: 3 chips."
    assert s.play(0, "call") is None and s.describe(0, "call") == "player_0 calls."
    assert s.over and s.view(1).splitlines()[-1].startswith("Cards: player_0 ")
    k = KuhnPokerState(RNG)
    k.history[:2] = [2, 0]
    k._state = None
    assert k.heuristic_move(0, RNG) == "bet" and k.heuristic_move(1, RNG) == "pass"


def test_spiel_states_pickle_and_copy_as_their_history():
    s = TicTacToeState(RNG)
    s.play(0, "5")
    s.state  # noqa: B018 - the C++ state exists now
    t = pickle.loads(pickle.dumps(s))
    assert t._state is None and t.history == [4] and t.view(0) == s.view(0)
    u = copy.deepcopy(s)
    u.play(1, "1")
    assert s.history == [4] and u.history == [4, 0]


# -- Simple Negotiation: our own rules ------------------------------------------------------------------


def negotiation(max_moves: int = 8) -> NegotiationState:
    inventory = [{"wood": 3, "wheat": 1, "sheep": 2, "brick": 0, "ore": 1}, {"wood": 0, "wheat": 4, "sheep": 1, "brick": 2, "ore": 3}]
    values = [{"wood": 1, "wheat": 5, "sheep": 2, "brick": 4, "ore": 3}, {"wood": 6, "wheat": 1, "sheep": 2, "brick": 3, "ore": 2}]
    return NegotiationState(inventory, values, [dict(i) for i in inventory], max_moves=max_moves)


@pytest.mark.parametrize("move, why", [
    ("accept", "there is no offer to accept (write an offer or pass)"),
    ("deny", "there is no offer to deny (write an offer or pass)"),
    ("offer 2 wood", "write an offer as 'offer: 2 wood for 1 ore' (you give the left side)"),
    ("offer: 2 gold for 1 ore", "unknown resource 'gold' (one of wood, wheat, sheep, brick, ore)"),
    ("offer: 0 wood for 1 ore", "amounts must be positive"),
    ("offer: wood for ore", "no '<number> <resource>' in 'wood'"),
    ("offer: 1 wood for 1 wood", "a resource cannot be on both sides of an offer"),
    ("offer: 4 wood for 1 wheat", "you have only 3 wood"),
    ("offer: 1 brick for 1 wheat", "you have only 0 brick"),
    ("trade please", "write offer: ..., accept, deny or pass, got 'trade please'"),
    ("", "write offer: ..., accept, deny or pass, got ''"),
])
def test_negotiation_refuses_each_bad_move(move, why):
    s = negotiation()
    assert s.play(0, move) == why
    assert s.moves == 0 and s.pending is None  # nothing changed
    assert s.play(1, "pass") == "it is not player_1's turn"


def test_negotiation_offer_accept_swaps_and_scores():
    s = negotiation()
    assert s.legal_moves(0) == ["offer: <amounts> for <amounts>", "pass"] and s.legal_moves(1) == []
    assert s.play(0, "offer: 2 woods, 1 sheep for 2 wheat") is None
    assert s.describe(0, "") == "player_0 offers 2 wood, 1 sheep for 2 wheat."
    assert s.legal_moves(1) == ["offer: <amounts> for <amounts>", "accept", "deny", "pass"]
    assert "Offer to you: you give 2 wheat and get 2 wood, 1 sheep." in s.view(1)
    assert s.play(1, "Accept!") is None and s.describe(1, "Accept!") == "player_1 accepts the offer."
    assert s.inventory == [{"wood": 1, "wheat": 3, "sheep": 1, "brick": 0, "ore": 1},
                           {"wood": 2, "wheat": 2, "sheep": 2, "brick": 2, "ore": 3}]
    assert s.trades == 1 and s.pending is None
    # player 0: -2 wood (-2), -1 sheep (-2), +2 wheat (+10) = +6; player 1: +12 + 2 - 2 = +12
    assert (s.gain(0), s.gain(1)) == (6, 12)
    for k in range(2, 8):
        assert not s.over
        assert s.play(k % 2, "pass") is None
    assert s.over and s.current is None and s.returns() == [-1.0, 1.0]
    assert s.play(0, "pass") == "it is not player_0's turn"


def test_negotiation_deny_counter_offer_and_accept_without_the_goods():
    s = negotiation(max_moves=6)
    assert s.play(0, "offer: 1 ore for 2 brick") is None
    assert s.play(1, "deny") is None and s.describe(1, "deny") == "player_1 denies the offer."
    assert s.pending is None
    assert s.play(0, "offer: 1 wood for 3 brick") is None
    assert s.play(1, "accept") == "you have only 2 brick, so you cannot accept"
    assert s.play(1, "offer: 1 brick for 1 wood") is None  # a counter-offer replaces the offer
    assert s.pending is not None and s.pending.player == 1
    assert s.play(0, "accept") is None
    assert s.play(1, "pass") is None
    assert s.over and (s.gain(0), s.gain(1)) == (3, 3) and s.returns() == [0.0, 0.0]  # a tie
    assert s.play(0, "accept") == "it is not player_0's turn"


def test_negotiation_own_offer_cannot_be_accepted_and_heuristic():
    s = negotiation()
    s.play(0, "offer: 1 wood for 1 ore")
    s.play(1, "pass")  # passing drops the offer
    assert s.play(0, "accept") == "there is no offer to accept (write an offer or pass)"
    h = negotiation()
    assert h.heuristic_move(0, RNG) == "offer: 1 wood for 1 wheat"  # its cheapest for its dearest
    h.play(0, "offer: 1 wood for 1 wheat")
    assert h.heuristic_move(1, RNG) == "accept"  # +6 - 1 at its values
    h2 = negotiation()
    h2.play(0, "offer: 1 ore for 1 wheat")
    assert h2.heuristic_move(1, RNG) == "accept"  # +2 - 1
    h3 = negotiation()
    h3.play(0, "offer: 1 sheep for 1 brick")
    assert h3.heuristic_move(1, RNG) == "deny"  # +2 - 3


def test_negotiation_deal_is_seeded_and_checked():
    a, b = NegotiationState.deal(np.random.default_rng(5)), NegotiationState.deal(np.random.default_rng(5))
    assert a == b and a.max_moves == 8 and all(1 <= n <= 5 for inv in a.inventory for n in inv.values())
    assert new_game("negotiation", np.random.default_rng(5), max_moves=4).max_moves == 4
    with pytest.raises(ValueError, match="max_moves must be even and >= 2"):
        new_game("negotiation", RNG, max_moves=3)
    with pytest.raises(TypeError, match="Negotiation's only game option is max_moves, got \\['rounds'\\]"):
        new_game("negotiation", RNG, rounds=3)
    assert [a.max_moves_of(0), a.max_moves_of(1)] == [4, 4]
    rng = np.random.default_rng(0)
    for _ in range(50):  # random moves are always legal
        s = NegotiationState.deal(rng)
        while not s.over:
            player = s.current
            assert player is not None
            assert s.play(player, s.random_move(player, rng)) is None
