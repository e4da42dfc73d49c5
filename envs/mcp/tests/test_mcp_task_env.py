"""AgentR1/MCPTask-v0 through gymnasium, with real MCP servers over stdio (and HTTP): the packaged demo
(the warehouse server and its tasks) as the defaults, scripted episodes with exact rewards, every error
counted, check_env, fuzzed actions, no drift on each template family, a task file of your own with the
test tree's kv server, and no server process left after any test (conftest.py checks it).

Counted things only (results, rewards, error kinds, processes), no wall-clock assertions.
"""

from __future__ import annotations

import asyncio
import gc
import json
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agent_gym
from agent_gym.core.snapshot import restore
from agent_gym.core.tasks import env_tasks
from agent_gym.tools import PARSERS
from agent_gym.tools import mcp as agent_mcp

from agent_gym_mcp import demo_servers
from agent_gym_mcp.demo_server import CATALOG
from agent_gym_mcp.env import DEMO_INSTRUCTIONS, DEMO_TASKS, load_tasks

ENV_ID = "AgentR1/MCPTask-v0"
KV_SERVER = Path(__file__).resolve().parents[3] / "tests" / "tools" / "mcp_servers" / "kv_server.py"


def act(env: Any, text: str) -> list[int]:
    """The ids a policy writing ``text`` generates: the text's ids and the end of turn."""
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def calls(fmt: str, *pairs: tuple[str, dict[str, Any]]) -> str:
    return PARSERS[fmt]().format_calls([{"name": n, "arguments": a} for n, a in pairs])


def step_calls(env: Any, *pairs: tuple[str, dict[str, Any]], fmt: str = "hermes") -> tuple[list[str], dict[str, Any]]:
    """One turn calling ``pairs``: the tool results it got back (one message per call), and the info."""
    obs, reward, terminated, truncated, info = env.step(act(env, calls(fmt, *pairs)))
    assert not (terminated or truncated) and reward == 0.0, info
    return [m["content"] for m in obs["messages"][-len(pairs):]], info


def make(tokenizer: Any, **kwargs: Any) -> Any:
    return gym.make(ENV_ID, tokenizer=tokenizer, **kwargs)


def items_of(task: dict[str, Any]) -> set[str]:
    return set(task["order"]) if "order" in task else {task["item"]}


# -- the packaged demo -------------------------------------------------------------------------------


def test_registered_and_listed():
    card = {c.id: c for c in agent_gym.list_envs()}[ENV_ID]
    assert card.package == "agent-r1-gym-mcp" and card.tools == ("stock", "price")


def test_every_demo_answer_follows_from_the_catalog():
    tasks = load_tasks(DEMO_TASKS)
    assert [t["split"] for t in tasks].count("train") == 30 and [t["split"] for t in tasks].count("test") == 12
    for task in tasks:
        kind, order = task["kind"], task.get("order", {})
        first = next(iter(order), task.get("item"))
        expected = {
            "cost": lambda: sum(n * CATALOG[i].price for i, n in order.items()),
            "order": lambda: sum(n * CATALOG[i].price for i, n in order.items()),
            "stock": lambda: CATALOG[first].stock,
            "stock_value": lambda: CATALOG[first].stock * CATALOG[first].price,
            "shortfall": lambda: max(0, order[first] - CATALOG[first].stock),
        }[kind]()
        assert task["answer"] == str(expected), task
        assert all(f"{item}s" in task["prompt"] for item in items_of(task)), task


