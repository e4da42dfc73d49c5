#!/usr/bin/env python3
"""Server round-trip overhead per step: a GSM8KTool episode in process vs over OpenEnv on localhost.

The episode is the README's ("Step an env with token ids"), scripted, no model: task test-0, ``--turns``
calculator calls (1 by default, as in the README), then the final answer ``#### 18``. It is played
``--episodes`` times each way and the median of every step is printed:

- ``in process``: ``gym.make("AgentR1/GSM8KTool-v0")`` and ``env.step(ids)`` in this process;
- ``RemoteEnv``: ``agent_gym_openenv.RemoteEnv`` (what a trainer holds): one websocket session of an
  ``agent-gym serve`` subprocess, ``env.step(ids)`` from plain code;
- ``EnvClient``: ``agent_gym_openenv.AgentGymClient`` (openenv-core's async EnvClient), awaited on the
  caller's event loop;
- ``overhead``: RemoteEnv minus in process, per step: what serving adds (JSON both ways, the websocket,
  the server's event loop), the env's own work being the same on both sides.

Then ``--concurrency`` sessions play ``--episodes`` episodes each, all at once from one event loop:
steps per second through one server.
``reply kB`` is the size of a step's reply: each reply carries the whole observation (prompt ids and
messages), so it grows with the context.

The client and the server share this machine's cores; on a 2-core VM they also share them with
whatever else runs.

    python benchmarks/openenv_roundtrip.py                        # 1 tool call, 50 episodes
    python benchmarks/openenv_roundtrip.py --turns 8 --episodes 30
    python benchmarks/openenv_roundtrip.py --url http://127.0.0.1:8000   # a server you started (its max_turns > --turns)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENV_ID = "AgentR1/GSM8KTool-v0"
TASK_ID = "test-0"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}\n</tool_call>'
ANSWER = "She sells 9 eggs a day for $2 each.\n#### 18"


def start_server(turns: int) -> tuple[subprocess.Popen, str]:
    command = [
        sys.executable, "-c", "import sys; from agent_gym.cli.main import main; sys.exit(main())",
        "serve", ENV_ID, "--split", "test", "--port", "0", "--env-kwarg", f"max_turns={turns + 1}",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("agent-gym serve: "):
        proc.kill()
        raise SystemExit(f"agent-gym serve did not start (printed {line!r})")
    return proc, line.split(" at ", 1)[1].split()[0]


def script(tokenizer, turns: int) -> list[list[int]]:
    end = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    return [tokenizer.encode(text, add_special_tokens=False) + end for text in [CALL] * turns + [ANSWER]]


def play_sync(env, actions, times) -> None:
    started = time.perf_counter()
    env.reset(options={"task_id": TASK_ID})
    times[0].append(time.perf_counter() - started)
    for i, action in enumerate(actions, start=1):
        started = time.perf_counter()
        _, reward, terminated, truncated, _ = env.step(action)
        times[i].append(time.perf_counter() - started)
    assert reward == 1.0 and terminated, "the scripted episode did not end with the right answer"


async def play_client(client, actions, times, sizes=None) -> None:
    started = time.perf_counter()
    await client.reset(task_id=TASK_ID)
    times[0].append(time.perf_counter() - started)
    for i, action in enumerate(actions, start=1):
        started = time.perf_counter()
        result = await client.step(action)
        times[i].append(time.perf_counter() - started)
        if sizes is not None:
            sizes[i] = len(json.dumps(result.observation.model_dump()))
    assert result.reward == 1.0 and result.done


def median_ms(values) -> float:
    return 1000 * statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1, help="calculator calls before the answer (default: %(default)s)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes played each way (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="sessions stepping at once in the throughput run (default: %(default)s)")
    parser.add_argument("--url", default=None, help="an agent-gym serve server of GSM8KTool-v0 (split test); default: start one")
    parser.add_argument("--warmup", type=int, default=3, help="episodes played each way before timing (default: %(default)s)")
    args = parser.parse_args()

    import gymnasium as gym

    import agent_gym  # noqa: F401
    from agent_gym.models import load_tokenizer
    from agent_gym_openenv.client import AgentGymClient, RemoteEnv

    tokenizer = load_tokenizer()
    actions = script(tokenizer, args.turns)
    proc, url = (None, args.url) if args.url else start_server(args.turns)
    steps = len(actions) + 1  # the reset, then each action
    try:
        local_env = gym.make(ENV_ID, tokenizer=tokenizer, split="test", max_turns=args.turns + 1)
        remote_env = RemoteEnv(url)
        local = [[] for _ in range(steps)]
        remote = [[] for _ in range(steps)]
        client_times = [[] for _ in range(steps)]
        sizes = [0] * steps
        scratch = [[] for _ in range(steps)]
        for _ in range(args.warmup):
            play_sync(local_env, actions, scratch)
            play_sync(remote_env, actions, scratch)
        # Interleaved, so that a burst of load elsewhere on the machine hits both sides alike.
        for _ in range(args.episodes):
            play_sync(local_env, actions, local)
            play_sync(remote_env, actions, remote)

        async def with_client() -> None:
            async with AgentGymClient(url) as client:
                for _ in range(args.warmup):
                    await play_client(client, actions, scratch)
                for _ in range(args.episodes):
                    await play_client(client, actions, client_times, sizes)

        asyncio.run(with_client())

        async def concurrent() -> tuple[int, float]:
            clients = [AgentGymClient(url) for _ in range(args.concurrency)]
            for client in clients:
                await client.connect()
            per = args.episodes
            started = time.perf_counter()

            async def run(client) -> None:
                for _ in range(per):
                    await play_client(client, actions, [[] for _ in range(steps)])

            await asyncio.gather(*(run(c) for c in clients))
            elapsed = time.perf_counter() - started
            for client in clients:
                await client.close()
            return per * args.concurrency * len(actions), elapsed

        n_steps, elapsed = asyncio.run(concurrent())
        local_env.close()
        remote_env.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)

    print(f"{ENV_ID} task {TASK_ID}: {args.turns} calculator call(s) + answer, {args.episodes} episodes each way, median ms")
    header = f"{'step':<16}{'in process':>11}{'RemoteEnv':>11}{'EnvClient':>11}{'overhead':>10}{'reply kB':>10}"
    print(header)
    names = ["reset"] + [f"step {i} (call)" for i in range(1, args.turns + 1)] + [f"step {args.turns + 1} (answer)"]
    for i, name in enumerate(names):
        lo, re, cl = median_ms(local[i]), median_ms(remote[i]), median_ms(client_times[i])
        size = f"{sizes[i] / 1000:.1f}" if i else "-"
        print(f"{name:<16}{lo:>11.3f}{re:>11.3f}{cl:>11.3f}{re - lo:>10.3f}{size:>10}")
    lo = median_ms([t for row in local[1:] for t in row])
    re = median_ms([t for row in remote[1:] for t in row])
    cl = median_ms([t for row in client_times[1:] for t in row])
    print(f"{'all steps':<16}{lo:>11.3f}{re:>11.3f}{cl:>11.3f}{re - lo:>10.3f}")
    print(
        f"throughput: {args.concurrency} concurrent sessions, {n_steps} steps in {elapsed:.2f} s = "
        f"{n_steps / elapsed:.0f} steps/s through one server (in process, one env: {1000 / lo:.0f} steps/s)"
    )


if __name__ == "__main__":
    main()
