"""``agent-gym serve`` driven over the wire by openenv-core's own client (and this package's subclass of
it): episodes match the same episodes in process id for id, sessions are isolated and closed whenever a
client goes, and bad requests get clear errors without hurting the server or the episode."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from openenv_helpers import (
    ENV_ID,
    MAX_SESSIONS,
    REPO_ROOT,
    TASK_ID,
    get_json,
    post_json,
    wait_for_sessions,
)

from agent_gym.trajectory import to_jsonable
from agent_gym_openenv.client import AgentGymClient, RemoteEnv, ServerError


def play_local(make_local, task_id, steps):
    """The episode in process: [(obs, info)] + [(obs, reward, terminated, truncated, info)] per step."""
    env = make_local()
    try:
        out = [env.reset(options={"task_id": task_id})]
        out += [env.step(action) for action in steps]
        return out
    finally:
        env.close()


def assert_same_obs(remote, local):
    assert list(remote) == ["messages", "tools", "prompt_ids"] == list(local)
    assert remote["prompt_ids"].dtype == np.int64
    np.testing.assert_array_equal(remote["prompt_ids"], local["prompt_ids"])
    assert remote["messages"] == to_jsonable(local["messages"])
    assert remote["tools"] == to_jsonable(local["tools"])


def assert_same_step(remote, local):
    assert_same_obs(remote[0], local[0])
    assert remote[1:4] == local[1:4] and type(remote[1]) is float
    assert remote[4] == to_jsonable(local[4])


# -- the episode over the wire is the episode in process ----------------------------------------------


def test_gsm8k_tool_episode_over_the_wire_matches_in_process(url, make_local, actions):
    local = play_local(make_local, TASK_ID, [actions["call"], actions["answer"]])
    env = RemoteEnv(url)
    try:
        assert env.spec.id == ENV_ID
        obs, info = env.reset(options={"task_id": TASK_ID})
        assert_same_obs(obs, local[0][0])
        assert info == local[0][1] == {"task_id": TASK_ID, "context_tokens": len(obs["prompt_ids"])}
        assert get_json(url + "/sessions")["active_sessions"] == 1
        first = env.step(actions["call"])
        assert_same_step(first, local[1])
        # The no-drift invariant holds over the wire: previous prompt + action + the tool's turn.
        head = np.concatenate([obs["prompt_ids"], actions["call"]])
        np.testing.assert_array_equal(first[0]["prompt_ids"][: len(head)], head)
        assert first[0]["messages"][-1]["role"] == "tool" and first[0]["messages"][-1]["content"] == "9"
        last = env.step(actions["answer"])
        assert_same_step(last, local[2])
        assert last[1:4] == (1.0, True, False)
        assert last[4]["correct"] is True and last[4]["tool_calls"] == 1 and last[4]["turn"] == 2
        # A second episode on the same session.
        obs2, _ = env.reset(options={"task_id": TASK_ID})
        assert_same_obs(obs2, local[0][0])
    finally:
        env.close()


def test_openenv_step_results_and_state(url, make_local, actions):
    """The same episode through openenv-core's EnvClient API: StepResult with reward and done."""
    local = play_local(make_local, TASK_ID, [actions["call"], actions["answer"]])

    async def main():
        async with AgentGymClient(url) as client:
            first = await client.reset(task_id=TASK_ID, episode_id="ep-1")
            assert first.reward is None and first.done is False
            assert first.observation.prompt_ids == local[0][0]["prompt_ids"].tolist()
            results = [await client.step(np.asarray(actions["call"])), await client.step(actions["answer"])]
            state = await client.state()
            return results, state

    results, state = asyncio.run(main())
    for result, (obs, reward, terminated, truncated, info) in zip(results, local[1:]):
        assert result.observation.prompt_ids == obs["prompt_ids"].tolist()
        assert (result.reward, result.done) == (reward, terminated or truncated)
        assert (result.observation.terminated, result.observation.truncated) == (terminated, truncated)
        assert result.observation.info == to_jsonable(info)
    assert results[-1].reward == 1.0
    assert (state.env_id, state.task_id, state.episode_id, state.step_count, state.in_episode) == (
        ENV_ID, TASK_ID, "ep-1", 2, False,
    )


