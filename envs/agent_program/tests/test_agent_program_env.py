"""AgentR1/AgentProgram-v0: real programs (callables in threads, commands in subprocesses) against the real
endpoint on a localhost socket, played by the episode engine with scripted token ids (no model here; the
real model plays it in tests/test_agent_program_openai.py)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.error
import urllib.request

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.rollout import Generation, ScriptedPolicy, play_episode
from agent_gym.rollout.async_runner import run_episodes_concurrent
from agent_gym_agent_program.demo import SYSTEM_PROMPT
from agent_gym_agent_program.env import ProgramError

ENV_ID = "AgentR1/AgentProgram-v0"
CALL = '<tool_call>\n{{"name": "calculate", "arguments": {{"expression": "{}"}}}}\n</tool_call>'


def ids(env, text: str) -> list[int]:
    template = env.unwrapped.template
    return template.encode(text) + template.end_of_turn_ids


def scripted(env, texts):
    """A generate function that answers the env's prompts with ``texts`` in turn."""
    turns = iter(texts)

    async def generate(prompt):
        return Generation(ids(env, next(turns)), None, "stop")

    return generate


def chat(base_url, api_key, messages, **body):
    request = urllib.request.Request(base_url + "/chat/completions",
                                     data=json.dumps({"model": "m", "messages": messages, **body}).encode(),
                                     headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["choices"][0]["message"]


def test_is_registered_and_passes_the_contract(tokenizer):
    from agent_gym.core.contract import check_contract

    assert ENV_ID in {c.id for c in agent_gym.list_envs()}
    report = check_contract(ENV_ID, tokenizer=tokenizer)
    report.raise_if_failed()
    assert report["no_drift"].status == "pass" and report["gymnasium"].status == "pass"


def test_the_demo_plays_a_tool_call_and_is_graded(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, split="test")
    obs, info = env.reset(options={"task_id": "test-3"})
    task = env.unwrapped.task
    expression = task["prompt"].removeprefix("What is ").removesuffix("?")
    first = obs["prompt_ids"].tolist()
    assert obs["messages"][0]["content"].startswith(SYSTEM_PROMPT + "\n\nYou can call these tools:\n<tools>")
    assert obs["messages"][1] == {"role": "user", "content": task["prompt"]}
    assert [t["function"]["name"] for t in obs["tools"]] == ["calculate"]
    action = ids(env, CALL.format(expression))
    obs, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["new_segment"], info["tool_calls"]) == (0.0, False, False, False, 1)
    prompt = obs["prompt_ids"].tolist()
    assert prompt[: len(first) + len(action)] == first + action  # the action's ids verbatim
    assert tokenizer.decode(prompt[len(first) + len(action):]) == (
        f"\n<|im_start|>tool\n{task['answer']}<|im_end|>\n<|im_start|>assistant\n")  # the program ran the call
    obs, reward, terminated, truncated, info = env.step(ids(env, f"So it is\n#### {task['answer']}"))
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
    assert info["program_result"] == f"So it is\n#### {task['answer']}"
    env.close()


def summarising_program(base_url, api_key, task):
    """Asks once, then starts over from a summary: the second request does not extend the first."""
    first = chat(base_url, api_key, [{"role": "user", "content": "Say a number."}])
    return chat(base_url, api_key, [{"role": "system", "content": f"Earlier you said: {first['content']}"},
                                    {"role": "user", "content": "Now say #### 7"}])["content"]


def test_a_program_that_rewrites_its_history_starts_a_new_segment(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, program=summarising_program, tasks=[{"id": "a", "answer": "7"}])
    trajectory = asyncio.run(play_episode(env, scripted(env, ["5", "#### 7"])))
    assert [s.new_segment for s in trajectory.steps] == [True, False]
    assert trajectory.reward == 1.0
    segments = trajectory.segments()
    assert len(segments) == 2
    template = env.unwrapped.template
    fresh = template.encode_prompt(template.render([{"role": "system", "content": "Earlier you said: 5"},
                                                    {"role": "user", "content": "Now say #### 7"}]))
    assert segments[1].prompt_ids == fresh
    assert segments[0].response_ids == ids(env, "5")
    env.close()


def crashing_program(base_url, api_key, task):
    chat(base_url, api_key, [{"role": "user", "content": "hi"}])
    raise ValueError("boom")


def hanging_program(base_url, api_key, task):
    chat(base_url, api_key, [{"role": "user", "content": "hi"}])
    time.sleep(60)


def test_a_crash_and_a_hang_end_the_episode_with_the_reason(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, program=crashing_program, tasks=[{"id": "a", "answer": "1"}])
    env.reset()
    _, reward, terminated, truncated, info = env.step(ids(env, "hello"))
    assert (reward, terminated, truncated, info["truncated_reason"]) == (0.0, False, True, "program_error")
    assert info["program_error"].startswith("ValueError: boom (at test_agent_program_env.py:")
    env.close()

    env = gym.make(ENV_ID, tokenizer=tokenizer, program=hanging_program, tasks=[{"id": "a", "answer": "1"}], time_limit_s=0.5)

    async def slow_policy(prompt):
        await asyncio.sleep(1.0)  # the policy's time is not the program's
        return Generation(ids(env, "hello"), None, "stop")

    trajectory = asyncio.run(play_episode(env, slow_policy))
    info = trajectory.final_info
    assert (trajectory.truncated, info["truncated_reason"]) == (True, "program_timeout")
    assert "time_limit_s=0.5" in info["program_error"]
    env.close()


