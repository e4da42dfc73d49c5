"""The attacks an agent could try from its shell, each contained, and the next episode unharmed:
leaving the workspace, the network, a fork bomb, filling the disk, killing the parent, reading another
episode's workspace; 64 concurrent episodes leave no process or directory behind. Counts, never clocks:
the processes of the sandbox's uids are read from /proc, the work directories from the server."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import gymnasium as gym
import pytest

from agent_gym_swe.tasks import data_dir

ENV_ID = "AgentR1/SWE-v0"


def sandbox_processes(sandbox) -> int:
    """Processes on this host whose uid is one of the sandbox's worker uids."""
    low, high = sandbox.isolation["uid_range"]
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        count += low <= uid <= high
    return count


def settled(sandbox, sessions: int = 0, idle: int | None = None) -> dict:
    """The server's counts once the workers of closed sessions are reaped and, given ``idle``, the
    pre-forked pool is refilled to that size (it refills after the calls go quiet); bounded polling."""
    stats = sandbox.stats()
    for _ in range(400):
        if (stats["sessions"] == sessions and stats["workers"] == stats["idle"] + sessions and stats["workdirs"] == stats["workers"]
                and (idle is None or stats["idle"] == idle) and sandbox_processes(sandbox) == stats["workers"]):
            break
        threading.Event().wait(0.05)
        stats = sandbox.stats()
    return stats


def last(obs) -> str:
    return obs["messages"][-1]["content"]


@pytest.fixture()
def make(tokenizer, calc_repo):
    root, tasks = calc_repo
    made = []

    def _make(**kwargs):
        env = gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks), repo=str(root), test_command="python -m pytest", **kwargs)
        made.append(env)
        env.reset(options={"task_id": "calc-1"})
        return env

    yield _make
    for env in made:
        env.close()


def test_the_workspace_cannot_be_left(make, call, tmp_path):
    secret = tmp_path / "host_secret.txt"
    secret.write_text("host secret")
    env = make()
    obs, *_ = env.step(call(env, "bash", command=(
        f"cat {secret}; ls {data_dir()}; ls /root /home; echo x > /usr/evil; echo y > /sandbox/evil; "
        "echo z > ../../evil; cat /etc/shadow; ls -a / | tr '\\n' ' '")))
    out = last(obs)
    assert "host secret" not in out and "No such file or directory" in out
    assert out.count("Permission denied") + out.count("Read-only file system") >= 3
    assert "tasks.jsonl.gz" not in out  # the task data (fixes, test lists) is hidden
    assert not os.path.exists("/usr/evil") and not os.path.exists("/sandbox")
    obs, *_ = env.step(call(env, "bash", command="echo still works"))
    assert last(obs) == "still works"


def test_no_network(make, call):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    env = make()
    obs, *_ = env.step(call(env, "bash", command=(
        f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\" 2>&1 | tail -1; "
        f"(echo hi > /dev/tcp/127.0.0.1/{port}) 2>&1; python -c \"import socket; socket.getaddrinfo('example.com', 80)\" 2>&1 | tail -1")))
    assert last(obs).splitlines() == [
        "PermissionError: [Errno 13] Permission denied",  # the seccomp filter: no AF_INET sockets
        "/bin/bash: socket: Permission denied",
        f"/bin/bash: line 1: /dev/tcp/127.0.0.1/{port}: Permission denied",
        "socket.gaierror: [Errno -3] Temporary failure in name resolution",  # an empty network namespace
    ]
    with pytest.raises(socket.timeout):
        listener.accept()  # nothing ever connected
    listener.close()


def test_fork_bomb_is_stopped_and_leaves_nothing(make, call):
    env = make(command_timeout_s=3)
    sandbox = env.unwrapped.sandbox
    obs, reward, terminated, truncated, info = env.step(call(env, "bash", command=":(){ :|:& };:"))
    assert not (terminated or truncated)
    workers = settled(sandbox, sessions=1)["workers"]
    assert sandbox_processes(sandbox) == workers  # the workers themselves, none of the bomb's processes
    obs, *_ = env.step(call(env, "bash", command="echo alive"))
    assert last(obs) == "alive"


