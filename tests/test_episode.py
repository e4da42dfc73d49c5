"""The episode engine (``play_episode``) and the token views of its trajectories, on real envs."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.rollout.episode import EndEpisode, play_episode
from agent_gym.rollout.policy import Generation
from agent_gym.tools import HermesParser

GSM8K_TOOL = "AgentR1/GSM8KTool-v0"


def calc(expression: str) -> str:
    return HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": expression}}])


JANET = [calc("16 - 3 - 4"), calc("9 * 2"), "She sells 9 eggs for $2 each.\n#### 18"]


def scripted(env, texts, logprob=-0.5):
    """An async generate function that plays ``texts`` in order and records the prompts it was given."""
    template = env.unwrapped.template
    prompts: list[list[int]] = []

    async def generate(prompt):
        prompts.append(list(prompt))
        ids = template.encode(texts[len(prompts) - 1]) + list(template.end_of_turn_ids)
        return Generation(ids, [logprob] * len(ids), "stop")

    generate.prompts = prompts
    return generate


def test_a_three_turn_tool_episode(tokenizer):
    env = gym.make(GSM8K_TOOL, tokenizer=tokenizer, split="test")
    generate = scripted(env, JANET)
    traj = asyncio.run(play_episode(env, generate, task_id="test-0", trajectory_id="t0", metadata={"run": "x"}))

    assert (traj.id, traj.env_id, traj.task_id, traj.reward, traj.return_) == ("t0", GSM8K_TOOL, "test-0", 1.0, 1.0)
    assert [s.prompt_ids for s in traj.steps] == generate.prompts  # the env's exact prompts
    assert [s.reward for s in traj.steps] == [0.0, 0.0, 1.0]
    assert traj.tail_ids == []  # the env ended it: nothing follows the last action
    assert traj.metadata["finish_reasons"] == ["stop"] * 3
    assert traj.metadata["truncated_reason"] is None and traj.metadata["run"] == "x"
    assert [m["content"] for m in traj.messages if m["role"] == "tool"] == ["9", "18"]

    # The concat view: the final context, policy ids masked 1, env ids 0, log-probs 0.0 on env ids.
    seq = traj.sequence()
    final_context = list(env.unwrapped.context.ids)
    assert seq.prompt_ids + seq.response_ids == final_context
    assert seq.prompt_ids == traj.steps[0].prompt_ids
    policy_ids = [t for t, m in zip(seq.response_ids, seq.response_mask) if m]
    assert policy_ids == [t for s in traj.steps for t in s.response_ids]
    assert all((lp == -0.5) if m else (lp == 0.0) for m, lp in zip(seq.response_mask, seq.response_logprobs))
    # Each id knows its step: actions of step k, then step k's env reply.
    first_reply = len(traj.steps[1].prompt_ids) - len(seq.prompt_ids)
    assert seq.step_index[: len(traj.steps[0].response_ids)] == [0] * len(traj.steps[0].response_ids)
    assert seq.step_index[len(traj.steps[0].response_ids) : first_reply] == [0] * (first_reply - len(traj.steps[0].response_ids))
    assert seq.step_index[first_reply] == 1 and seq.step_index[-1] == 2
    assert traj.token_sequence() == (final_context, [0] * len(seq.prompt_ids) + seq.response_mask)
    assert traj.segments() == [seq]


def test_end_episode_keeps_the_steps_so_far_and_the_env_reply(tokenizer):
    env = gym.make(GSM8K_TOOL, tokenizer=tokenizer, split="test")
    inner = scripted(env, JANET)

    async def generate(prompt):
        if len(inner.prompts) == 1:
            raise EndEpisode("response_length")  # e.g. a trainer's token budget is spent
        return await inner(prompt)

    traj = asyncio.run(play_episode(env, generate, task_id="test-0"))
    [step] = traj.steps
    assert traj.metadata["truncated_reason"] == "response_length"
    # The calculator's reply is there, masked out: the sample is the context the policy would continue.
    context = list(env.unwrapped.context.ids)
    head = len(step.prompt_ids) + len(step.response_ids)
    assert traj.tail_ids == context[head:] and traj.tail_ids
    seq = traj.sequence()
    assert seq.prompt_ids + seq.response_ids == context
    assert seq.response_mask == [1] * len(step.response_ids) + [0] * len(traj.tail_ids)
    # token_sequence is the policy's last context: prompt + action, no trailing reply.
    assert traj.token_sequence()[0] == context[:head]


def test_max_steps_caps_the_episode(tokenizer):
    env = gym.make(GSM8K_TOOL, tokenizer=tokenizer, split="test")
    traj = asyncio.run(play_episode(env, scripted(env, JANET), task_id="test-0", max_steps=2))
    assert len(traj.steps) == 2 and traj.metadata["truncated_reason"] == "max_steps"
    assert traj.steps[-1].terminated is False


def test_other_errors_propagate(tokenizer):
    env = gym.make(GSM8K_TOOL, tokenizer=tokenizer, split="test")

    async def generate(prompt):
        raise RuntimeError("engine down")

    with pytest.raises(RuntimeError, match="engine down"):
        asyncio.run(play_episode(env, generate, task_id="test-0"))


def test_a_rewriting_env_gives_one_segment_per_rewrite(tokenizer):
    """Wordle with ``context="last_k"`` (k=2): it appends for two exchanges, then rewrites after every step."""
    guesses = ["<guess>pious</guess>", "<guess>slate</guess>", "<guess>brace</guess>", "<guess>grace</guess>", "<guess>crane</guess>"]
    env = gym.make("AgentR1/Wordle-v0", tokenizer=tokenizer, context="last_k", last_k=2, max_turns=20)
    generate = scripted(env, guesses)
    traj = asyncio.run(play_episode(env, generate, options={"task": {"word": "crane"}}))
    assert traj.reward == 1.0
    assert [s.new_segment for s in traj.steps] == [False, False, True, True, False]

    segments = traj.segments()
    assert [list(seg.steps) for seg in segments] == [[0, 1, 2], [3], [4]]
    for seg in segments:
        first = traj.steps[seg.steps[0]]
        last = traj.steps[seg.steps[-1]]
        assert seg.prompt_ids == first.prompt_ids == generate.prompts[seg.steps[0]]
        # The segment ends with its last action: prompt + response is that step's whole context.
        assert seg.prompt_ids + seg.response_ids == last.prompt_ids + last.response_ids
        policy = [t for t, m in zip(seg.response_ids, seg.response_mask) if m]
        assert policy == [t for k in seg.steps for t in traj.steps[k].response_ids]
        assert sorted(set(seg.step_index)) == list(seg.steps)
    with pytest.raises(ValueError, match="rewrote its context after step 2"):
        traj.sequence()