def test_text_actions_as_in_process(url, make_local):
    """``{"text": ...}`` is the env's own text convenience: the same as a str action in process."""
    local = play_local(make_local, TASK_ID, [CALL_TEXT, ANSWER_TEXT])
    env = RemoteEnv(url)
    try:
        env.reset(options={"task_id": TASK_ID})
        for text, expected in zip([CALL_TEXT, ANSWER_TEXT], local[1:]):
            assert_same_step(env.step(text), expected)
    finally:
        env.close()


CALL_TEXT = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}\n</tool_call><|im_end|>'
ANSWER_TEXT = "#### 18<|im_end|>"


def test_episode_engine_plays_a_remote_env(url, make_local, actions):
    """The project's episode engine (what the drivers and trainer adapters call) plays a RemoteEnv as
    it plays the env in process: the same trajectory."""
    from agent_gym.rollout.episode import play_episode
    from agent_gym.rollout.policy import Generation

    async def scripted(prompt_ids, script):
        return Generation(script.pop(0))

    async def main(env):
        script = [actions["call"], actions["answer"]]
        return await play_episode(env, lambda p: scripted(p, script), task_id=TASK_ID, trajectory_id="t")

    local_env = make_local()
    remote_env = RemoteEnv(url)
    try:
        local, remote = asyncio.run(main(local_env)), asyncio.run(main(remote_env))
    finally:
        local_env.close()
        remote_env.close()
    assert remote.env_id == local.env_id == ENV_ID
    assert [s.prompt_ids for s in remote.steps] == [s.prompt_ids for s in local.steps]
    assert [s.response_ids for s in remote.steps] == [s.response_ids for s in local.steps]
    assert [s.info for s in remote.steps] == [to_jsonable(s.info) for s in local.steps]
    assert remote.reward == local.reward == 1.0
    remote_sample, local_sample = remote.sequence(), local.sequence()
    assert (remote_sample.prompt_ids, remote_sample.response_ids, remote_sample.response_mask) == (
        local_sample.prompt_ids, local_sample.response_ids, local_sample.response_mask,
    )


# -- sessions: isolated, bounded, closed when the client goes -------------------------------------------


def test_concurrent_clients_get_isolated_episodes(url, make_local, actions):
    plans = [("test-0", ["call", "answer"]), ("test-1", ["wrong"]), ("test-0", ["call", "wrong"])]
    expected = [play_local(make_local, task, [actions[a] for a in steps]) for task, steps in plans]

    async def play(task, steps, barrier):
        async with AgentGymClient(url) as client:
            out = [await client.reset(task_id=task)]
            await barrier.wait()  # every session is open (and reset) before anyone steps
            for name in steps:
                out.append(await client.step(actions[name]))
                await asyncio.sleep(0)
            await barrier.wait()
            return out

    async def main():
        barrier = asyncio.Barrier(len(plans) + 1)
        tasks = [asyncio.create_task(play(task, steps, barrier)) for task, steps in plans]
        await barrier.wait()
        during = await asyncio.to_thread(get_json, url + "/sessions")
        await barrier.wait()
        return await asyncio.gather(*tasks), during

    results, during = asyncio.run(main())
    assert during["active_sessions"] == len(plans) and during["open_envs"] == len(plans)
    for got, want in zip(results, expected):
        assert got[0].observation.prompt_ids == want[0][0]["prompt_ids"].tolist()
        for result, (obs, reward, terminated, truncated, info) in zip(got[1:], want[1:]):
            assert result.observation.prompt_ids == obs["prompt_ids"].tolist()
            assert result.observation.messages == to_jsonable(obs["messages"])
            assert (result.reward, result.observation.terminated, result.observation.truncated) == (reward, terminated, truncated)
            assert result.observation.info == to_jsonable(info)
    assert [r[-1].reward for r in results] == [1.0, 0.0, 0.0]


