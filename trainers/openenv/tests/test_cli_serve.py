"""``agent-gym serve``'s mistakes end with one ``agent-gym: error:`` line and exit status 2, before or
instead of serving: a bad env argument (found when the server builds its probe env), a port in use."""

from __future__ import annotations

import subprocess

from openenv_helpers import AGENT_GYM, ENV_ID, REPO_ROOT


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*AGENT_GYM, "serve", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
    )


def test_bad_env_kwarg_fails_at_start():
    done = serve(ENV_ID, "--split", "test", "--port", "0", "--env-kwarg", "colour=red")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"agent-gym: error: {ENV_ID} takes no argument 'colour'. It takes: tokenizer, few_shot, split, data_dir, "
                     "prompt_dir, max_turns, max_context_tokens, max_action_tokens, tools, tool_format, chat_template, render_mode"]
    assert done.stdout == ""  # it never listened


def test_port_in_use_fails_clearly(server):
    _, url = server
    port = url.rsplit(":", 1)[1]
    done = serve(ENV_ID, "--split", "test", "--port", port)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"agent-gym: error: cannot listen on 127.0.0.1:{port}: Address already in use"
