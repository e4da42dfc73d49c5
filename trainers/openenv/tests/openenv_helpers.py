"""Helpers of the OpenEnv tests: a real ``agent-gym serve`` subprocess on a free localhost port, plain
HTTP calls to it, and the GSM8KTool episode of the README ("Step an env with token ids").

The server is a subprocess, as users run it: what the tests see is what an OpenEnv client sees, and
"the server survives" means the process is still running.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parents[3]
ENV_ID = "AgentR1/GSM8KTool-v0"
TASK_ID = "test-0"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}\n</tool_call>'
ANSWER = "She sells 9 eggs a day for $2 each.\n#### 18"
WRONG = "She sells 7 eggs.\n#### 14"
MAX_SESSIONS = 4
#: The ``agent-gym`` command of this interpreter.
AGENT_GYM = [sys.executable, "-c", "import sys; from agent_gym.cli.main import main; sys.exit(main())"]


def start_server(*args: str, timeout: float = 180.0) -> tuple[subprocess.Popen, str]:
    """``agent-gym serve ARGS --port 0`` in a subprocess; returns it and its URL once it listens."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [*AGENT_GYM, "serve", *args, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def drain() -> None:  # a server blocked on a full stderr pipe would look hung
        assert proc.stderr is not None
        for line in proc.stderr:
            proc.stderr_tail.append(line)  # type: ignore[attr-defined]

    proc.stderr_tail = collections.deque(maxlen=200)  # type: ignore[attr-defined]
    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            proc.kill()
            raise RuntimeError(f"agent-gym serve printed no address within {timeout} s")
        if line is None:
            code = proc.wait()
            time.sleep(0.2)  # the stderr reader's last lines
            raise RuntimeError(f"agent-gym serve exited with {code}: {''.join(proc.stderr_tail)}")
        if line.startswith("agent-gym serve: "):
            url = line.split(" at ", 1)[1].split()[0]
            return proc, url


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def get_json(url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return json.loads(response.read())


def post_json(url: str, body: dict) -> tuple[int, dict]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for_sessions(url: str, *, active: int, open_envs: int, timeout: float = 30.0) -> dict:
    """``/sessions`` once it reports ``active`` sessions and ``open_envs`` envs (a hang guard, not a
    speed check: the server closes a dropped session as soon as it reads the closed socket)."""
    deadline = time.monotonic() + timeout
    while True:
        state = get_json(url + "/sessions")
        if state["active_sessions"] == active and state["open_envs"] == open_envs:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"/sessions stayed at {state}, expected {active} sessions and {open_envs} envs")
        time.sleep(0.05)
