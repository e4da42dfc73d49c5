"""A turn ends at its first end-of-turn id: what follows it is cut, never graded, never appended.

A sampler that does not stop at the stop id (or a batch padded past it) hands the env ids after the
turn's end. They are not part of the turn: every env of the suite keeps the ids up to and including
the first end-of-turn id, grades and appends those, and says how many it cut in
``info["ids_after_end_of_turn"]``; the episode engine records the same kept ids.
"""

from __future__ import annotations

import asyncio

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.rollout import Generation, play_episode

ENV_IDS = sorted(card.id for card in agent_gym.list_envs())


def encode(env, text: str) -> list[int]:
    return env.unwrapped.template.encode(text)


def test_gsm8k_grades_the_answer_before_the_end_of_turn(family_tokenizer):
    env = gym.make("AgentR1/GSM8K-v0", tokenizer=family_tokenizer, split="test")
    env.reset(options={"task_id": "test-0"})  # Janet's ducks: the answer is 18
    eot = env.unwrapped.template.end_of_turn_ids
    after = encode(env, "#### 19")
    _, reward, terminated, truncated, info = env.step(encode(env, "#### 18") + eot + after)
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    assert info["ids_after_end_of_turn"] == len(after)
    assert env.unwrapped.context.messages[-1]["content"].strip() == "#### 18"


def test_an_action_that_ends_with_its_end_of_turn_cuts_nothing(tokenizer):
    env = gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test")
    env.reset(options={"task_id": "test-0"})
    _, _, _, _, info = env.step(encode(env, "#### 18") + env.unwrapped.template.end_of_turn_ids)
    assert "ids_after_end_of_turn" not in info


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_env_steps_a_cut_action_as_the_kept_ids(env_id, tokenizer):
    cut, plain = (gym.make(env_id, tokenizer=tokenizer) for _ in range(2))
    obs_cut, _ = cut.reset(seed=3)
    obs_plain, _ = plain.reset(seed=3)
    assert np.array_equal(obs_cut["prompt_ids"], obs_plain["prompt_ids"])
    eot = cut.unwrapped.template.end_of_turn_ids
    turn = encode(cut, "I think the answer is 4.\n#### 4")
    after = encode(cut, "<answer>1</answer> #### 5") + eot
    got = cut.step(turn + eot + after)
    want = plain.step(turn + eot)
    assert got[4].pop("ids_after_end_of_turn") == len(after)
    assert np.array_equal(got[0]["prompt_ids"], want[0]["prompt_ids"])
    assert got[0]["messages"] == want[0]["messages"]
    assert got[1:] == want[1:]
    prompt = obs_cut["prompt_ids"].tolist()
    if not (got[2] or got[3]):  # appended: the next prompt continues from the kept ids
        assert got[0]["prompt_ids"].tolist()[: len(prompt) + len(turn) + len(eot)] == prompt + turn + eot


def test_the_episode_engine_records_the_kept_ids(tokenizer):
    env = gym.make("AgentR1/GSM8K-v0", tokenizer=tokenizer, split="test")
    eot = env.unwrapped.template.end_of_turn_ids
    kept = encode(env, "#### 18") + eot
    after = encode(env, "#### 19")

    async def generate(prompt_ids):
        ids = kept + after
        return Generation(ids, [-0.5] * len(ids), "length")

    trajectory = asyncio.run(play_episode(env, generate, task_id="test-0"))
    (step,) = trajectory.steps
    assert step.response_ids == kept
    assert step.response_logprobs == [-0.5] * len(kept)
    assert step.info["ids_after_end_of_turn"] == len(after)
    assert trajectory.reward == 1.0
