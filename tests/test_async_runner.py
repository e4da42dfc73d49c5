"""The async runner: hundreds of episodes in flight in one event loop give exactly the trajectories
that playing them one by one gives; generation is batched; waiting tools overlap."""

from __future__ import annotations

import asyncio
import gc
import json
import threading

import gymnasium as gym
import numpy as np
import pytest

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.chat.template import ChatTemplate
from agent_gym.core.async_step import astep
from agent_gym.rollout import Generation
from agent_gym.rollout.async_runner import arun_episodes, find_astep, run_episodes_concurrent
from agent_gym.sandbox.tool import PythonTool
from agent_gym.tools import HermesParser


def calc(expression: str) -> str:
    return HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": expression}}])


class ContentPolicy:
    """Answers from the prompt's content only (question and turn), so the result cannot depend on
    scheduling: some episodes solve, some answer wrong, some make tool errors, some run out of turns."""

    def __init__(self, tokenizer, script):
        self.template = ChatTemplate(tokenizer)
        self.tokenizer = tokenizer
        self.script = script
        self.calls: list[int] = []

    def reply(self, prompt) -> Generation:
        text = self.tokenizer.decode(prompt)
        turn = text.count("<|im_start|>assistant")  # the generation prompt opens the current turn
        ids = self.template.encode(self.script(text, turn)) + list(self.template.end_of_turn_ids)
        return Generation(ids=ids)

    def generate(self, prompts, *, max_new_tokens):
        self.calls.append(len(prompts))
        return [self.reply(p) for p in prompts]


_ANSWERS: dict[str, str] = {}


def script(text: str, turn: int) -> str:
    if not _ANSWERS:
        from agent_gym_gsm8k.data import load_gsm8k

        _ANSWERS.update((t.question.strip(), t.answer) for t in load_gsm8k("test"))
    question = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
    answer = next((a for q, a in _ANSWERS.items() if question.startswith(q)), "0")
    kind = len(question) % 4  # depends on the question only
    if kind == 0:
        return calc("16 - 3 - 4") if turn == 1 else f"#### {answer}"  # solved
    if kind == 1:
        return calc("2 * (3 + 4)") if turn < 3 else "#### -1"  # wrong
    if kind == 2:
        return '<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>' if turn == 1 else f"#### {answer}"
    return calc("1 + 1")  # never answers: truncated at the turn limit


def play_one_by_one(env, policy, seed: int):
    obs, _ = env.reset(seed=seed)
    steps = []
    while True:
        prompt = np.asarray(obs["prompt_ids"]).tolist()
        (gen,) = policy.generate([prompt], max_new_tokens=512)
        obs, reward, terminated, truncated, info = env.step(np.asarray(gen.ids))
        steps.append((prompt, gen.ids, reward, terminated, truncated, info))
        if terminated or truncated:
            return steps


def test_200_episodes_match_running_them_one_by_one(tokenizer):
    make = lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_turns=4)  # noqa: E731
    policy = ContentPolicy(tokenizer, script)
    result = run_episodes_concurrent(make, policy, episodes=200, base_seed=1000, concurrency=40, max_new_tokens=512, generate_in_thread=False)
    assert len(result.trajectories) == 200
    assert [t.metadata["episode"] for t in result.trajectories] == list(range(200))
    assert all(t.terminated or t.truncated for t in result.trajectories)
    stats = result.stats
    assert stats["episodes"] == 200 and stats["max_in_flight"] == 40
    assert stats["mean_batch_size"] > 5 and sum(policy.calls) == stats["steps"]  # generation was batched

    env = make()
    reference = ContentPolicy(tokenizer, script)
    outcomes = set()
    for trajectory in result.trajectories:
        expected = play_one_by_one(env, reference, trajectory.seed)
        got = [(s.prompt_ids, s.response_ids, s.reward, s.terminated, s.truncated, s.info) for s in trajectory.steps]
        assert len(got) == len(expected)
        for (p, r, rew, term, trunc, info), (p2, r2, rew2, term2, trunc2, info2) in zip(got, expected):
            assert (p, r, rew, term, trunc) == (p2, r2, rew2, term2, trunc2)
            assert info == json.loads(json.dumps(info2, default=str))
        outcomes.add((trajectory.reward, trajectory.truncated, trajectory.final_info["tool_errors"] > 0))
    assert {(1.0, False, False), (0.0, False, False), (1.0, False, True), (0.0, True, False)} <= outcomes


