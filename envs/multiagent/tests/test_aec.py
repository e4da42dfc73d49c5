"""MultiAgentEnv, the AEC API, with the default model's real tokenizer: PettingZoo's loop and flags, each
agent's own context (the single-agent view's, id for id), illegal and invalid actions, truncation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from agent_gym_multiagent import MultiAgentEnv


def act(env, text: str) -> list[int]:
    return env.template.encode(text) + list(env.template.end_of_turn_ids)


def play(env, moves: list[str]) -> list[tuple]:
    """PettingZoo's loop; returns (agent, reward, terminated, truncated, info) of every `last()`."""
    seen, it = [], iter(moves)
    for agent in env.agent_iter(max_iter=100):
        obs, reward, terminated, truncated, info = env.last()
        seen.append((agent, reward, terminated, truncated, dict(info)))
        env.step(None if terminated or truncated else act(env, f"<move>{next(it)}</move>"))
    return seen


def test_the_agent_cycle_of_a_won_game(tokenizer):
    env = MultiAgentEnv("tictactoe", tokenizer)
    env.reset(options={"task_id": "train-x-4"})
    assert env.possible_agents == ["x", "o"] and env.agents == ["x", "o"] and env.agent_selection == "x"
    unseen = env.observe("o")  # told nothing before its first turn
    assert unseen["messages"] == [] and unseen["tools"] == [] and unseen["prompt_ids"].shape == (0,)
    seen = play(env, ["5", "1", "9", "3", "7", "2", "8"])
    assert [(a, r, t) for a, r, t, _, _ in seen] == [
        ("x", 0.0, False), ("o", 0.0, False), ("x", 0.0, False), ("o", 0.0, False), ("x", 0.0, False), ("o", 0.0, False),
        ("x", -1.0, True), ("o", 1.0, True),  # the last steps: O's 2 completed 1-2-3
    ]
    assert seen[-1][4]["outcome"] == "win" and seen[-2][4]["outcome"] == "loss"
    assert seen[-1][4]["task_id"] == "train-o-4" and seen[-1][4]["turn"] == 3 and seen[-1][4]["reward_components"] == {"outcome": 1.0}
    assert env.agents == [] and env.rewards == {"x": -1.0, "o": 1.0}
    assert env.observe("x")["messages"][-1]["content"] == ("X played cell 7.\nO played cell 2.\nO O O\n4 X 6\nX 8 X\n"
                                                           "Game over: you lost. Your reward: -1.0.")
    with pytest.raises(RuntimeError, match="every agent has left; call reset"):
        env.step(act(env, "<move>4</move>"))


def test_each_agent_s_context_is_its_single_agent_view_s(tokenizer):
    """Agent o of game train-o-9 sees, id for id, what AgentR1/TicTacToe-v0 with role=o shows on task
    train-o-9 when x makes the same moves, and its ids only ever grow by its action and its next turn."""
    x_moves, o_moves = ["5", "9", "3", "7"], ["1", "6", "2"]
    view = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="o", opponent=lambda s, p, rng, it=iter(x_moves): next(it))
    view_obs, _ = view.reset(options={"task_id": "train-o-9"})
    env = MultiAgentEnv("tictactoe", tokenizer)
    env.reset(options={"task_id": "train-o-9"})
    env.step(act(env, f"<move>{x_moves[0]}</move>"))
    for k, cell in enumerate(o_moves):
        obs, _, _, _, info = env.last()
        assert env.agent_selection == "o" and info["task_id"] == "train-o-9"
        assert np.array_equal(obs["prompt_ids"], view_obs["prompt_ids"]) and obs["messages"] == view_obs["messages"]
        assert info["context_tokens"] == len(obs["prompt_ids"])
        before, action = obs["prompt_ids"].tolist(), act(env, f"<move>{cell}</move>")
        env.step(action)
        env.step(act(env, f"<move>{x_moves[k + 1]}</move>"))
        view_obs, reward, terminated, _, view_info = view.step(action)
        assert env.observe("o")["prompt_ids"].tolist()[: len(before) + len(action)] == before + action
    assert terminated and reward == -1.0 and view_info["outcome"] == "loss"
    assert env.rewards == {"x": 1.0, "o": -1.0} and env.terminations == {"x": True, "o": True}
    assert env.observe("o")["messages"] == view_obs["messages"]
    assert view_obs["messages"][-1]["content"] == "O played cell 2.\nX played cell 7.\nO O X\n4 X O\nX 8 X\nGame over: you lost. Your reward: -1.0."


