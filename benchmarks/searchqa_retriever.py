#!/usr/bin/env python3
"""SearchQA at users' scale: a generated corpus of ~1M passages behind ``agent-gym serve-retriever``.

It generates the corpus (the SearchQA world at ``--passages / 5040`` times its size, seeded, written as a
Search-R1 JSONL corpus) and medium questions about it (a JSONL file), then measures:

- ``build``: ``agent-gym serve-retriever CORPUS --build-only`` in a subprocess (bm25s): wall time, peak RSS,
  index size on disk; and, for comparison, the in-process index (``load_corpus`` + ``load_or_build``, what
  ``corpus=`` does in every env) with the RSS it adds to this process;
- ``serve``: the server's memory once warm (RSS and PSS: with ``--workers 2`` the memory-mapped index is
  shared, so PSS per worker is about half its RSS);
- ``query``: the latency of one /retrieve request over a keep-alive connection at batch 1 and batch 64
  (p50, p99, and per query), queries being the questions and their entity names;
- ``episodes``: scripted medium episodes (search the start name, search the next name, answer), played with
  ``agent_gym.rollout.play_episode`` on envs of ``questions=`` the file and either ``corpus=`` the file
  (in-process, one env: its index is per process, its corpus per env) or ``retriever=`` the server (one env
  sequentially, and ``--concurrency`` envs in one event loop, whose searches share requests).

Nothing is asserted; the figures depend on the machine. On a shared machine run it once, niced:

    nice python benchmarks/searchqa_retriever.py --passages 1000000 --out /tmp/searchqa-1m --json /tmp/searchqa-1m.json
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

AGENT_GYM = str(Path(sys.executable).with_name("agent-gym"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def log(*parts) -> None:
    print(*parts, flush=True)


def generate(out: Path, passages: int, questions: int, seed: int, reuse: bool) -> tuple[Path, Path, dict]:
    """The corpus and questions files (kept with ``reuse`` when both exist), and what the corpus took."""
    from agent_gym_searchqa.questions import generate_question
    from agent_gym_searchqa.world import generate_world

    corpus, qfile = out / "corpus.jsonl", out / "questions.jsonl"
    if reuse and corpus.is_file() and qfile.is_file():
        return corpus, qfile, {"passages": sum(1 for _ in open(corpus)), "reused": True, "corpus_bytes": corpus.stat().st_size}
    start = time.perf_counter()
    world = generate_world(seed, passages / 5040)
    world_s = time.perf_counter() - start
    start = time.perf_counter()
    with open(corpus, "w") as f:
        for doc_id, title, text in world.documents():
            f.write(json.dumps({"id": doc_id, "contents": f'"{title}"\n{text}'}) + "\n")
    with open(qfile, "w") as f:
        for n in range(questions):
            f.write(json.dumps(generate_question(world, "test", "medium", n).to_dict()) + "\n")
    return corpus, qfile, {"passages": len(world), "world_s": world_s, "write_s": time.perf_counter() - start,
                           "corpus_bytes": corpus.stat().st_size}


def scripts_of(corpus: Path, qfile: Path) -> tuple[dict, dict]:
    """Each question's scripted queries (the names of its first two passages: their titles) and answer."""
    tasks = [json.loads(line) for line in open(qfile)]
    wanted = {d for t in tasks for d in t["supporting_docs"][:2]}
    titles = {}
    with open(corpus) as f:
        for line in f:
            row = json.loads(line)
            if row["id"] in wanted:
                titles[row["id"]] = row["contents"].split("\n", 1)[0].strip('"')
    scripts = {t["id"]: [titles[d] for d in t["supporting_docs"][:2]] for t in tasks}
    return scripts, {t["id"]: t["golden_answers"][0] for t in tasks}


