"""Env state as data: for every env of the suite, a snapshot taken at any step and restored into a fresh
env (after a pickle round trip, and in another process) continues exactly as the unforked episode does:
the same prompt ids, rewards, flags and info for the same actions."""

from __future__ import annotations

import multiprocessing
import pickle

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.core.snapshot import EnvSnapshot, SnapshotError
from agent_gym.models import load_tokenizer
from agent_gym.tools import HermesParser

CALC = HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}])
PY = HermesParser().format_calls([{"name": "python", "arguments": {"code": "x = 16 - 3 - 4\nprint(x)"}}])
PY2 = HermesParser().format_calls([{"name": "python", "arguments": {"code": "print(x * 2)"}}])

#: env id -> (constructor arguments, the texts of a scripted episode: the turns the policy types).
EPISODES: dict[str, tuple[dict, list[str]]] = {
    "AgentR1/GSM8K-v0": ({"split": "test"}, ["#### 18"]),
    "AgentR1/GSM8KTool-v0": ({"split": "test"}, [CALC, CALC, "#### 18"]),
    "AgentR1/Arithmetic-v0": ({}, ["#### 12"]),
    "AgentR1/ArithmeticTool-v0": ({}, [CALC, "#### 9"]),
    "AgentR1/Countdown-v0": ({}, ["<answer>1 + 2</answer>"]),
    "AgentR1/CountdownTool-v0": ({}, [CALC, CALC, "<answer>1 + 2</answer>"]),
    "AgentR1/Sokoban-v0": ({"difficulty": "easy"}, ["<action>Up</action>", "<action>Left</action>", "nonsense",
                                                     "<action>Down</action>", "<action>Right</action>"]),
    "AgentR1/FrozenLake-v0": ({"difficulty": "easy", "slip_prob": 0.3}, ["<action>Right</action>", "<action>Down</action>",
                                                                          "<action>Down</action>", "<action>Right</action>"]),
    "AgentR1/FrozenLake-v0/last_k": ({"difficulty": "easy", "context": "last_k", "last_k": 1},
                                      ["<action>Right</action>", "<action>Down</action>", "<action>Down</action>"]),
    "AgentR1/Wordle-v0": ({}, ["<guess>crane</guess>", "<guess>slate</guess>", "<guess>pious</guess>"]),
    "AgentR1/TableQA-v0": ({"difficulty": "easy"}, [
        HermesParser().format_calls([{"name": "python", "arguments": {"code": "n = 2 + 3\nprint(n)"}}]),
        HermesParser().format_calls([{"name": "python", "arguments": {"code": "print(n * 2)"}}]), "#### 10"]),
    "AgentR1/SearchQA-v0": ({"difficulty": "medium"}, [
        HermesParser().format_calls([{"name": "search", "arguments": {"query": "founded"}}]),
        HermesParser().format_calls([{"name": "open", "arguments": {"doc_id": "w00001"}}]),
        "<answer>nobody</answer>"]),
    "AgentR1/CustomerService-v0": ({"difficulty": "easy"}, [
        HermesParser().format_calls([{"name": "get_product", "arguments": {"product_id": "P0"}}]),
        "Could you tell me your email address?", "Thank you, anything else?"]),
}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def _make(tok, key: str):
    env_id = key.split("/last_k")[0]
    kwargs = EPISODES[key][0]
    return gym.make(env_id, tokenizer=tok, **kwargs)


def _actions(tok, env, texts: list[str]) -> list[list[int]]:
    eot = list(env.unwrapped.template.end_of_turn_ids)[:1]
    return [tok.encode(t, add_special_tokens=False) + eot for t in texts]


def _outcome(step) -> tuple:
    obs, reward, terminated, truncated, info = step
    return (np.asarray(obs["prompt_ids"]).tolist(), float(reward), bool(terminated), bool(truncated),
            pickle.dumps(sorted(info.items(), key=lambda kv: kv[0])))


def _play(env, actions, seed: int = 3) -> list[tuple]:
    env.reset(seed=seed)
    out = []
    for a in actions:
        step = env.step(a)
        out.append(_outcome(step))
        if step[2] or step[3]:
            break
    return out