def test_disk_fill_is_bounded_and_the_next_episode_works(make, call):
    env = make(sandbox={"disk_mb": 128, "max_file_mb": 32})
    obs, *_ = env.step(call(env, "bash", command="head -c 100M /dev/zero > big; ls -s big"))
    assert "File size limit exceeded" in last(obs) and last(obs).endswith("\n32768 big")  # max_file_mb
    obs, *_ = env.step(call(env, "bash", command="for i in 1 2 3 4 5 6; do head -c 30M /dev/zero > f$i || break; done 2>&1 | tail -1"))
    assert "No space left on device" in last(obs)  # disk_mb: the tmpfs of every workspace is full
    sandbox = env.unwrapped.sandbox
    env.reset(options={"task_id": "calc-1"})
    settled(sandbox, sessions=0)
    obs, *_ = env.step(call(env, "bash", command="head -c 10M /dev/zero > ok && ls -s ok && ls"))
    assert last(obs).startswith("10240 ok") and "f1" not in last(obs)


def test_the_parent_and_the_server_cannot_be_killed(make, call):
    """The env's process, the sandbox server and init are out of reach; the one process an episode can
    kill is its own worker (its commands' parent, of its own uid), which loses only its own workspace:
    the episode is told, and the next episode works."""
    env = make()
    sandbox = env.unwrapped.sandbox
    server = sandbox.server_pid
    obs, *_ = env.step(call(env, "bash", command=f"kill -9 1; kill -9 {server}; kill -9 {os.getpid()}; echo done"))
    assert last(obs).count("Operation not permitted") == 3 and last(obs).endswith("done")
    obs, _, _, _, info = env.step(call(env, "bash", command="kill -9 -1"))  # every process of its uid: the worker too
    assert "the workspace failed" in last(obs) and info["tool_error_kinds"] == {"exception": 1}
    obs, _, _, _, info = env.step(call(env, "bash", command="echo again"))
    assert "the workspace was lost" in last(obs)
    assert sandbox.server_pid == server
    env.reset(options={"task_id": "calc-1"})
    obs, *_ = env.step(call(env, "bash", command="echo alive"))
    assert last(obs) == "alive"


def test_another_episodes_workspace_cannot_be_read(make, call):
    a, b = make(), make()
    obs, *_ = a.step(call(a, "bash", command="echo the-secret > secret.txt && pwd"))
    where = last(obs)
    obs, *_ = b.step(call(b, "bash", command=f"cat {where}/secret.txt; ls {os.path.dirname(where)}; ls /sandbox; echo end"))
    out = last(obs)
    assert "the-secret" not in out and out.count("Permission denied") >= 2


def test_64_concurrent_episodes_leave_no_process_or_directory(tokenizer, calc_repo, call):
    root, tasks = calc_repo
    envs = [gym.make(ENV_ID, tokenizer=tokenizer, tasks=str(tasks), repo=str(root), test_command="python -m pytest") for _ in range(64)]
    sandbox = envs[0].unwrapped.sandbox
    before = settled(sandbox)

    async def episode(env):
        env.reset(options={"task_id": "calc-1"})
        obs, *_ = await env.unwrapped.astep(call(env, "bash", command="sleep 30 & (sleep 30 &) ; echo started"))
        obs2, *_ = await env.unwrapped.astep(call(env, "edit", path="calc.py", old_str="def sub(a, b):\n    return a + b",
                                                  new_str="def sub(a, b):\n    return a - b"))
        return last(obs), last(obs2).split(";")[0]

    async def main():
        return await asyncio.gather(*(episode(e) for e in envs))

    out = asyncio.run(main())
    assert out == [("started", "edited calc.py")] * 64
    assert sandbox.stats()["sessions"] == 64
    for env in envs:
        env.close()
    after = settled(sandbox, idle=before["idle"])
    assert after["sessions"] == 0 and after["workdirs"] == after["workers"] == after["idle"] == before["idle"]
    assert sandbox_processes(sandbox) == after["workers"]  # the idle pre-forked workers, nothing else
