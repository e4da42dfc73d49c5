"""SearchQA through a retrieval server: the real ``agent-gym serve-retriever`` on localhost (a subprocess, or
its server class in a thread of this process), the env's episodes through it (the same ids and rewards as
in-process), batching across episodes in flight, and every way a server can fail becoming a counted tool
error. Nothing is timed: batching is checked by request counts."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.tools import HermesParser
from agent_gym_searchqa.remote import RetrieverError, normalize_url, parse_response
from agent_gym_searchqa.retrieval import RetrievalIndex, prepare_index
from agent_gym_searchqa.server import RetrieverServer

ENV_ID = "AgentR1/SearchQA-v0"


def act(env, text: str) -> list[int]:
    return env.unwrapped.template.encode(text) + list(env.unwrapped.template.end_of_turn_ids)


def call(env, name: str, **arguments) -> list[int]:
    return act(env, HermesParser().format_calls([{"name": name, "arguments": arguments}]))


@pytest.fixture(scope="module")
def world_index(retriever_cache):
    folder, _ = prepare_index("world", index_dir=retriever_cache / "world-index", show_progress=False)
    return RetrievalIndex(folder)


@pytest.fixture(scope="module")
def server(world_index):
    """The same server class, in a thread of this process."""
    with RetrieverServer(world_index, port=0) as srv:
        yield srv


# -- the env through the server ------------------------------------------------------------------------------


def play(env):
    """The docs' hard episode: search, open, search, answer. Returns every observation, reward and info."""
    out = [env.reset(options={"task_id": "test-hard-0"})]
    for action in (call(env, "search", query="The Letters and the Orchestra"), call(env, "open", doc_id="w00798"),
                   call(env, "search", query="Nocat Gazette"), act(env, "<answer>Ivo Dadov</answer>")):
        out.append(env.step(action))
    return out