def test_the_defaults_are_the_demo_with_disjoint_splits(tokenizer, servers):
    train, test = make(tokenizer), make(tokenizer, split="test")
    try:
        assert (train.unwrapped.split, test.unwrapped.split) == ("train", "test")
        assert (len(train.unwrapped.tasks), len(test.unwrapped.tasks)) == (30, 12)
        assert all(t["id"].startswith("train-") for t in train.unwrapped.tasks)
        assert all(t["id"].startswith("test-") for t in test.unwrapped.tasks)
        train_items = set().union(*map(items_of, train.unwrapped.tasks))
        test_items = set().union(*map(items_of, test.unwrapped.tasks))
        assert not train_items & test_items and len(train_items) == 10 and len(test_items) == 6
        obs, info = train.reset(seed=0)
        assert [t["function"]["name"] for t in obs["tools"]] == ["stock", "price"]
        assert obs["messages"][0]["content"].startswith(DEMO_INSTRUCTIONS)
        assert obs["messages"][1]["content"] == train.unwrapped.get_task(info["task_id"])["prompt"]
        test.reset(seed=0)
        assert step_calls(train, ("stock", {"item": "gear"}))[0] == step_calls(test, ("stock", {"item": "gear"}))[0] == ["60"]
        # read-only: one server process serves both envs and all their episodes
        assert len(servers()) == 1
    finally:
        train.close()
        test.close()
    with pytest.raises(ValueError, match="unknown split 'dev' for the MCPTask-v0 demo; known: train, test"):
        make(tokenizer, split="dev")


@pytest.mark.parametrize(("answer", "reward"), [("6 gadgets at 15 dollars each.\n#### 90", 1.0), ("#### 96", 0.0)])
def test_a_scripted_episode_gets_the_exact_reward(tokenizer, answer, reward):
    env = make(tokenizer)
    try:
        obs, info = env.reset(options={"task_id": "train-0"})
        assert obs["messages"][1]["content"] == "What do 6 gadgets cost, in dollars?"
        texts, info = step_calls(env, ("price", {"item": "gadget"}), ("stock", {"item": "Gadgets"}))
        assert texts == ["15", "32"] and info["tool_results"] == ["ok", "ok"]
        _, got, terminated, truncated, info = env.step(act(env, answer))
        assert (got, terminated, truncated) == (reward, True, False)
        assert info["correct"] is (reward == 1.0) and info["expected"] == "90"
        assert info["answer_check"] == ("correct" if reward else "wrong_answer")
        assert info["reward_components"] == {"outcome": reward}
        assert (info["tool_calls"], info["tool_errors"], info["turn"]) == (2, 0, 2)
    finally:
        env.close()


def test_tool_errors_are_tool_messages_and_counted(tokenizer):
    env = make(tokenizer, split="test")
    try:
        env.reset(options={"task_id": "test-10"})  # 5 brackets
        texts, info = step_calls(
            env, ("price", {"item": "doohickey"}), ("price", {"item": 3}), ("stock", {}), ("discount", {"item": "cog"})
        )
        assert texts[0].startswith("Error: Error executing tool price: unknown item 'doohickey'; the warehouse stocks: widget,")
        assert texts[1] == "Error: invalid arguments for 'price': item: 3 is not of type 'string'"
        assert texts[2] == "Error: invalid arguments for 'stock': 'item' is a required property"
        assert info["tool_results"] == ["mcp_error", "invalid_arguments", "invalid_arguments", "unknown_tool"]
        assert info["tool_error_kinds"] == {"mcp_error": 1, "invalid_arguments": 2, "unknown_tool": 1}
        assert step_calls(env, ("price", {"item": "bracket"}))[0] == ["10"]  # the server is still there
        _, reward, terminated, _, info = env.step(act(env, "#### 50"))
        assert (reward, terminated, info["tool_errors"], info["tool_calls"]) == (1.0, True, 4, 5)
    finally:
        env.close()


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_each_tool_format_plays_the_demo(tokenizer, fmt):
    env = make(tokenizer, split="test", tool_format=fmt)
    try:
        obs, _ = env.reset(options={"task_id": "test-10"})
        assert env.unwrapped.parser.describe_tools() in obs["messages"][0]["content"]
        texts, info = step_calls(env, ("price", {"item": "Brackets"}), ("stock", {"item": "bracket"}), fmt=fmt)
        assert texts == ["10", "66"] and info["format_errors"] == 0
        assert env.step(act(env, "#### 50"))[1] == 1.0
    finally:
        env.close()