def build_server_index(corpus: Path, index: Path) -> dict:
    shutil.rmtree(index, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([AGENT_GYM, "serve-retriever", str(corpus), "--index", str(index), "--build-only"], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest child so far: the build
    size = sum(p.stat().st_size for p in index.rglob("*") if p.is_file())
    return {"build_s": wall, "build_peak_rss_mib": peak_kib / 1024, "index_mib": size / 2**20}


def start_server(index: Path, workers: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([AGENT_GYM, "serve-retriever", str(index), "--port", "0", "--workers", str(workers)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = proc.stdout.readline()
    return proc, line.split(" at ", 1)[1].split(" ", 1)[0]


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)


def server_memory(proc: subprocess.Popen) -> dict:
    parent = psutil.Process(proc.pid)
    workers = parent.children() or [parent]
    infos = [w.memory_full_info() for w in workers]
    return {"workers": len(workers), "rss_mib": [round(i.rss / 2**20) for i in infos],
            "pss_mib": [round(i.pss / 2**20) for i in infos]}


class Client:
    def __init__(self, url: str):
        hostport = url.split("//")[1].split("/")[0]
        self.conn = http.client.HTTPConnection(hostport, timeout=120)

    def retrieve(self, queries: list[str], topk: int = 3) -> dict:
        self.conn.request("POST", "/retrieve", body=json.dumps({"queries": queries, "topk": topk, "return_scores": True}),
                          headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return json.loads(response.read())


def latency(url: str, queries: list[str], batch: int, requests: int) -> dict:
    client = Client(url)
    for i in range(5):  # warm-up: the first requests page the index in
        client.retrieve(queries[i * batch:(i + 1) * batch] or queries[:batch])
    times = []
    for i in range(requests):
        chunk = [queries[(i * batch + j) % len(queries)] for j in range(batch)]
        start = time.perf_counter()
        client.retrieve(chunk)
        times.append(time.perf_counter() - start)
    p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
    return {"batch": batch, "requests": requests, "p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3,
            "per_query_p50_ms": p50 * 1e3 / batch, "queries_per_s": batch * requests / sum(times)}


def scripted(env, task_id: str, scripts: dict, answers: dict):
    """The generate function of one scripted episode: search the start name, the next name, answer."""
    from agent_gym.rollout.policy import Generation
    from agent_gym.tools import HermesParser

    template = env.unwrapped.template
    end = list(template.end_of_turn_ids)
    texts = [HermesParser().format_calls([{"name": "search", "arguments": {"query": name}}]) for name in scripts[task_id]]
    turns = iter([*texts, f"<answer>{answers[task_id]}</answer>"])

    async def generate(prompt_ids):
        return Generation(template.encode(next(turns)) + end)

    return generate


async def play_many(envs: list, task_ids: list[str], scripts: dict, answers: dict) -> tuple[int, int]:
    """Every env plays its share of ``task_ids`` in turn, all envs at once. Returns (episodes, correct)."""
    from agent_gym.rollout.episode import play_episode

    async def worker(k: int, env) -> tuple[int, int]:
        done = correct = 0
        for task_id in task_ids[k::len(envs)]:
            trajectory = await play_episode(env, scripted(env, task_id, scripts, answers), task_id=task_id)
            done += 1
            correct += trajectory.steps[-1].reward == 1.0
        return done, correct

    results = await asyncio.gather(*(worker(k, env) for k, env in enumerate(envs)))
    return sum(r[0] for r in results), sum(r[1] for r in results)


def episodes_per_s(make, count: int, task_ids: list[str], scripts: dict, answers: dict) -> dict:
    envs = [make() for _ in range(count)]
    asyncio.run(play_many(envs, task_ids[:count], scripts, answers))  # warm-up: each env's first (checked) step
    rest = task_ids[count:]
    client = envs[0].unwrapped.retriever
    before = dict(client.stats) if client is not None else {}
    start = time.perf_counter()
    done, correct = asyncio.run(play_many(envs, rest, scripts, answers))
    wall = time.perf_counter() - start
    stats = {k: v - before.get(k, 0) for k, v in client.stats.items()} if client is not None else {}
    for env in envs:
        env.close()
    return {"envs": count, "episodes": done, "correct": correct, "wall_s": wall, "episodes_per_s": done / wall,
            "client": stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=1_000_000, help="corpus size, about (default 1,000,000)")
    parser.add_argument("--questions", type=int, default=600, help="medium questions written (default 600)")
    parser.add_argument("--queries", type=int, default=2000, help="distinct queries for the latency runs (default 2000)")
    parser.add_argument("--requests", type=int, default=400, help="timed requests at batch 1 (default 400; batch 64: a quarter)")
    parser.add_argument("--episodes", type=int, default=128, help="timed episodes per episode run (default 128)")
    parser.add_argument("--concurrency", type=int, default=64, help="envs in flight through the server (default 64)")
    parser.add_argument("--seed", type=int, default=1729, help="world seed (default 1729)")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the corpus, questions and index")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument("--reuse", action="store_true", help="keep the corpus and questions files of an earlier run in --out")
    parser.add_argument("--skip-in-process", action="store_true", help="no in-process index (its memory is the corpus's, per env)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["AGENT_GYM_CACHE"] = str(args.out / "cache")  # the in-process index's cache: fresh, inside --out
    results: dict = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}

    corpus, qfile, results["corpus"] = generate(args.out, args.passages, args.questions, args.seed, args.reuse)
    log("corpus:", json.dumps(results["corpus"]))
    scripts, answers = scripts_of(corpus, qfile)
    task_ids = list(scripts)
    queries = [q for task in task_ids for q in scripts[task]][: args.queries]
    with open(qfile) as f:
        queries += [json.loads(line)["question"] for line in f][: max(0, args.queries - len(queries))]

    index = args.out / "index"
    results["server_build"] = build_server_index(corpus, index)
    log("server build:", json.dumps(results["server_build"]))

    proc, url = start_server(index, 1)
    try:
        results["latency"] = [latency(url, queries, 1, args.requests), latency(url, queries, 64, max(10, args.requests // 4))]
        for row in results["latency"]:
            log("latency:", json.dumps(row))
        results["server_memory_1"] = server_memory(proc)
        log("server memory, 1 worker:", json.dumps(results["server_memory_1"]))
        import gymnasium as gym

        import agent_gym  # noqa: F401

        def remote():
            return gym.make("AgentR1/SearchQA-v0", questions=str(qfile), split="test", retriever=url)

        results["episodes_server_1"] = episodes_per_s(remote, 1, task_ids[: args.episodes + 1], scripts, answers)
        log("episodes through the server, 1 env:", json.dumps(results["episodes_server_1"]))
        n = args.concurrency
        results["episodes_server_n"] = episodes_per_s(remote, n, task_ids[: args.episodes + n], scripts, answers)
        log(f"episodes through the server, {n} envs:", json.dumps(results["episodes_server_n"]))
    finally:
        stop_server(proc)
    proc, url = start_server(index, 2)
    try:
        client = Client(url)
        for i in range(0, 256, 64):  # both workers touch the index (connections go to either)
            Client(url).retrieve(queries[i:i + 64])
            client.retrieve(queries[i:i + 64])
        results["server_memory_2"] = server_memory(proc)
        log("server memory, 2 workers:", json.dumps(results["server_memory_2"]))
    finally:
        stop_server(proc)

    if not args.skip_in_process:
        from agent_gym_searchqa.corpus import load_corpus
        from agent_gym_searchqa.index import load_or_build

        me = psutil.Process()
        before = me.memory_info().rss
        start = time.perf_counter()
        passages = load_corpus(corpus)
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        load_or_build(passages)  # built, saved to the cache, kept in this process for the env below
        build_s = time.perf_counter() - start
        results["in_process_build"] = {"load_corpus_s": load_s, "build_s": build_s,
                                       "added_rss_mib": (me.memory_info().rss - before) / 2**20}
        log("in-process build:", json.dumps(results["in_process_build"]))
        del passages
        import gymnasium as gym

        def local():
            return gym.make("AgentR1/SearchQA-v0", questions=str(qfile), corpus=str(corpus), split="test")

        start = time.perf_counter()
        local().close()
        results["in_process_build"]["env_make_s"] = time.perf_counter() - start  # reads the corpus again, index kept
        results["episodes_in_process"] = episodes_per_s(local, 1, task_ids[: args.episodes + 1], scripts, answers)
        log("episodes in-process, 1 env:", json.dumps(results["episodes_in_process"]))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