def test_sessions_beyond_max_sessions_are_refused(url):
    async def main():
        clients = [AgentGymClient(url) for _ in range(MAX_SESSIONS)]
        for client in clients:
            await client.reset(task_id=TASK_ID)
        extra = AgentGymClient(url)
        with pytest.raises(ServerError) as refused:
            await extra.reset(task_id=TASK_ID)
        await extra.close()
        await clients[0].close()
        await asyncio.to_thread(wait_for_sessions, url, active=MAX_SESSIONS - 1, open_envs=MAX_SESSIONS - 1)
        again = AgentGymClient(url)  # a freed slot is taken again
        result = await again.reset(task_id=TASK_ID)
        for client in clients[1:] + [again]:
            await client.close()
        return refused.value, result

    refused, result = asyncio.run(main())
    assert refused.code == "CAPACITY_REACHED" and f"{MAX_SESSIONS}/{MAX_SESSIONS}" in str(refused)
    assert result.observation.info["task_id"] == TASK_ID


CLIENT_SCRIPT = textwrap.dedent(
    """
    import sys
    from agent_gym_openenv.client import RemoteEnv
    env = RemoteEnv(sys.argv[1])
    env.reset(options={"task_id": "test-0"})
    obs, *_ = env.step([int(i) for i in sys.argv[2].split(",")])
    print("mid-episode", len(obs["prompt_ids"]), flush=True)
    sys.stdin.read()  # until killed
    """
)


def test_client_killed_mid_episode_leaks_nothing(url, actions):
    before = get_json(url + "/sessions")
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT_SCRIPT, url, ",".join(map(str, actions["call"]))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )
    try:
        assert client.stdout.readline().startswith("mid-episode ")
        during = get_json(url + "/sessions")
        assert (during["active_sessions"], during["open_envs"]) == (1, 1)
        client.send_signal(signal.SIGKILL)  # no close message, no websocket close handshake
        client.wait()
    finally:
        if client.poll() is None:
            client.kill()
    after = wait_for_sessions(url, active=0, open_envs=0)
    assert after["envs_closed"] - before["envs_closed"] == 1
    assert after["envs_created"] - before["envs_created"] == 1


def test_client_that_drops_its_socket_leaks_nothing(url, actions):
    """A connection dropped while the session is mid-episode (the transport aborted, no close frame)."""

    async def main():
        client = AgentGymClient(url)
        await client.reset(task_id=TASK_ID)
        await client.step(actions["call"])
        client._ws.transport.abort()

    asyncio.run(main())
    wait_for_sessions(url, active=0, open_envs=0)


def test_remote_env_dropped_without_close_leaks_nothing(url, actions):
    import gc

    env = RemoteEnv(url)
    env.reset(options={"task_id": TASK_ID})
    env.step(actions["call"])
    assert get_json(url + "/sessions")["active_sessions"] == 1
    del env
    gc.collect()
    wait_for_sessions(url, active=0, open_envs=0)


# -- bad requests: clear errors, the server and the episode carry on -----------------------------------