def test_seeded_sampling_and_pinning(tokenizer):
    a, b = make(tokenizer), make(tokenizer)
    try:
        obs_a, info_a = a.reset(seed=123)
        obs_b, info_b = b.reset(seed=123)
        assert info_a["task_id"] == info_b["task_id"]
        assert np.array_equal(obs_a["prompt_ids"], obs_b["prompt_ids"])
        assert len({a.reset(seed=s)[1]["task_id"] for s in range(10)}) > 3  # the seed really chooses
        obs, info = a.reset(options={"task": {"prompt": "What do 2 cogs cost, in dollars?", "answer": "16"}})
        assert info["task_id"] == "0" and obs["messages"][1]["content"] == "What do 2 cogs cost, in dollars?"
        assert step_calls(a, ("price", {"item": "cog"}))[0] == ["8"]
        assert a.step(act(a, "#### 16"))[1] == 1.0
        with pytest.raises(KeyError, match="no task with id 'test-0' in the MCPTask-v0 demo train split"):
            a.reset(options={"task_id": "test-0"})
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("split", ["train", "test"])
def test_check_env_passes(tokenizer, split):
    env = make(tokenizer, split=split)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_the_trainer_rows_of_a_split(tokenizer):
    rows = env_tasks(ENV_ID, "test", tokenizer=tokenizer)
    assert [r.task_id for r in rows.rows] == [f"test-{i}" for i in range(12)]
    assert rows.env_kwargs == {"split": "test"} and [t["function"]["name"] for t in rows.tools] == ["stock", "price"]
    assert rows.rows[10].messages[1] == {"role": "user", "content": "What do 5 brackets cost, in dollars?"}


# -- actions a policy might write -------------------------------------------------------------------

ITEMS = [*CATALOG, "Sprockets", "GEAR", "doohickey", "", "s"]
HOSTILE = ["<tool_call>", "</tool_call>", '<tool_call>{"name": "price"}</tool_call>', "[price(", "[stock(item=",
           "#### 90", "####", "<think>", "\u202e\x00\ufffd"]


def test_random_actions_never_raise_and_every_error_is_counted(tokenizer):
    env = make(tokenizer, max_turns=3)
    template = env.unwrapped.template
    vocab, eot = template.vocab_size, list(template.end_of_turn_ids)
    ids = st.one_of(st.integers(0, vocab - 1), st.sampled_from(sorted(set(tokenizer.all_special_ids) | set(eot))))
    call = st.tuples(st.sampled_from(["stock", "price", "discount"]),
                     st.one_of(st.sampled_from(ITEMS).map(lambda i: {"item": i}), st.just({}), st.just({"item": 7})))
    texts = st.one_of(
        st.lists(call, min_size=1, max_size=3).map(lambda cs: calls("hermes", *cs)),
        st.lists(st.sampled_from(HOSTILE) | st.text(max_size=8), max_size=5).map("".join),
    )
    actions = st.one_of(
        texts.map(lambda t: template.encode(t) + eot),
        st.tuples(texts, st.lists(ids, max_size=20)).map(lambda p: template.encode(p[0]) + p[1]),
        st.lists(ids, max_size=40),
        st.lists(st.integers(-3, vocab + 3), min_size=1, max_size=5),
        st.just([]),
    )

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(actions, min_size=1, max_size=3), st.integers(0, 1000))
    def run(episode, seed):
        obs, _ = env.reset(seed=seed)
        for action in episode:
            prev = obs["prompt_ids"].tolist()
            obs, reward, terminated, truncated, info = env.step(action)
            assert env.observation_space.contains(obs) and reward in (0.0, 1.0)
            assert sum(info["tool_error_kinds"].values()) == info["tool_errors"]
            assert "render_error" not in info
            if terminated or truncated:
                break
            kept = list(action)[: len(action) - info.get("ids_after_end_of_turn", 0)]
            assert obs["prompt_ids"].tolist()[: len(prev) + len(kept)] == prev + kept

    try:
        run()
    finally:
        env.close()


