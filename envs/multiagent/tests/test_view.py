"""The single-agent views through gymnasium with the default model's real tokenizer: exact messages,
prompt ids and rewards, every way a game ends, the opponents (scripted, a function, a policy with its own
context), snapshots, and the arguments' errors."""

from __future__ import annotations

import copy
import pickle
import sys

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.rollout import ScriptedPolicy
from agent_gym_multiagent.games import load_pyspiel

IDS = ["AgentR1/TicTacToe-v0", "AgentR1/KuhnPoker-v0", "AgentR1/ConnectFour-v0", "AgentR1/Negotiation-v0"]
TTT_SYSTEM = (
    "You are playing TicTacToe as X against O. You move first.\n"
    "The cells are numbered 1 to 9, row by row; three of your marks in a row, a column or a diagonal win.\n"
    "Each turn, think briefly, then end with the number of a free cell in a move tag, for example:\n"
    "<move>5</move>\n"
    "An illegal move (a taken cell, no move tag) loses the game."
)


def act(env, text: str) -> list[int]:
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def rendered(env, messages) -> list[int]:
    template = env.unwrapped.template
    return template.encode(template.render(messages, add_generation_prompt=True))


def fixed(moves):
    """An opponent function that plays the given moves in order."""
    it = iter(moves)
    return lambda state, player, rng: next(it)


def test_registered_with_descriptions():
    cards = {card.id: card for card in agent_gym.list_envs()}
    assert set(IDS) <= set(cards)
    assert cards["AgentR1/KuhnPoker-v0"].description.startswith("Kuhn Poker (OpenSpiel's rules) against opponent=")


def test_tictactoe_exact_messages_ids_and_a_win(tokenizer):
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x", opponent=fixed(["1", "2"]))
    obs, info = env.reset(options={"task_id": "test-x-7"})
    assert info == {"task_id": "test-x-7", "context_tokens": 158}
    assert obs["messages"] == [
        {"role": "system", "content": TTT_SYSTEM},
        {"role": "user", "content": "1 2 3\n4 5 6\n7 8 9\nYour move (1, 2, 3, 4, 5, 6, 7, 8, 9):"},
    ]
    assert obs["prompt_ids"].tolist() == rendered(env, obs["messages"])
    previous = obs["prompt_ids"].tolist()
    action = act(env, "I take the centre. <move>5</move>")
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs["messages"][-1] == {"role": "user", "content": "X played cell 5.\nO played cell 1.\nO 2 3\n4 X 6\n7 8 9\n"
                                                              "Your move (2, 3, 4, 6, 7, 8, 9):"}
    ids = obs["prompt_ids"].tolist()
    assert ids[: len(previous) + len(action)] == previous + action  # no drift: the action's ids as they were
    assert ids == rendered(env, obs["messages"])
    assert info["role"] == "x" and info["opponent"] == "function" and info["opponent_moves"] == ["<move>1</move>"]
    previous = env.step(act(env, "<move>3</move>"))[0]["prompt_ids"].tolist()
    last = act(env, "<move>9</move>\n<move>7</move>")
    obs, reward, terminated, truncated, info = env.step(last)  # the last tag counts
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["outcome"] == "win" and info["correct"] is True and info["reward_components"] == {"outcome": 1.0}
    assert info["legal_moves"] == 3 and info["turn"] == 3 and info["opponent_moves"] == []
    assert obs["messages"][-1] == {"role": "user", "content": "X played cell 7.\nO O X\n4 X 6\nX 8 9\nGame over: you won. Your reward: 1.0."}
    assert obs["prompt_ids"].tolist() == previous + last  # the closing message is kept for the record: no ids follow


def test_tictactoe_loss_draw_and_the_second_role(tokenizer):
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="o", opponent=fixed(["1", "2", "3"]))
    obs, info = env.reset(options={"task_id": "train-o-0"})
    assert obs["messages"][0]["content"].startswith("You are playing TicTacToe as O against X. Your opponent moves first.")
    assert obs["messages"][1]["content"] == "X played cell 1.\nX 2 3\n4 5 6\n7 8 9\nYour move (2, 3, 4, 5, 6, 7, 8, 9):"
    env.step(act(env, "<move>5</move>"))
    obs, reward, terminated, _, info = env.step(act(env, "<move>9</move>"))
    assert (reward, terminated, info["outcome"], info["correct"]) == (-1.0, True, "loss", False)
    assert obs["messages"][-1]["content"] == ("O played cell 9.\nX played cell 3.\nX X X\n4 O 6\n7 8 O\n"
                                              "Game over: you lost. Your reward: -1.0.")
    draw = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x", opponent=fixed(["5", "3", "4", "8"]))
    draw.reset(options={"task_id": "train-x-0"})
    for cell in ["1", "2", "7", "6"]:
        _, reward, terminated, _, info = draw.step(act(draw, f"<move>{cell}</move>"))
        assert not terminated
    _, reward, terminated, _, info = draw.step(act(draw, "<move>9</move>"))
    assert (reward, terminated, info["outcome"]) == (0.0, True, "draw")


