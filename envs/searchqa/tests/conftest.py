"""Fixtures of the SearchQA tests: the embedded default model's tokenizer (SmolLM2-135M-Instruct), and real
retrieval servers (`agent-gym serve-retriever` subprocesses)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


class RetrieverCLI:
    """Starts ``agent-gym serve-retriever ARGS --port 0`` as a user would (its own process group) and
    stops every one it started (SIGTERM to the group) at the end of the session."""

    def __init__(self):
        self.started = []

    def start(self, *args, cache):
        import os
        import subprocess
        import sys
        from pathlib import Path

        env = {**os.environ, "AGENT_GYM_CACHE": str(cache)}
        command = [str(Path(sys.executable).with_name("agent-gym")), "serve-retriever", *args, "--port", "0", "--no-progress"]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.started.append(proc)
        line = proc.stdout.readline()  # the ready line, printed once the socket listens
        if not line.startswith("serving "):
            self.stop(proc)
            raise AssertionError(f"serve-retriever did not start: {line!r} {proc.stderr.read()}")
        return proc, line.split(" at ", 1)[1].split(" ", 1)[0]

    def stop(self, proc):
        import os
        import signal

        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)  # a test may have stopped it
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.fixture(scope="session")
def retriever_cli():
    cli = RetrieverCLI()
    yield cli
    for proc in cli.started:
        cli.stop(proc)


@pytest.fixture(scope="session")
def retriever_cache(tmp_path_factory):
    """The cache of the retriever tests' indexes (the world's is built once)."""
    return tmp_path_factory.mktemp("retriever-cache")


@pytest.fixture(scope="session")
def world_server(retriever_cli, retriever_cache):
    """``agent-gym serve-retriever world``: the URL of its /retrieve."""
    return retriever_cli.start("world", cache=retriever_cache)[1]