def test_no_drift_on_each_template_family(family_tokenizer):
    """prompt ids = previous + action + appended at every step, and the last prompt is what the
    tokenizer's own chat template writes for the whole conversation."""
    env = gym.make(ENV_ID, tokenizer=family_tokenizer, split="test")
    try:
        obs, _ = env.reset(options={"task_id": "test-8"})  # 6 flanges and 5 clamps: 162
        turns = [
            calls("hermes", ("price", {"item": "flange"}), ("price", {"item": "clamp"})),
            calls("hermes", ("stock", {"item": "flange"})),
        ]
        for text in turns:
            prev, action = obs["prompt_ids"].tolist(), act(env, text)
            obs, _, terminated, truncated, info = env.step(action)
            assert not (terminated or truncated) and info["tool_errors"] == 0 and not info["new_segment"]
            assert obs["prompt_ids"].tolist()[: len(prev) + len(action)] == prev + action
        rendered = family_tokenizer.apply_chat_template(obs["messages"], tools=obs["tools"] or None, tokenize=False,
                                                        add_generation_prompt=True)
        assert family_tokenizer.encode(rendered, add_special_tokens=False) == obs["prompt_ids"].tolist()
        assert env.step(act(env, "#### 162"))[1] == 1.0
    finally:
        env.close()


# -- a task of your own ------------------------------------------------------------------------------


def exact_length(response: str, task: dict[str, Any]) -> float:
    """A grader by dotted path: 0.5 when the answer's length is right."""
    return 0.5 if len(response.strip()) == len(str(task["answer"])) else 0.0


def test_your_task_file_with_your_server(tokenizer, tmp_path, servers):
    if not KV_SERVER.exists():
        pytest.skip(f"the test tree's kv server is not here ({KV_SERVER}): run from a checkout")
    kv = {"command": [sys.executable, str(KV_SERVER)], "timeout_s": 2.0, "name": "kv"}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in [
        {"id": "t1", "prompt": "Store 7 under x, then tell me what x holds.", "answer": "7", "split": "train"},
        {"id": "t2", "prompt": "What is 2+2?", "answer": "4", "split": "test"},
    ]) + "\n")
    env = gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks), mcp_servers=[kv])
    try:
        assert env.unwrapped.split is None and len(env.unwrapped.tasks) == 2  # no split: every task
        obs, info = env.reset(options={"task_id": "t1"})
        assert obs["messages"][1]["content"] == "Store 7 under x, then tell me what x holds."
        assert "Store value under key." in obs["messages"][0]["content"]
        # two turns: the calls of one turn run concurrently, and a get beside its set may run first
        texts = step_calls(env, ("set", {"key": "x", "value": "7"}))[0] + step_calls(env, ("get", {"key": "x"}))[0]
        assert texts == ["stored x", "7"]
        _, reward, terminated, _, info = env.step(act(env, "x holds 7.\n#### 7"))
        assert (reward, terminated, info["correct"], info["predicted"]) == (1.0, True, True, "7")
        # not read-only: the episode's server stops with the episode
        assert psutil.wait_procs(servers(), timeout=10)[1] == []
    finally:
        env.close()

    env = gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks), mcp_servers=[kv], split="test",
                   grader=f"{__name__}:exact_length")
    try:
        assert [t["id"] for t in env.unwrapped.tasks] == ["t2"]
        env.reset(seed=0)
        assert env.step(act(env, "5"))[1] == 0.5
    finally:
        env.close()

    with pytest.raises(ValueError, match=r'has no task with "split": \'dev\' \(its splits: test, train\)'):
        gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks), mcp_servers=[kv], split="dev")
    with pytest.raises(ValueError, match=r"needs their servers: mcp_servers=.*demo_servers\(\)"):
        gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks))
    # tasks without "split" fields are one set, whatever split is asked for (the command line asks for "test")
    env = gym.make(ENV_ID, tokenizer=tokenizer, tasks=[{"prompt": "p", "answer": "a"}], mcp_servers=[kv], split="test")
    assert [t["id"] for t in env.unwrapped.tasks] == ["0"]
    env.close()