@pytest.mark.parametrize("text, why", [
    ("I pass.", "no <move>...</move> tag found (end your turn with your move in one)"),
    ("<move>5</move>", "5 is not a legal move now (legal: 1, 2, 3, 4, 6, 7, 8, 9)"),
    ("<move>0</move>", "cell 0 does not exist (1 to 9)"),
    ("<move>top left</move>", "write one cell number from 1 to 9, got 'top left'"),
])
def test_an_illegal_move_is_a_penalty_with_its_reason(text, why, tokenizer):
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="o", opponent=fixed(["5"]), illegal_move_penalty=0.5)
    env.reset(options={"task_id": "train-o-3"})
    obs, reward, terminated, truncated, info = env.step(act(env, text))
    assert (reward, terminated, truncated) == (-0.5, True, False)
    assert info["outcome"] == "illegal_move" and info["illegal_move"] == why
    assert info["reward_components"] == {"outcome": -0.5} and info["correct"] is False
    assert obs["messages"][-1]["content"].startswith(f"O made an illegal move ({why}).\n")
    assert obs["messages"][-1]["content"].endswith("Game over: you lost by an illegal move. Your reward: -0.5.")


def test_invalid_actions_are_the_base_class_s(tokenizer):
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step([env.unwrapped.template.vocab_size + 5])
    assert (reward, terminated) == (0.0, True) and "outside the vocabulary" in info["invalid_action"]


def test_scripted_opponents_are_seeded_per_task(tokenizer):
    a = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x")
    b = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x")
    replies = []
    for env in (a, b):
        env.reset(options={"task_id": "train-x-11"})
        replies.append([env.step(act(env, f"<move>{c}</move>"))[4]["opponent_moves"] for c in ("5",)])
    assert replies[0] == replies[1]
    heuristic = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x", opponent="heuristic")
    heuristic.reset(seed=1)
    heuristic.step(act(heuristic, "<move>1</move>"))
    _, _, _, _, info = heuristic.step(act(heuristic, "<move>2</move>"))
    assert info["opponent_moves"] == ["<move>3</move>"]  # it blocks 1-2-3
    sides = {gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer).reset(seed=s)[1]["task_id"].split("-")[1] for s in range(8)}
    assert sides == {"x", "o"}  # role=None: both roles, drawn from the seed


def test_kuhn_poker_chips_and_cards(tokenizer):
    env = gym.make("AgentR1/KuhnPoker-v0", tokenizer=tokenizer, role="player_0", opponent=fixed(["bet"]))
    obs, info = env.reset(options={"task_id": "train-player_0-1"})
    card = env.unwrapped.match.game.card(0)
    assert obs["messages"][1]["content"] == f"Your card: {card}.\nPot: 2 chips.\nYour move (pass, bet):"
    obs, reward, terminated, _, info = env.step(act(env, "<move>bet</move>"))
    other = env.unwrapped.match.game.card(1)
    won = "JQK".index(card) > "JQK".index(other)
    assert (reward, terminated, info["outcome"]) == ((2.0, True, "win") if won else (-2.0, True, "loss"))
    assert obs["messages"][-1]["content"] == (
        f"player_0 bets 1 chip.\nplayer_1 calls.\nYour card: {card}.\nPot: 4 chips.\nCards: player_0 {card}, player_1 {other}.\n"
        f"Game over: you {'won' if won else 'lost'}. Your reward: {reward}.")
    fold = gym.make("AgentR1/KuhnPoker-v0", tokenizer=tokenizer, role="player_1", opponent=fixed(["bet"]))
    fold.reset(options={"task_id": "test-player_1-4"})
    _, reward, terminated, _, info = fold.step(act(fold, "<move>fold</move>"))
    assert (reward, terminated, info["outcome"]) == (-1.0, True, "loss")


def test_negotiation_game_and_its_turn_limit(tokenizer):
    env = gym.make("AgentR1/Negotiation-v0", tokenizer=tokenizer, role="player_0", opponent="heuristic", max_moves=2)
    obs, _ = env.reset(options={"task_id": "train-player_0-2"})
    assert env.unwrapped.max_turns == 1
    assert "The game lasts 2 moves in all, taken in turn; you move first." in obs["messages"][0]["content"]
    obs, reward, terminated, truncated, info = env.step(act(env, "<move>pass</move>"))
    assert terminated and not truncated and info["outcome"] in ("draw", "win", "loss")
    assert reward == {"win": 1.0, "draw": 0.0, "loss": -1.0}[info["outcome"]]
    with pytest.raises(ValueError, match="max_moves must be even and >= 2"):
        gym.make("AgentR1/Negotiation-v0", tokenizer=tokenizer, max_moves=5)


