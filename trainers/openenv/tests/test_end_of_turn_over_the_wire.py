"""Over ``agent-gym serve`` a turn also ends at its first end-of-turn id: the ids after it are cut and
counted in ``info["ids_after_end_of_turn"]``, as in process (tests/test_end_of_turn_cut.py)."""

from __future__ import annotations

from agent_gym_openenv.client import RemoteEnv
from agent_gym_openenv.server import create_app
from test_any_env import ThreadServer


def test_ids_after_the_end_of_turn_are_not_graded_over_the_wire(tokenizer):
    app = create_app("AgentR1/GSM8K-v0", env_kwargs={"split": "test"}, tokenizer=tokenizer, max_sessions=1)
    server = ThreadServer(app)
    remote = RemoteEnv(server.url)
    try:
        remote.reset(options={"task_id": "test-0"})  # the answer is 18
        eot = list(remote.env_info["end_of_turn_ids"])
        after = tokenizer.encode("#### 19", add_special_tokens=False)
        obs, reward, terminated, truncated, info = remote.step(
            tokenizer.encode("#### 18", add_special_tokens=False) + eot + after
        )
        assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)
        assert info["ids_after_end_of_turn"] == len(after)
        assert obs["messages"][-1]["content"] == "#### 18"
    finally:
        remote.close()
        server.stop()