def test_your_tasks_with_the_demo_server(tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, tasks=[{"id": "q", "prompt": "Price of a lever?", "answer": "11"}],
                   mcp_servers=demo_servers(), instructions="Answer after ####.")
    try:
        obs, _ = env.reset(seed=0)
        assert obs["messages"][0]["content"].startswith("Answer after ####.\n")
        assert step_calls(env, ("price", {"item": "lever"}))[0] == ["11"]
        assert env.step(act(env, "#### 11"))[1] == 1.0
    finally:
        env.close()


# -- sessions and processes ---------------------------------------------------------------------------


def test_concurrent_episodes_share_the_one_demo_server(tokenizer, servers):
    """8 episodes on one event loop through astep; the read-only demo server is one process for all."""
    envs = [make(tokenizer, split="test") for _ in range(8)]
    items = list(CATALOG)[:8]

    async def episode(env: Any, item: str) -> tuple[str, float]:
        env.reset(options={"task": {"prompt": f"What does one {item} cost?", "answer": str(CATALOG[item].price)}})
        obs, *_ = await env.astep(act(env, calls("hermes", ("price", {"item": item}))))
        _, reward, *_ = await env.astep(act(env, f"#### {obs['messages'][-1]['content']}"))
        return obs["messages"][-1]["content"], reward

    async def run_all() -> list[tuple[str, float]]:
        return await asyncio.gather(*(episode(env, item) for env, item in zip(envs, items)))

    try:
        assert asyncio.run(run_all()) == [(str(CATALOG[i].price), 1.0) for i in items]
        assert len(servers()) == 1
    finally:
        for env in envs:
            env.close()


def test_a_demo_episode_snapshot_continues_identically_in_a_fresh_env(tokenizer):
    """The demo server is read-only, so an episode can be copied (a stateful server's cannot)."""
    env, other = make(tokenizer, split="test"), make(tokenizer, split="test")
    try:
        env.reset(options={"task_id": "test-10"})
        step_calls(env, ("price", {"item": "bracket"}))
        snap = pickle.loads(env.unwrapped.snapshot().to_bytes())
        restore(other, snap)
        for action in (act(env, calls("hermes", ("stock", {"item": "bracket"}))), act(env, "#### 50")):
            want, got = env.step(action), other.step(action)
            assert np.array_equal(want[0]["prompt_ids"], got[0]["prompt_ids"]) and want[1:] == got[1:]
        assert got[1:4] == (1.0, True, False)
    finally:
        env.close()
        other.close()


def test_an_env_dropped_without_close_stops_its_server(tokenizer, servers):
    env = make(tokenizer)
    env.reset(seed=0)
    step_calls(env, ("price", {"item": "gear"}))  # the server runs (it starts in the background)
    (process,) = servers()
    del env
    gc.collect()
    assert psutil.wait_procs([process], timeout=10)[1] == []
    # the session closes in a thread of its own (see MCPTaskEnv): give it the moment it takes to end
    for _ in range(100):
        if agent_mcp.live_server_count() == 0:
            break
        time.sleep(0.1)
    assert agent_mcp.live_server_count() == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_demo_server_over_streamable_http(tokenizer):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "agent_gym_mcp.demo_server", "--http", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):  # up to 30 s for Python and the SDK to start listening
            assert server.poll() is None, f"the HTTP demo server exited with {server.returncode}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("the HTTP demo server did not listen within 30 s")
        env = make(tokenizer, split="test", mcp_servers=[{"url": f"http://127.0.0.1:{port}/mcp", "read_only": True}])
        try:
            env.reset(options={"task_id": "test-10"})
            assert step_calls(env, ("price", {"item": "bracket"}))[0] == ["10"]
            assert env.step(act(env, "#### 50"))[1] == 1.0
        finally:
            env.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