def test_a_policy_opponent_plays_from_its_own_context(tokenizer):
    policy = ScriptedPolicy(tokenizer, lambda conversation, turn: ["<move>5</move>", "<move>1</move>"][turn - 1])
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="o", opponent=policy)
    obs, info = env.reset(options={"task_id": "train-o-0"})
    assert obs["messages"][1]["content"].startswith("X played cell 5.")
    seat = env.unwrapped._opponent_seat
    x_opening = seat.context.messages
    assert x_opening[0]["content"] == TTT_SYSTEM
    assert x_opening[1]["content"] == "1 2 3\n4 5 6\n7 8 9\nYour move (1, 2, 3, 4, 5, 6, 7, 8, 9):"
    assert policy.outputs[0].ids == act(env, "<move>5</move>")
    first_prompt = list(seat.context.ids)
    obs, reward, terminated, _, info = env.step(act(env, "<move>9</move>"))
    assert info["opponent"] == "ScriptedPolicy" and info["opponent_moves"] == ["<move>1</move>"]
    assert seat.context.ids[: len(first_prompt)] == first_prompt  # the opponent's context never drifts either
    assert seat.context.messages[-1] == {"role": "assistant", "content": "<move>1</move>"}
    assert env.unwrapped.fork_blocker().startswith("a model opponent's moves come from its sampler")
    frozen = copy.deepcopy(policy)  # a frozen copy is any copy that the learner's updates do not touch
    assert frozen is not policy


def test_a_policy_opponent_s_illegal_and_invalid_moves(tokenizer):
    for reply, outcome, why in [
        ("<move>5</move>", "opponent_illegal_move", "5 is not a legal move now (legal: 1, 2, 3, 4, 6, 7, 8, 9)"),
        ([10**9], "opponent_invalid_action", "token id 1000000000 is outside the vocabulary [0, 49152)"),
    ]:
        policy = ScriptedPolicy(tokenizer, lambda conversation, turn, reply=reply: reply)
        env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x", opponent=policy)
        env.reset(options={"task_id": "train-x-0"})
        obs, reward, terminated, _, info = env.step(act(env, "<move>5</move>"))
        assert (reward, terminated, info["outcome"], info[outcome]) == (0.0, True, outcome, why)
        assert obs["messages"][-1]["content"].endswith("no winner. Your reward: 0.0.")


def test_snapshot_restores_mid_game(tokenizer):
    env = gym.make("AgentR1/ConnectFour-v0", tokenizer=tokenizer, role="x")
    env.reset(options={"task_id": "train-x-5"})
    env.step(act(env, "<move>4</move>"))
    snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
    after = env.step(act(env, "<move>4</move>"))
    other = gym.make("AgentR1/ConnectFour-v0", tokenizer=tokenizer, role="x")
    agent_gym.restore(other, snap)
    again = other.step(act(other, "<move>4</move>"))
    assert np.array_equal(after[0]["prompt_ids"], again[0]["prompt_ids"]) and after[1:4] == again[1:4]
    assert after[4]["opponent_moves"] == again[4]["opponent_moves"]
    assert env.unwrapped.max_context_tokens == 16384 and env.unwrapped.max_turns == 21


def test_argument_errors_name_the_fix(tokenizer):
    with pytest.raises(ValueError, match="role must be one of \\('x', 'o'\\) or None"):
        gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="player_0")
    with pytest.raises(ValueError, match="opponent must be one of \\('random', 'heuristic'\\), a policy"):
        gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, opponent="minimax")
    with pytest.raises(TypeError, match="opponent must be a name, a policy or a function, got int"):
        gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, opponent=3)
    with pytest.raises(ValueError, match="illegal_move_penalty must be >= 0"):
        gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, illegal_move_penalty=-1)
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer)
    with pytest.raises(KeyError, match="ids look like 'train-x-123'"):
        env.reset(options={"task_id": "train-123"})


def test_without_openspiel_the_error_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspiel", None)  # `import pyspiel` raises ImportError
    with pytest.raises(ImportError, match="TicTacToe plays by OpenSpiel's rules: pip install open_spiel"):
        load_pyspiel("TicTacToe")


def test_legal_move_bonus_is_opt_in_shaping_on_the_last_step(tokenizer):
    env = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="x", opponent=fixed(["1"]), legal_move_bonus=0.2)
    env.reset(options={"task_id": "train-x-0"})
    _, reward, _, _, info = env.step(act(env, "<move>5</move>"))
    assert reward == 0.0 and "legal_moves" not in info  # paid at the end, not per step
    _, reward, terminated, _, info = env.step(act(env, "<move>1</move>"))  # taken by O
    assert terminated and reward == pytest.approx(-0.8) and info["legal_moves"] == 1
    assert info["reward_components"] == {"outcome": -1.0, "legal_moves": 0.2}
    with pytest.raises(ValueError, match="legal_move_bonus must be >= 0"):
        gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, legal_move_bonus=-0.1)