class InFlight:
    """Counts calls in flight across threads and event loops: ``peak`` is the most that ever were at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.peak = 0

    def enter(self):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def exit(self):
        with self.lock:
            self.now -= 1


class CountSteps(gym.Wrapper):
    """Counts this env's ``astep`` calls in flight in ``counter`` (the runner awaits a wrapper's own astep)."""

    def __init__(self, env, counter):
        super().__init__(env)
        self.counter = counter

    async def astep(self, action):
        self.counter.enter()
        try:
            return await astep(self.env, action)
        finally:
            self.counter.exit()


def count_sandbox_runs(env, counter):
    """Counts the env's sandboxed code runs in flight in ``counter`` (the python tool's ``arun_code``,
    which the sandbox executes for real)."""
    (tool,) = [t for t in env.unwrapped.tools if isinstance(t, PythonTool)]
    run = tool.arun_code

    async def arun_code(code):
        counter.enter()
        try:
            return await run(code)
        finally:
            counter.exit()

    tool.arun_code = arun_code
    return env


def test_waiting_tools_overlap_and_agenerate_is_used(tokenizer):
    """16 episodes whose two tool calls each sleep 0.5 s in the sandbox: all 16 steps, and all 16 sandboxed
    runs, are in flight at once (one episode at a time, or a step that blocked the event loop, would
    give 1). The env checker is off: it runs an env's first step in a worker thread (see
    agent_gym.core.async_step), where the default executor's size, not the runner, would bound the overlap."""

    def code(turn: int) -> str:
        return "<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": f"import time\ntime.sleep(0.5)\nprint({turn})"}}) + "\n</tool_call>"

    class Async(ContentPolicy):
        async def agenerate(self, prompt, *, max_new_tokens):
            await asyncio.sleep(0)
            return self.reply(prompt)

        def generate(self, prompts, *, max_new_tokens):  # pragma: no cover - must not be used
            raise AssertionError("agenerate should be used")

    policy = Async(tokenizer, lambda text, turn: code(turn) if turn <= 2 else "#### 18")
    steps, runs = InFlight(), InFlight()
    envs = [
        CountSteps(count_sandbox_runs(gym.make("AgentR1/GSM8KPython-v0", tokenizer=tokenizer, split="test",
                                               sandbox={"prefork": 2}, disable_env_checker=True), runs), steps)
        for _ in range(16)
    ]
    assert find_astep(envs[0]) is not None

    async def main():
        return await arun_episodes(envs, policy, episodes=16, concurrency=16, max_new_tokens=512)

    try:
        result = asyncio.run(main())
    finally:
        for e in envs:
            e.close()
    assert [t.num_turns for t in result.trajectories] == [3] * 16
    tool_outputs = [[m["content"] for m in t.messages if m["role"] == "tool"] for t in result.trajectories]
    assert tool_outputs == [["1", "2"]] * 16
    assert (steps.peak, runs.peak) == (16, 16)
    assert (steps.now, runs.now) == (0, 0)
    assert result.stats["generate_calls"] == 0


def test_policy_errors_propagate(tokenizer):
    class Broken:
        def generate(self, prompts, *, max_new_tokens):
            raise RuntimeError("model crashed")

    make = lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test")  # noqa: E731
    callbacks = list(gc.callbacks)
    with pytest.raises(RuntimeError, match="model crashed"):
        run_episodes_concurrent(make, Broken(), episodes=4, concurrency=2)
    assert gc.callbacks == callbacks  # the run's GC timer is gone with it
    with pytest.raises(ValueError, match="pass episodes"):
        run_episodes_concurrent(make, Broken())


class CollectingPolicy(ContentPolicy):
    """Runs one full garbage collection per generate call, as a stand-in for a collection that the
    allocations of a real run would trigger at some point."""

    def generate(self, prompts, *, max_new_tokens):
        gc.collect()
        return super().generate(prompts, max_new_tokens=max_new_tokens)


def test_stats_report_the_garbage_collections_of_the_run(tokenizer, no_automatic_gc):
    make = lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_turns=4)  # noqa: E731
    policy = CollectingPolicy(tokenizer, script)
    callbacks = list(gc.callbacks)
    result = run_episodes_concurrent(make, policy, episodes=12, concurrency=4, max_new_tokens=512, generate_in_thread=False)
    stats = result.stats
    assert stats["gc_full_collections"] == stats["generate_calls"] == len(policy.calls) > 0
    assert stats["gc_collections"] == [0, 0, stats["generate_calls"]]
    assert 0 < stats["gc_longest_s"] <= stats["gc_s"] < stats["wall_s"]
    assert gc.callbacks == callbacks  # the timer removed its callback