def test_step_before_reset_and_after_the_end(url, actions):
    async def main():
        async with AgentGymClient(url) as client:
            with pytest.raises(ServerError) as before:
                await client.step(actions["answer"])
            await client.reset(task_id=TASK_ID)
            final = await client.step(actions["answer"])
            with pytest.raises(ServerError) as after:
                await client.step(actions["answer"])
            again = await client.reset(task_id=TASK_ID)  # the session is fine: a new episode starts
            return before.value, final, after.value, again

    before, final, after, again = asyncio.run(main())
    assert before.code == "EXECUTION_ERROR" and "step before reset" in str(before) and "send a reset" in str(before)
    assert final.done and final.reward == 1.0
    assert after.code == "EXECUTION_ERROR" and "episode is over" in str(after)
    assert again.observation.info["task_id"] == TASK_ID


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"token_ids": "1 2 3"}, "token_ids: Input should be a valid list"),
        ({"token_ids": [1, 2.5]}, "token_ids.1: Input should be a valid integer"),
        ({"token_ids": [1, True]}, "token_ids.1: Input should be a valid integer"),
        ({"token_ids": [1], "text": "x"}, "exactly one of token_ids and text; got both"),
        ({}, "exactly one of token_ids and text; got neither"),
        ({"tokens": [1]}, "tokens: Extra inputs are not permitted"),
    ],
)
def test_malformed_actions_are_refused_and_the_episode_goes_on(url, make_local, actions, payload, message):
    local = play_local(make_local, TASK_ID, [actions["call"], actions["answer"]])

    async def main():
        async with AgentGymClient(url) as client:
            await client.reset(task_id=TASK_ID)
            with pytest.raises(ServerError) as refused:
                await client.step(payload)
            first = await client.step(actions["call"])
            with pytest.raises(ServerError):
                await client.step(payload)
            return refused.value, first, await client.step(actions["answer"])

    refused, first, last = asyncio.run(main())
    assert refused.code == "VALIDATION_ERROR" and message in str(refused)
    # The refused requests never reached the env: the episode is the one played in process.
    assert first.observation.prompt_ids == local[1][0]["prompt_ids"].tolist()
    assert last.observation.prompt_ids == local[2][0]["prompt_ids"].tolist()
    assert last.reward == 1.0 and last.observation.info["turn"] == 2


@pytest.mark.parametrize("bad_ids", [[5, 49152], [-1], [2**70]], ids=["past-vocab", "negative", "huge"])
def test_out_of_vocabulary_ids_end_the_episode_as_in_process(url, make_local, bad_ids):
    local = play_local(make_local, TASK_ID, [bad_ids])
    env = RemoteEnv(url)
    try:
        env.reset(options={"task_id": TASK_ID})
        remote = env.step(bad_ids)
    finally:
        env.close()
    assert_same_step(remote, local[1])
    obs, reward, terminated, truncated, info = remote
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert "outside the vocabulary" in info["invalid_action"] or "integer token ids" in info["invalid_action"]


def test_bad_resets_get_clear_errors(url):
    async def main():
        async with AgentGymClient(url) as client:
            errors = []
            for kwargs in ({"task_id": "test-99999"}, {"options": {"task_idx": "test-0"}}, {"colour": "red"}, {"seed": -3}):
                with pytest.raises(ServerError) as refused:
                    await client.reset(**kwargs)
                errors.append(str(refused.value))
            ok = await client.reset(seed=3)
            return errors, ok

    errors, ok = asyncio.run(main())
    assert "no task with id 'test-99999'" in errors[0]
    assert "unknown reset option(s) ['task_idx']" in errors[1]
    assert "unknown reset argument(s) ['colour']" in errors[2]
    assert "seed must be a non-negative integer" in errors[3]
    assert ok.observation.info["task_id"].startswith("test-")


def test_raw_protocol_errors(url):
    """Frames no OpenEnv client sends: invalid JSON, an unknown message type, a step without data."""
    from websockets.sync.client import connect

    with connect(url.replace("http://", "ws://") + "/ws") as ws:
        replies = []
        for frame in ["{not json", json.dumps({"type": "jump"}), json.dumps({"type": "step"})]:
            ws.send(frame)
            replies.append(json.loads(ws.recv(timeout=30)))
        ws.send(json.dumps({"type": "reset", "data": {"task_id": TASK_ID}}))
        reset = json.loads(ws.recv(timeout=30))
    assert [r["type"] for r in replies] == ["error"] * 3
    assert [r["data"]["code"] for r in replies] == ["INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR"]
    assert "Unknown message type: jump" in replies[1]["data"]["message"]
    assert reset["type"] == "observation" and reset["data"]["observation"]["info"]["task_id"] == TASK_ID


