"""Self-play with the default model's real tokenizer: both roles' trajectories from the one episode engine,
in the format of every env (the single-agent view's, step for step), RAE, and failures that never hang."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.rollout import Generation, play_episode
from agent_gym.trajectory import TrajectoryWriter, read_trajectories
from agent_gym.rollout import RoleBaseline, play_selfplay
from agent_gym_multiagent import MultiAgentEnv


def ids(env, text: str) -> list[int]:
    return env.template.encode(text) + list(env.template.end_of_turn_ids)


def script(env, moves: dict[str, list[str]]):
    """A role-conditioned scripted policy: it reads its role from the system prompt, as a model would."""
    left = {role: iter(m) for role, m in moves.items()}

    async def generate(prompt_ids: list[int]) -> Generation:
        text = env.template.decode(prompt_ids)
        role = "x" if "as X against O" in text else "o"
        return Generation(ids(env, f"<move>{next(left[role])}</move>"), [-0.5] * len(ids(env, "<move>1</move>")), "stop")

    return generate


def test_one_policy_plays_both_roles_and_each_gets_its_trajectory(tokenizer, tmp_path):
    env = MultiAgentEnv("tictactoe", tokenizer)
    moves = {"x": ["5", "9", "3", "7"], "o": ["1", "6", "2"]}
    out = asyncio.run(play_selfplay(env, script(env, moves), seed=4, match_id="m1"))
    x, o = out["x"], out["o"]
    assert (x.id, o.id) == ("m1-x", "m1-o") and x.env_id == o.env_id == "AgentR1/TicTacToe-v0"
    assert x.task_id == f"train-x-{env.seed}" and o.task_id == f"train-o-{env.seed}"
    assert (x.reward, o.reward, x.num_turns, o.num_turns) == (1.0, -1.0, 4, 3)
    assert x.final_info["outcome"] == "win" and o.final_info["outcome"] == "loss" and x.terminated and o.terminated
    assert x.metadata["role"] == "x" and o.metadata["match_id"] == "m1" and o.metadata["opponent"] == "self"
    assert [s.response_ids for s in x.steps] == [ids(env, f"<move>{c}</move>") for c in moves["x"]]
    for t in (x, o):
        sample = t.sequence()  # one token sequence per role: no drift between its steps
        assert sum(sample.response_mask) == sum(len(s.response_ids) for s in t.steps)
    with TrajectoryWriter(tmp_path / "selfplay.jsonl", mode="w") as writer:
        writer.write(x)
        writer.write(o)
    back = list(read_trajectories(tmp_path / "selfplay.jsonl"))
    assert [t.id for t in back] == ["m1-x", "m1-o"] and back[1].steps[0].prompt_ids == o.steps[0].prompt_ids


def test_a_role_s_trajectory_is_the_single_agent_view_s_episode(tokenizer):
    """O's self-play trajectory equals play_episode on AgentR1/TicTacToe-v0 (role=o, task train-o-N)
    against an opponent that makes x's moves: same prompt ids, responses, rewards and outcomes."""
    env = MultiAgentEnv("tictactoe", tokenizer)
    moves = {"x": ["5", "9", "3", "7"], "o": ["1", "6", "2"]}
    o = asyncio.run(play_selfplay(env, script(env, moves), seed=11))["o"]
    it = iter(moves["x"])
    view = gym.make("AgentR1/TicTacToe-v0", tokenizer=tokenizer, role="o", opponent=lambda s, p, rng: next(it))
    single = asyncio.run(play_episode(view, script(env, moves), task_id=o.task_id))
    assert [s.prompt_ids for s in single.steps] == [s.prompt_ids for s in o.steps]
    assert [s.response_ids for s in single.steps] == [s.response_ids for s in o.steps]
    assert [s.reward for s in single.steps] == [s.reward for s in o.steps] == [0.0, 0.0, -1.0]
    assert single.final_info["outcome"] == o.final_info["outcome"] == "loss"
    assert single.messages == o.messages