def test_illegal_and_invalid_actions_end_the_game(tokenizer):
    env = MultiAgentEnv("kuhnpoker", tokenizer, illegal_move_penalty=2.0)
    env.reset(seed=1)
    env.step(act(env, "<move>raise</move>"))
    assert env.terminations == {"player_0": True, "player_1": True}
    assert env.rewards == {"player_0": -2.0, "player_1": 0.0}
    assert env.infos["player_0"]["illegal_move"] == "write pass or bet, got 'raise'"
    assert env.infos["player_1"]["outcome"] == "opponent_illegal_move" and env.agent_selection == "player_1"
    assert env.observe("player_1")["messages"] == []  # never had a turn
    env.step(None)
    assert env.agent_selection == "player_0"
    with pytest.raises(RuntimeError, match="the game is over for 'player_0': step it with None"):
        env.step(act(env, "<move>bet</move>"))
    env.step(None)
    assert env.agents == []
    env.reset(seed=1)
    env.step(np.zeros((2, 2), dtype=np.int64))
    assert env.rewards == {"player_0": 0.0, "player_1": 0.0} and env.terminations["player_0"]
    assert env.infos["player_0"]["invalid_action"] == "action must be a 1-D sequence of token ids, got shape (2, 2)"
    assert env.infos["player_0"]["outcome"] == "invalid_action"


def test_ids_after_the_end_of_turn_are_cut_and_counted(tokenizer):
    env = MultiAgentEnv("tictactoe", tokenizer)
    env.reset(seed=0)
    action = act(env, "<move>5</move>") + act(env, "<move>1</move>")
    env.step(action)
    assert env.infos["x"]["ids_after_end_of_turn"] == len(act(env, "<move>1</move>"))
    assert env.observe("x")["messages"][-1] == {"role": "assistant", "content": "<move>5</move>"}


def test_a_full_context_truncates_the_game(tokenizer):
    env = MultiAgentEnv("connectfour", tokenizer, max_context_tokens=260)
    env.reset(seed=0)
    for agent in env.agent_iter(max_iter=100):
        obs, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else act(env, "<move>1</move>"))
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert env.rewards == {"x": 0.0, "o": 0.0}
    assert env.infos["x"]["truncated_reason"].startswith("context would pass max_context_tokens=260")


def test_seeding_tasks_spaces_and_errors(tokenizer):
    a, b = MultiAgentEnv("negotiation", tokenizer, max_moves=4), MultiAgentEnv("negotiation", tokenizer, max_moves=4)
    a.reset(seed=3)
    b.reset(seed=3)
    assert a.task_id("player_0") == b.task_id("player_0") and np.array_equal(a.observe("player_0")["prompt_ids"], b.observe("player_0")["prompt_ids"])
    b.reset(options={"task": {"seed": a.seed, "split": "train"}})
    assert np.array_equal(a.observe("player_0")["prompt_ids"], b.observe("player_0")["prompt_ids"])
    assert "The game lasts 4 moves in all" in a.observe("player_0")["messages"][0]["content"]
    assert a.action_space("player_0").contains(np.asarray(act(a, "<move>pass</move>")))
    assert a.observation_space("player_1") is a.observation_space("player_0")
    with pytest.raises(ValueError, match="unknown game 'go'"):
        MultiAgentEnv("go", tokenizer)
    with pytest.raises(TypeError, match="TicTacToe takes no game options"):
        MultiAgentEnv("tictactoe", tokenizer, max_moves=4)
    with pytest.raises(KeyError, match="ids look like 'train-x-123'"):
        MultiAgentEnv("tictactoe", tokenizer).reset(options={"task_id": "nope"})
    with pytest.raises(RuntimeError, match="call reset\\(\\) before step\\(\\)"):
        MultiAgentEnv("tictactoe", tokenizer).step([1])