def test_a_cheap_policy_does_not_hold_prompts_back_for_slow_episodes(tokenizer):
    """The batcher waits for more prompts at most as long as the previous generate call took: with a policy
    that answers at once, an episode whose calculator step is done is not held back (for up to max_wait_s)
    until the episode whose sandboxed code sleeps 0.5 s comes back. Both start in one batch; then the
    calculator episode's two later turns go alone, and so do the sandbox episode's."""

    def reply(text: str, turn: int) -> str:
        if turn > 2:
            return "#### 18"
        if '"name": "python"' in text:
            return "<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": "import time\ntime.sleep(0.5)"}}) + "\n</tool_call>"
        return calc("1 + 1")

    policy = ContentPolicy(tokenizer, reply)
    envs = [gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test"),
            gym.make("AgentR1/GSM8KPython-v0", tokenizer=tokenizer, split="test", sandbox={"prefork": 1})]
    try:
        result = run_episodes_concurrent(envs, policy, episodes=2, concurrency=2, max_new_tokens=512, max_wait_s=5.0, generate_in_thread=False)
    finally:
        envs[1].close()
    assert [t.num_turns for t in result.trajectories] == [3, 3]
    assert result.trajectories[1].final_info["tool_errors"] == 0
    # with a fixed 5 s wait the calculator episode's prompts would have waited for the sandbox episode's: [2, 2, 2]
    assert policy.calls == [2, 1, 1, 1, 1]


def test_an_error_of_the_episodes_comes_out_of_run_sync_alone():
    """run_sync asks asyncio whether a loop runs; outside one that raises "no running event loop". An error
    of the coroutine must not come chained to it: the traceback then showed that RuntimeError first, read
    as the cause (a TRL run with env workers reported it instead of its real error)."""
    from agent_gym.rollout.async_runner import run_sync

    class WorkerFailed(Exception):
        pass

    async def fails():
        raise WorkerFailed("env worker 1 of 2 did not start")

    with pytest.raises(WorkerFailed) as caught:
        run_sync(fails)
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    assert run_sync(lambda: asyncio.sleep(0, result=7)) == 7


def test_a_rollout_config_is_the_same_run_as_its_keyword_arguments(tokenizer):
    """One RolloutConfig carries a run's settings from a driver to the runner: the config, the config with
    keyword overrides, and the keywords alone play the same episodes; an unknown setting or a bad value
    is refused with the field names, before any env is made."""
    from agent_gym.rollout import RolloutConfig

    make = lambda: gym.make("AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_turns=4)  # noqa: E731

    def played(result):
        return [(t.seed, [s.response_ids for s in t.steps], t.reward) for t in result.trajectories]

    config = RolloutConfig(episodes=12, base_seed=7, concurrency=4, max_new_tokens=512, generate_in_thread=False,
                           metadata={"run": "a"})
    by_config = run_episodes_concurrent(make, ContentPolicy(tokenizer, script), config)
    by_keywords = run_episodes_concurrent(make, ContentPolicy(tokenizer, script), episodes=12, base_seed=7, concurrency=4,
                                          max_new_tokens=512, generate_in_thread=False, metadata={"run": "a"})
    assert played(by_config) == played(by_keywords) and [t.seed for t in by_config.trajectories] == list(range(7, 19))
    assert {t.metadata["run"] for t in by_config.trajectories} == {"a"}
    shifted = run_episodes_concurrent(make, ContentPolicy(tokenizer, script), config, base_seed=11)
    assert played(shifted) == played(by_config)[4:] + played(run_episodes_concurrent(
        make, ContentPolicy(tokenizer, script), config.replace(base_seed=19, episodes=4)))
    assert config.base_seed == 7  # frozen: the override made a copy

    with pytest.raises(TypeError, match=r"unknown rollout setting\(s\) batch_size; RolloutConfig has: base_seed, concurrency, "):
        run_episodes_concurrent(make, ContentPolicy(tokenizer, script), episodes=2, batch_size=2)
    with pytest.raises(ValueError, match=r"RolloutConfig.concurrency must be an int >= 1, got 0"):
        RolloutConfig(concurrency=0)
    with pytest.raises(TypeError, match="task_ids must be a sequence of ids, not the string 'test-0'"):
        RolloutConfig(task_ids="test-0")
    with pytest.raises(TypeError, match="config must be a RolloutConfig, got dict"):
        run_episodes_concurrent(make, ContentPolicy(tokenizer, script), {"episodes": 2})