def test_an_episode_through_the_server_is_the_in_process_episode(world_server, tokenizer):
    local = play(gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard", split="test"))
    remote_env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard", split="test", retriever=world_server)
    remote = play(remote_env)
    for a, b in zip(local, remote):
        assert a[0]["prompt_ids"].tolist() == b[0]["prompt_ids"].tolist() and a[0]["messages"] == b[0]["messages"]
        assert a[1:] == b[1:]
    obs, reward, terminated, truncated, info = remote[-1]
    assert (reward, terminated, info["answer_check"], info["tool_calls"], info["tool_errors"]) == (1.0, True, "correct", 3, 0)
    assert remote[1][0]["messages"][-1]["content"].splitlines()[0] == "[1] id: w04233 | The Letters and the Orchestra"
    assert remote_env.unwrapped.index is None and sorted(remote_env.unwrapped.retrieved)[:2] == ["w00542", "w00798"]


def test_open_takes_what_this_episode_s_searches_found(server, tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard", split="test", retriever=server.url)
    env.reset(options={"task_id": "test-hard-0"})
    obs, _, _, _, info = env.step(call(env, "open", doc_id="w00798"))
    assert obs["messages"][-1]["content"] == (
        "Error: no passage with the id 'w00798' was found by a search of this question: open an id exactly as a "
        "search result shows it (after 'id:'), after that search")
    assert info["tool_error_kinds"] == {"unknown_doc_id": 1}
    env.step(call(env, "search", query="The Letters and the Orchestra"))
    snap = pickle.loads(pickle.dumps(env.unwrapped.snapshot()))
    obs, *_ = env.step(call(env, "open", doc_id="w00798"))
    assert obs["messages"][-1]["content"].startswith("id: w00798 | Selka Wim\nSelka Wim (born 1803) was a botanist")
    fresh = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="hard", split="test", retriever=server.url)
    agent_gym.restore(fresh, snap)  # the retrieved passages are episode state: the restored env opens them too
    again, *_ = fresh.step(call(fresh, "open", doc_id="w00798"))
    assert again["prompt_ids"].tolist() == obs["prompt_ids"].tolist()
    env.reset(seed=1)  # a new episode forgets them
    assert env.unwrapped.retrieved == {}


def episodes(url, tokenizer, n, **kwargs):
    envs = [gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", split="test", retriever=url, **kwargs) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(options={"task_id": f"test-easy-{i}"})
    return envs


def test_searches_of_episodes_in_flight_share_one_request(server, tokenizer):
    # A long window and a batch of exactly the episodes in flight: the 16th search sends the request.
    envs = episodes(server.url, tokenizer, 16, retriever_window_s=60.0, retriever_max_batch=16)
    client = envs[0].unwrapped.retriever
    assert all(e.unwrapped.retriever is client for e in envs)  # one client per process and settings
    before = server.stats["requests"]

    async def step_all():  # unwrapped: gymnasium's checker would run each env's first step in a thread of its own
        return await asyncio.gather(*(e.unwrapped.astep(call(e, "search", query=e.unwrapped.task.question)) for e in envs))

    results = asyncio.run(step_all())
    assert server.stats["requests"] - before == 1 and client.stats["requests"] == 1 and client.stats["queries"] == 16
    local = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", split="test")
    for i, (obs, reward, terminated, truncated, info) in enumerate(results):
        local.reset(options={"task_id": f"test-easy-{i}"})
        want, *_ = local.step(call(local, "search", query=local.unwrapped.task.question))
        assert obs["messages"][-1] == want["messages"][-1] and info["tool_results"] == ["ok"]


def test_a_batch_is_at_most_max_batch_and_one_topk(server, tokenizer):
    envs = episodes(server.url, tokenizer, 12, retriever_window_s=60.0, retriever_max_batch=4)
    wide = episodes(server.url, tokenizer, 4, retriever_window_s=60.0, retriever_max_batch=4, top_k=5)
    client = envs[0].unwrapped.retriever
    assert wide[0].unwrapped.retriever is client  # top_k is per search: the same client

    async def step_all():
        both = [*envs, *wide]
        return await asyncio.gather(*(e.unwrapped.astep(call(e, "search", query="Press")) for e in both))

    results = asyncio.run(step_all())
    assert client.stats["requests"] == 4 and client.stats["queries"] == 16
    assert [len(obs["messages"][-1]["content"].split("\n[")) for obs, *_ in results] == [3] * 12 + [5] * 4


def test_a_server_that_stops_answering_is_a_timeout(retriever_cli, retriever_cache, tokenizer):
    proc, url = retriever_cli.start("world", cache=retriever_cache)
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", split="test", retriever=url,
                   retriever_timeout_s=0.5, retriever_window_s=0.0)
    env.reset(options={"task_id": "test-easy-0"})
    try:
        os.kill(proc.pid, signal.SIGSTOP)  # connections are still accepted by the kernel; nothing answers
        obs, reward, terminated, truncated, info = env.step(call(env, "search", query="Press"))
        os.kill(proc.pid, signal.SIGCONT)
        assert obs["messages"][-1]["content"] == ("Error: the search service did not answer in time (no answer within "
                                                  "0.5 s); search again, or answer from what you have read")
        assert (reward, terminated, truncated, info["tool_results"]) == (0.0, False, False, ["retriever_timeout"])
        assert info["tool_errors"] == 1 and info["tool_error_kinds"] == {"retriever_timeout": 1}
        obs, *_, info = env.step(call(env, "search", query="Press"))  # the server is back: the next search works
        assert obs["messages"][-1]["content"].startswith("[1] id: ") and info["tool_results"] == ["ok"]
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        retriever_cli.stop(proc)
    obs, *_, info = env.step(call(env, "search", query="Press"))  # the server is gone
    assert obs["messages"][-1]["content"] == ("Error: the search service cannot be reached (Connection refused); "
                                              "search again later, or answer from what you have read")
    assert info["tool_error_kinds"] == {"retriever_timeout": 1, "retriever_unreachable": 1}
    assert env.unwrapped.retriever.stats["retriever_timeout"] == 1


def test_http_errors_and_other_servers_are_counted_tool_errors(server, tokenizer):
    env = gym.make(ENV_ID, tokenizer=tokenizer, difficulty="easy", split="test",
                   retriever=server.url.replace("/retrieve", "/search"), retriever_window_s=0.0)
    env.reset(options={"task_id": "test-easy-0"})
    obs, reward, terminated, truncated, info = env.step(call(env, "search", query="Press"))
    assert obs["messages"][-1]["content"] == ("Error: the search service failed (HTTP 404 Not Found); search again, or "
                                              "answer from what you have read")
    assert not (terminated or truncated) and info["tool_error_kinds"] == {"retriever_http_error": 1}
    # an empty query never reaches the server
    obs, *_, info = env.step(call(env, "search", query=" "))
    assert info["tool_results"] == ["empty_query"]


def test_answers_of_other_servers_parse_or_are_refused():
    # Search-R1's BM25 server sends title/text/contents without an id: the title names the passage.
    bm25 = {"result": [[{"document": {"title": "Paris", "text": "Paris is the capital.", "contents": '"Paris"\nParis is the capital.'},
                         "score": "12.5"}]]}
    assert [(h.id, h.title, h.text, h.score) for h in parse_response(bm25, 1)[0]] == [("Paris", "Paris", "Paris is the capital.", 12.5)]
    plain = {"result": [[{"id": "7", "contents": '"Lyon"\nLyon is a city.'}], []]}  # return_scores false
    assert [[(h.id, h.title, h.text, h.score) for h in hits] for hits in parse_response(plain, 2)] == [[("7", "Lyon", "Lyon is a city.", None)], []]
    for body, message in [({"results": []}, 'expected {"result": [...]}'), ({"result": [[]]}, "1 result lists for 2 queries"),
                          ({"result": [[{"document": {"id": 1}}], []]}, "a document has no contents"),
                          ({"result": ["x", []]}, "a result list is str")]:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("{", r"\{")):
            parse_response(body, 2)
    assert normalize_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/retrieve"
    with pytest.raises(ValueError, match="retriever must be an http"):
        normalize_url("127.0.0.1:8000")
    assert RetrieverError("retriever_bad_response", "x").kind == "retriever_bad_response"


def test_bad_retriever_arguments_name_the_fix(tmp_path, tokenizer):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "0", "contents": "x"}\n')
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "Why?", "golden_answers": ["x"]}\n')
    with pytest.raises(ValueError, match="retriever= and corpus= do not go together"):
        gym.make(ENV_ID, tokenizer=tokenizer, corpus=str(corpus), questions=str(questions), retriever="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="retriever must be an http"):
        gym.make(ENV_ID, tokenizer=tokenizer, retriever="localhost")
    with pytest.raises(AttributeError, match="the corpus is the server's"):
        gym.make(ENV_ID, tokenizer=tokenizer, retriever="http://127.0.0.1:1").unwrapped.passages