def test_two_policies_by_role_and_a_game_over_before_a_first_turn(tokenizer):
    env = MultiAgentEnv("kuhnpoker", tokenizer)

    async def bad(prompt_ids):
        return Generation([10**9], None, "stop")  # not a token id: the game ends, no rewards

    async def never(prompt_ids):
        raise AssertionError("player_1 never gets a turn")

    out = asyncio.run(play_selfplay(env, {"player_0": bad, "player_1": never}, seed=0))
    p0, p1 = out["player_0"], out["player_1"]
    assert p0.num_turns == 1 and p0.final_info["invalid_action"].startswith("token id 1000000000 is outside")
    assert p0.reward == 0.0 and p1.num_turns == 0 and p1.metadata["truncated_reason"] == "the game ended before this role's first turn"
    assert p0.metadata["opponent"] == "mapping"
    with pytest.raises(ValueError, match="generate names no function for role\\(s\\) \\['player_1'\\]"):
        asyncio.run(play_selfplay(env, {"player_0": bad}))


def test_a_failing_policy_cancels_the_other_role_and_raises(tokenizer):
    env = MultiAgentEnv("tictactoe", tokenizer)
    calls = []

    async def generate(prompt_ids):
        calls.append(len(prompt_ids))
        if len(calls) == 2:
            raise RuntimeError("engine down")
        return Generation(ids(env, "<move>5</move>"), None, "stop")

    async def main():
        with pytest.raises(RuntimeError, match="engine down"):
            await asyncio.wait_for(play_selfplay(env, generate, seed=0), timeout=60)
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    assert asyncio.run(main()) == []  # nothing left waiting for a turn
    assert len(calls) == 2


def test_replay_refuses_a_self_play_trajectory_with_the_reason(tokenizer):
    env = MultiAgentEnv("tictactoe", tokenizer)
    x = asyncio.run(play_selfplay(env, script(env, {"x": ["5", "9", "3", "7"], "o": ["1", "6", "2"]}), seed=1))["x"]
    with pytest.raises(ValueError, match="not JSON values \\(opponent\\), so they were not recorded; pass env_kwargs="):
        agent_gym.replay(x, tokenizer=tokenizer)


def test_role_baseline_is_spiral_s_rae():
    rae = RoleBaseline(decay=0.5)
    assert rae.advantage("tictactoe", "x", 1.0) == 1.0  # the baseline starts at 0, and is read before the update
    assert rae.baseline("tictactoe", "x") == 0.5
    assert rae.advantage("tictactoe", "x", 1.0) == 0.5
    assert rae.advantage("tictactoe", "o", -1.0) == -1.0  # each role its own baseline
    assert rae.values() == {"tictactoe/o": -0.5, "tictactoe/x": 0.75}
    with pytest.raises(ValueError, match="decay must be in \\[0, 1\\)"):
        RoleBaseline(decay=1.0)
    x_first = RoleBaseline(0.9)
    for _ in range(200):  # x wins 3 games of 4: its baseline learns x's edge, o's its handicap
        for r in (1.0, 1.0, 1.0, -1.0):
            x_first.advantages({"x": _Played("AgentR1/TicTacToe-v0", r), "o": _Played("AgentR1/TicTacToe-v0", -r)})
    assert np.isclose(x_first.baseline("AgentR1/TicTacToe-v0", "x"), 0.5, atol=0.2)
    assert np.isclose(x_first.baseline("AgentR1/TicTacToe-v0", "o"), -0.5, atol=0.2)
    assert x_first.advantages({"x": _Played("AgentR1/TicTacToe-v0", 1.0, steps=[])}) == {"x": 0.0}  # no moves: no update
    assert np.isclose(x_first.baseline("AgentR1/TicTacToe-v0", "x"), 0.5, atol=0.2)


class _Played:
    """What RoleBaseline reads of a trajectory."""

    def __init__(self, env_id, ret, steps=("a move",)):
        self.env_id, self.return_, self.steps = env_id, ret, list(steps)
