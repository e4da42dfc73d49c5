"""The grounded search expert: exact turns, every name it types already in its context, every episode correct."""

from __future__ import annotations

from collections import Counter

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401
from agent_gym.rollout import ScriptedPolicy, run_episodes
from agent_gym_searchqa.demonstrations import demonstrations, search_turns


def _env(tokenizer, difficulty: str):
    return gym.make("AgentR1/SearchQA-v0", tokenizer=tokenizer, split="train", difficulty=difficulty).unwrapped


def test_a_two_hop_question_searches_both_names_and_opens_the_cut_passage(tokenizer) -> None:
    env = _env(tokenizer, "medium")
    task = env.get_task("train-medium-11")
    assert task.question == "Which organisation did the author of The Tidal Chronicle work for?"
    turns, outcome = search_turns(env, task)
    assert outcome == "kept"
    assert turns == [
        '<tool_call>\n{"name": "search", "arguments": {"query": "The Tidal Chronicle"}}\n</tool_call>',
        '<tool_call>\n{"name": "search", "arguments": {"query": "Magnus Tawal"}}\n</tool_call>',
        # the search result's 200-character snippet stops before the employer: open the passage
        '<tool_call>\n{"name": "open", "arguments": {"doc_id": "w00723"}}\n</tool_call>',
        "<answer>Taefuck Theatre Company</answer>",
    ]


def test_outcomes_are_counted_and_a_chain_the_search_misses_is_skipped(tokenizer) -> None:
    env = _env(tokenizer, "medium")
    played = list(demonstrations(env, offset=0, limit=100))
    assert Counter(outcome for _, _, outcome in played) == {"kept": 99, "not_found": 1}
    assert [(task_id, turns) for task_id, turns, outcome in played if outcome != "kept"] == [("train-medium-52", None)]
    assert [task_id for task_id, _, _ in played[:2]] == ["train-medium-0", "train-medium-1"]


def test_questions_without_a_chain_have_no_demonstration(tokenizer) -> None:
    env = _env(tokenizer, "easy")
    custom = env.task_from_dict({"question": "Who founded Velmont Press?", "golden_answers": ["Ivo Dadov"]})
    assert search_turns(env, custom) == (None, "no_chain")


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_played_demonstrations_are_grounded_and_correct(tokenizer, difficulty: str) -> None:
    env = _env(tokenizer, difficulty)
    kept = [(task_id, turns) for task_id, turns, _ in demonstrations(env, offset=0, limit=24) if turns is not None]
    policy = ScriptedPolicy(tokenizer, lambda conversation, turn: kept[conversation][1][turn - 1])
    result = run_episodes(
        lambda: gym.make("AgentR1/SearchQA-v0", tokenizer=tokenizer, split="train", difficulty=difficulty),
        policy,
        task_ids=[task_id for task_id, _ in kept],
        batch_size=8,
        max_new_tokens=env.max_action_tokens,
        progress=False,
    )
    assert [t.reward for t in result.trajectories] == [1.0] * len(kept)
    assert all(t.final_info["tool_errors"] == 0 for t in result.trajectories)
    for trajectory in result.trajectories:
        for step in trajectory.steps:
            seen = tokenizer.decode(step.prompt_ids)
            text = tokenizer.decode(step.response_ids)
            for key in ('"query": "', '"doc_id": "'):
                if key in text:  # the name or id the expert types is already in what it has read (not the system prompt)
                    typed = text.split(key, 1)[1].split('"', 1)[0]
                    assert typed in seen.split("<|im_start|>user", 1)[1], (trajectory.trajectory_id, typed)