@pytest.mark.parametrize("key", sorted(EPISODES))
def test_a_fork_at_every_step_continues_as_the_unforked_episode(tok, key):
    env = _make(tok, key)
    actions = _actions(tok, env, EPISODES[key][1])
    reference = _play(env, actions)
    assert reference, key
    for k in range(len(reference)):  # fork after k steps (0: right after reset)
        env.reset(seed=3)
        for a in actions[:k]:
            env.step(a)
        snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
        fork = agent_gym.restore(_make(tok, key), snap)
        branch = [_outcome(fork.step(a)) for a in actions[k: len(reference)]]
        assert branch == reference[k:], (key, k)
        # the original goes on unchanged by its fork
        rest = [_outcome(env.step(a)) for a in actions[k: len(reference)]]
        assert rest == reference[k:], (key, k)
        fork.close()
    env.close()


def test_fork_gives_independent_copies_that_agree(tok):
    env = _make(tok, "AgentR1/GSM8KTool-v0")
    actions = _actions(tok, env, EPISODES["AgentR1/GSM8KTool-v0"][1])
    env.reset(options={"task_id": "test-0"})
    env.step(actions[0])
    a, b = agent_gym.fork(env, 2)
    ra = _outcome(a.step(actions[2]))
    assert ra[1] == 1.0  # test-0's answer is 18
    # b is still one step in: its own next step is unaffected by a's
    rb = _outcome(b.step(actions[1]))
    assert rb[0][: len(ra[0]) - len(actions[2])] == ra[0][: len(ra[0]) - len(actions[2])]
    assert _outcome(b.step(actions[2]))[1] == 1.0
    assert a.unwrapped.context is not b.unwrapped.context


def _continue_in_child(conn, data: bytes, actions) -> None:
    from agent_gym.models import load_tokenizer

    snap = EnvSnapshot.from_bytes(data)
    env = agent_gym.restore(gym.make(snap.env_id, tokenizer=load_tokenizer(), difficulty="easy", slip_prob=0.3), snap)
    conn.send([_outcome(env.step(a)) for a in actions])
    conn.close()


def test_a_snapshot_piped_to_another_process_continues_identically(tok):
    key = "AgentR1/FrozenLake-v0"
    env = _make(tok, key)
    actions = _actions(tok, env, EPISODES[key][1])
    reference = _play(env, actions)
    env.reset(seed=3)
    env.step(actions[0])
    data = env.unwrapped.snapshot().to_bytes()
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_continue_in_child, args=(child, data, actions[1: len(reference)]))
    proc.start()
    got = parent.recv()
    proc.join(120)
    assert proc.exitcode == 0
    assert got == reference[1:]


def test_snapshot_before_reset_and_into_another_env_are_clear_errors(tok):
    env = _make(tok, "AgentR1/GSM8K-v0")
    with pytest.raises(SnapshotError, match="call reset"):
        env.unwrapped.snapshot()
    env.reset(seed=0)
    snap = env.unwrapped.snapshot()
    other = _make(tok, "AgentR1/Countdown-v0")
    with pytest.raises(SnapshotError, match="cannot be restored into AgentR1/Countdown-v0"):
        other.unwrapped.restore(snap)
    with pytest.raises(TypeError, match="EnvSnapshot"):
        other.unwrapped.restore({"task": 1})


def test_a_stateful_python_episode_is_rebuilt_by_re_running_its_cells(tok):
    pytest.importorskip("agent_gym_python")
    env = gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok, split="test", stateful=True)
    actions = _actions(tok, env, [PY, PY2, "#### 18"])
    reference = _play(env, actions)
    assert "18" in tok.decode(reference[1][0][-40:])  # x survived between the cells
    env.reset(seed=3)
    env.step(actions[0])
    snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
    assert snap.tool_state["python"]["cells"] == ["x = 16 - 3 - 4\nprint(x)"]
    fork = agent_gym.restore(gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok, split="test", stateful=True), snap)
    assert [_outcome(fork.step(a)) for a in actions[1:]] == reference[1:]
    fork.close()
    env.close()


def test_a_cell_that_prints_something_else_on_re_run_refuses_the_restore(tok):
    pytest.importorskip("agent_gym_python")
    env = gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok, split="test", stateful=True)
    rand = HermesParser().format_calls([{"name": "python", "arguments": {"code": "import os\nprint(os.urandom(8).hex())"}}])
    env.reset(seed=0)
    env.step(_actions(tok, env, [rand])[0])
    snap = env.unwrapped.snapshot()
    fresh = gym.make("AgentR1/GSM8KPython-v0", tokenizer=tok, split="test", stateful=True)
    with pytest.raises(SnapshotError, match="re-running cell 1 .* not deterministic"):
        fresh.unwrapped.restore(snap)
    fresh.close()
    env.close()
