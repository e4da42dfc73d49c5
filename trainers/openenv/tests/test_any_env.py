"""Every registered env served: a seeded episode prefix played over the wire equals it in process.

The server here is ``create_app`` under uvicorn in a thread of the test process (one per env id, all
sharing the imports the subprocess servers of test_server.py would each pay again); the client is
openenv-core's EnvClient (``RemoteEnv``), over a real localhost socket.
"""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import pytest

import agent_gym
from agent_gym.trajectory import to_jsonable
from agent_gym_openenv.client import RemoteEnv, wait_for_server
from agent_gym_openenv.server import _listen, create_app

ENV_IDS = sorted(card.id for card in agent_gym.list_envs())
#: Turns a policy might write: a plain answer, a tool call (a tool error where the env has no
#: calculator), a game move; each env is stepped with them until its episode ends.
TEXTS = [
    "Let me think.\n#### 12",
    '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 * (3 + 4)"}}\n</tool_call>',
    "<action>up</action>",
]


class ThreadServer:
    def __init__(self, app):
        import uvicorn

        self.sock = _listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        wait_for_server(self.url)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def test_every_registered_env_is_served():
    assert {"AgentR1/GSM8KTool-v0", "AgentR1/Sokoban-v0", "AgentR1/TableQA-v0"} <= set(ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_over_the_wire_matches_in_process(env_id, tokenizer):
    local = gym.make(env_id, tokenizer=tokenizer)
    end = list(local.unwrapped.template.end_of_turn_ids)
    actions = [tokenizer.encode(text, add_special_tokens=False) + end for text in TEXTS]
    app = create_app(env_id, tokenizer=tokenizer, max_sessions=2)
    served = app.state.served
    server = ThreadServer(app)
    remote = RemoteEnv(server.url)
    try:
        assert remote.spec.id == env_id
        assert remote.action_space.vocab_size == local.unwrapped.template.vocab_size
        got, want = remote.reset(seed=7), local.reset(seed=7)
        pairs = [(got, want)]
        for action in actions:
            got, want = remote.step(action), local.step(action)
            pairs.append((got, want))
            if want[2] or want[3]:
                break
        for got, want in pairs:
            np.testing.assert_array_equal(got[0]["prompt_ids"], want[0]["prompt_ids"])
            assert got[0]["messages"] == to_jsonable(want[0]["messages"])
            assert got[0]["tools"] == to_jsonable(want[0]["tools"])
            assert got[1:-1] == want[1:-1]
            assert got[-1] == to_jsonable(want[-1])
    finally:
        remote.close()
        local.close()
        try:
            # The session closes as the server reads the closed connection.
            deadline = time.monotonic() + 30
            while served.open_envs and time.monotonic() < deadline:
                time.sleep(0.05)
            assert served.open_envs == 0
        finally:
            server.stop()