def silent_program(base_url, api_key, task):
    raise RuntimeError("no model needed")


def test_a_program_that_fails_before_its_first_request_has_no_episode(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, program=silent_program, tasks=[{"id": "a", "answer": "1"}])
    with pytest.raises(ProgramError, match="made no request: RuntimeError: no model needed"):
        env.reset()
    env.close()


def test_a_command_program_and_a_test_grader(tokenizer, tmp_path):
    env = gym.make(ENV_ID, tokenizer=tokenizer, split="test",
                   program=[sys.executable, "-m", "agent_gym_agent_program.demo"])
    obs, _ = env.reset(options={"task_id": "test-1"})
    answer = env.unwrapped.task["answer"]
    _, reward, terminated, _, info = env.step(ids(env, f"#### {answer}"))
    assert (reward, terminated, info["program_result"]) == (1.0, True, f"#### {answer}\n")
    env.close()

    writer = tmp_path / "writer.py"  # a program that leaves a file; the test checks it in the same folder
    writer.write_text(
        "import json, os, urllib.request\n"
        "body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'Name a file.'}]}).encode()\n"
        "r = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=body,\n"
        "    headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], 'Content-Type': 'application/json'})\n"
        "name = json.loads(urllib.request.urlopen(r).read())['choices'][0]['message']['content']\n"
        "open(name, 'w').write(json.loads(os.environ['AGENT_GYM_TASK'])['id'])\n")
    test = [sys.executable, "-c", "import json, os, sys; sys.exit(open('out.txt').read() != json.loads(os.environ['AGENT_GYM_TASK'])['id'])"]
    env = gym.make(ENV_ID, tokenizer=tokenizer, program=[sys.executable, str(writer)], grader=test, tasks=[{"id": "t1"}])
    for name, want in (("out.txt", 1.0), ("other.txt", 0.0)):
        env.reset()
        _, reward, terminated, _, info = env.step(ids(env, name))
        assert (reward, terminated, info["correct"]) == (want, True, want == 1.0)
    env.close()

    env = gym.make(ENV_ID, tokenizer=tokenizer, program=[sys.executable, "-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"],
                   tasks=[{"id": "a", "answer": "1"}])
    with pytest.raises(ProgramError, match="exit code 3; stderr ends: x"):
        env.reset()
    env.close()


def retrying_program(base_url, api_key, task):
    """Too long a request first (answered 400), then a short one; then one request too many."""
    try:
        chat(base_url, api_key, [{"role": "user", "content": "blah " * 600}])
    except urllib.error.HTTPError as error:
        assert json.loads(error.read())["error"]["code"] == "context_length_exceeded"
    messages = [{"role": "user", "content": "short"}]
    reply = chat(base_url, api_key, messages)
    try:
        chat(base_url, api_key, [*messages, reply, {"role": "user", "content": "again"}])
    except urllib.error.HTTPError as error:
        return json.loads(error.read())["error"]["code"]


def test_a_refused_request_is_a_400_and_one_turn_too_many_truncates(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, program=retrying_program, tasks=[{"id": "a", "answer": "1"}],
                   max_context_tokens=256, max_turns=1)
    obs, _ = env.reset()
    assert obs["messages"] == [{"role": "user", "content": "short"}]
    _, reward, terminated, truncated, info = env.step(ids(env, "ok"))
    assert (reward, terminated, truncated, info["truncated_reason"], info["rejected_requests"]) == (0.0, False, True, "max_turns", 2)
    env.close()


def test_an_invalid_action_ends_the_episode_and_the_program_gets_410(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer)
    env.reset(seed=1)
    _, reward, terminated, _, info = env.step(np.array([10**9]))
    assert (reward, terminated) == (0.0, True) and "outside the vocabulary" in info["invalid_action"]
    env.close()


def test_64_programs_in_flight(tokenizer):
    """64 demo programs at once on one event loop: every episode plays, each against its own key."""

    def script(conversation, turn):
        return CALL.format("6 * 7") if turn == 1 else "#### 42"

    policy = ScriptedPolicy(tokenizer, script)
    result = run_episodes_concurrent(lambda: gym.make(ENV_ID, tokenizer=tokenizer, tasks=[{"id": "q", "prompt": "What is 6 * 7?", "answer": "42"}]),
                                policy, episodes=64, concurrency=64, max_new_tokens=64, generate_in_thread=False)
    assert result.stats["max_in_flight"] == 64
    assert [t.reward for t in result.trajectories] == [1.0] * 64
    assert all(len(t.steps) == 2 and len(t.segments()) == 1 for t in result.trajectories)


def test_reset_and_areset_are_agent_envs_and_agree(tokenizer):
    """The episode start waits through the hooks (on_reset, aon_reset); seeding and options are AgentEnv's."""
    from agent_gym.core.async_step import areset
    from agent_gym.core.env import AgentEnv

    env = gym.make(ENV_ID, tokenizer=tokenizer, split="test")
    try:
        cls = type(env.unwrapped)
        assert "reset" not in vars(cls) and cls.areset is AgentEnv._areset
        obs, info = env.reset(options={"task_id": "test-2"})
        first = (obs["prompt_ids"].tolist(), info)
        obs, info = asyncio.run(areset(env, options={"task_id": "test-2"}))
        assert (obs["prompt_ids"].tolist(), info) == first
        assert set(info) == {"task_id", "context_tokens", "request"} and info["task_id"] == "test-2"
        with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['nope'\]; known: task_id, task"):
            env.reset(options={"nope": 1})
    finally:
        env.close()