def test_unknown_sessions_and_the_stateless_http_routes(url):
    """openenv-core's session-addressed requests (HTTP MCP) with an unknown session id; its HTTP
    sessions count like websocket ones and close; HTTP /step (stateless) explains itself."""
    rpc = lambda method, params, i: post_json(url + "/mcp", {"jsonrpc": "2.0", "method": method, "params": params, "id": i})  # noqa: E731
    _, closed = rpc("openenv/session/close", {"session_id": "no-such-session"}, 1)
    assert "Unknown session_id: no-such-session" in closed["error"]["message"]
    _, called = rpc("tools/call", {"session_id": "no-such-session", "name": "calculate", "arguments": {}}, 2)
    assert "Unknown session_id: no-such-session" in called["error"]["message"]
    _, created = rpc("openenv/session/create", {}, 3)
    session_id = created["result"]["session_id"]
    assert get_json(url + "/sessions")["active_sessions"] == 1
    _, closed = rpc("openenv/session/close", {"session_id": session_id}, 4)
    assert closed["result"] == {"session_id": session_id, "closed": True}
    _, again = rpc("openenv/session/close", {"session_id": session_id}, 5)
    assert f"Unknown session_id: {session_id}" in again["error"]["message"]

    status, body = post_json(url + "/step", {"action": {"token_ids": [1, 2]}})
    assert status == 409 and "step before reset" in body["detail"] and "play episodes over /ws" in body["detail"]
    status, body = post_json(url + "/step", {"action": {"token_ids": "x"}})
    assert status == 422 and body["detail"][0]["loc"][-1] == "token_ids"
    status, body = post_json(url + "/reset", {"task_id": "test-99999"})
    assert status == 400 and "no task with id 'test-99999'" in body["detail"]
    status, body = post_json(url + "/reset", {"task_id": TASK_ID})
    assert status == 200 and body["observation"]["info"]["task_id"] == TASK_ID and body["done"] is False


def test_stock_openenv_client_and_server_info(url, make_local, actions):
    """openenv-core's GenericEnvClient (raw dicts) plays the env too, and errors reach it."""
    from openenv.core import GenericEnvClient

    local = play_local(make_local, TASK_ID, [actions["call"]])

    async def main():
        async with GenericEnvClient(base_url=url) as client:
            first = await client.reset(task_id=TASK_ID)
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                await client.step({"token_ids": "x"})
            step = await client.step({"token_ids": actions["call"]})
            return first, step

    first, step = asyncio.run(main())
    assert first.observation["prompt_ids"] == local[0][0]["prompt_ids"].tolist()
    assert step.observation["prompt_ids"] == local[1][0]["prompt_ids"].tolist() and step.reward == 0.0
    assert set(step.observation) == {"prompt_ids", "messages", "tools", "terminated", "truncated", "info"}

    info = get_json(url + "/env_info")
    env = make_local()
    base = env.unwrapped
    assert info["env_id"] == ENV_ID and info["env_kwargs"] == {"split": "test"}
    assert info["vocab_size"] == base.template.vocab_size == 49152
    assert info["end_of_turn_ids"] == base.template.end_of_turn_ids
    assert info["max_action_tokens"] == base.max_action_tokens and info["max_turns"] == base.max_turns
    assert [t["function"]["name"] for t in info["tools"]] == ["calculate"]
    env.close()
    schema = get_json(url + "/schema")
    assert set(schema["action"]["properties"]) >= {"token_ids", "text"}
    assert set(schema["observation"]["properties"]) >= {"prompt_ids", "messages", "tools", "info"}
    assert get_json(url + "/health")["status"] == "healthy"
    assert get_json(url + "/metadata")["name"] == ENV_ID
