"""The Python sandbox: every limit stops what it should with the right kind, the host is unharmed and
the next call works; stateful sessions; concurrency; the portable (unprivileged) layers; cleanup."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from agent_gym.sandbox import RESULT_KINDS, Sandbox, SandboxConfig, SandboxResult

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout_s=2, cpu_s=1, memory_mb=256, output_bytes=1000, prefork=2)
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def portable():
    """The layers that need no privileges: seccomp, audit hook, rlimits, own process and directory."""
    sb = Sandbox(timeout_s=2, cpu_s=1, memory_mb=256, output_bytes=1000, prefork=1, privileged=False)
    yield sb
    sb.close()


def healthy(sb: Sandbox) -> None:
    """The host is unharmed: the next call works and no worker is left over."""
    result = sb.run("print(6 * 7)")
    assert (result.kind, result.output) == ("ok", "42\n"), result
    if sb.isolation.get("uid_range"):
        lo, hi = sb.isolation["uid_range"]
        deadline = time.monotonic() + 5
        while True:  # every process of the sandbox's uid block is a worker the server knows about
            workers = sb.stats()["workers"]
            uids = [_uid(p) for p in os.listdir("/proc") if p.isdigit()]
            in_block = sum(1 for u in uids if u is not None and lo <= u <= hi)
            if in_block <= workers or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert in_block <= workers, f"{in_block} processes in the sandbox uid block, {workers} workers"


def _uid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def test_ok_output_and_last_expression(sandbox):
    result = sandbox.run("x = 6\nprint('x is', x)\nx * 7")
    assert result.kind == "ok" and result.ok and result.error is None
    assert result.output == "x is 6\n42\n"
    assert result.text() == "x is 6\n42"
    assert result.exec_s >= 0 and result.latency_s >= result.exec_s and result.overhead_s >= 0
    assert set(result.stages) == {"to_server", "queued", "to_worker", "from_worker", "to_client"}
    assert all(v >= 0 for v in result.stages.values())
    assert sum(result.stages.values()) + result.exec_s == pytest.approx(result.latency_s, abs=1e-6)
    assert set(RESULT_KINDS) == {"ok", "timeout", "memory", "output_truncated", "forbidden", "error"}


def test_error_reports_the_tracebacks_last_line(sandbox):
    result = sandbox.run("def f(n):\n    return 10 / n\nf(0)")
    assert result.kind == "error" and result.error == "ZeroDivisionError: division by zero"
    assert 'File "<python>", line 2, in f' in result.traceback and "_server.py" not in result.traceback
    result = sandbox.run("def f(:")
    assert result.kind == "error" and result.error == "SyntaxError: invalid syntax"
    healthy(sandbox)


def test_infinite_loop_is_stopped(sandbox):
    result = sandbox.run("while True:\n    pass")
    assert result.kind == "timeout" and result.detail in ("cpu", "wall"), result
    # Stopped by the fixture's limits (1 s of CPU, 2 s of wall time), whichever a loaded host hits first.
    assert result.error == {
        "cpu": "TimeoutError: the code used more than 1 s of CPU time",
        "wall": "TimeoutError: the code ran longer than 2 s",
    }[result.detail]
    result = sandbox.run("import time\ntime.sleep(60)", timeout_s=0.5)
    assert (result.kind, result.detail) == ("timeout", "wall")
    assert "0.5 s" in result.error
    assert result.stages is None  # the worker was killed and reported nothing
    healthy(sandbox)


def test_cpu_limit_is_rlimit_cpu():
    with Sandbox(timeout_s=60, cpu_s=1, prefork=0) as sb:
        result = sb.run("while True:\n    pass")
        assert (result.kind, result.detail) == ("timeout", "cpu"), result
        assert 0.9 <= result.cpu_s < 5
        healthy(sb)


def test_fork_bomb_is_stopped(sandbox):
    bomb = "import os\nwhile True:\n    os.fork()"
    result = sandbox.run(bomb)
    assert (result.kind, result.detail) == ("forbidden", "fork"), result
    result = sandbox.run("import subprocess\nsubprocess.run(['ls'])")
    assert (result.kind, result.detail) == ("forbidden", "fork")
    healthy(sandbox)


def test_memory_hog_is_stopped(sandbox):
    result = sandbox.run("x = bytearray(10 ** 10)")
    assert result.kind == "memory" and "256 MB" in result.error
    result = sandbox.run("chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))")
    assert result.kind == "memory", result
    healthy(sandbox)


def test_huge_print_is_truncated(sandbox):
    result = sandbox.run("print('x' * 100_000)\nprint('done')")
    assert result.kind == "output_truncated" and result.truncated
    assert len(result.output.encode()) <= 1000
    assert result.text().endswith("... [output truncated at 1000 bytes]")
    # writes that bypass sys.stdout are capped by the server
    result = sandbox.run("import os\nfor _ in range(200):\n    os.write(1, b'y' * 10_000)")
    assert result.kind == "output_truncated" and len(result.output.encode()) <= 1000
    healthy(sandbox)


def test_file_writes_outside_the_working_dir_are_refused(sandbox, tmp_path):
    target = tmp_path / "pwned.txt"
    result = sandbox.run(f"open({str(target)!r}, 'w').write('x')")
    assert (result.kind, result.detail) == ("forbidden", "file"), result
    assert not target.exists()
    for code in ("open('/tmp/pwned', 'w')", "import os\nos.remove('/etc/hostname')", "import shutil\nshutil.rmtree('/usr')"):
        result = sandbox.run(code)
        assert (result.kind, result.detail) == ("forbidden", "file"), (code, result)
    result = sandbox.run("open('notes.txt', 'w').write('hello')\nimport os\nprint(os.listdir('.'), open('notes.txt').read())")
    assert (result.kind, result.output) == ("ok", "['notes.txt'] hello\n")
    healthy(sandbox)


def test_network_is_refused(sandbox):
    for code in (
        "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)",
        "import socket\nsocket.gethostbyname('example.com')",
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/var/run/docker.sock')",
    ):
        result = sandbox.run(code)
        assert (result.kind, result.detail) == ("forbidden", "network"), (code, result)
    healthy(sandbox)


def test_native_code_via_ctypes_is_refused(sandbox):
    result = sandbox.run("import ctypes\nctypes.CDLL(None).fork()")
    assert (result.kind, result.detail) == ("forbidden", "native")
    healthy(sandbox)


def test_caught_violations_are_reported_but_the_call_is_ok(sandbox):
    result = sandbox.run("try:\n    open('/tmp/x', 'w')\nexcept PermissionError as e:\n    print('caught')")
    assert result.kind == "ok" and result.output == "caught\n" and result.violations == ("file",)


def test_each_call_gets_a_fresh_process_and_a_deleted_working_dir(sandbox):
    a = sandbox.run("import os\nprint(os.getpid(), os.getcwd())\nleak = 1").output.split()
    b = sandbox.run("import os\nprint(os.getpid(), os.getcwd())\nprint('leak' in globals())").output.split()
    assert a[0] != b[0] and a[1] != b[1] and b[2] == "False"
    iso = sandbox.isolation
    # inside the private root (when root) the directory is seen through the server's /proc entry
    where = f"/proc/{sandbox.server_pid}/root{a[1]}" if iso["chroot"] else a[1]
    deadline = time.monotonic() + 5
    while os.path.exists(where) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(where)


def test_files_and_prelude_reach_the_working_dir(sandbox):
    result = sandbox.run("print(open('data.csv').read().strip(), greeting)", files={"data.csv": "a,b\n1,2\n"}, prelude="greeting = 'hi'\nprint('hidden')")
    assert (result.kind, result.output) == ("ok", "a,b\n1,2 hi\n")
    with pytest.raises(ValueError, match="plain names"):
        sandbox.submit("pass", files={"../x": "no"})


def test_host_environment_is_not_visible(sandbox, monkeypatch):
    result = sandbox.run("import os\nprint(sorted(k for k in os.environ if 'SECRET' in k or 'TOKEN' in k))")
    assert result.output == "[]\n"


def test_stateful_session_keeps_variables_stateless_does_not(sandbox):
    with sandbox.session() as session:
        assert session.run("x = 41").kind == "ok"
        assert session.run("x + 1").output == "42\n"
        assert session.run("def f():\n    return x * 2").ok
        assert session.run("f()").output == "82\n"
        # a timeout in a session interrupts the code and keeps the state
        result = session.run("while True:\n    pass", timeout_s=0.5)
        assert result.kind == "timeout"
        assert session.run("x").output == "41\n"
    assert sandbox.run("x = 41").ok
    result = sandbox.run("print(x)")
    assert result.kind == "error" and result.error == "NameError: name 'x' is not defined"
    with pytest.raises(ValueError, match="closed"):
        session.run("x")


def test_a_session_whose_worker_dies_restarts_and_says_so(sandbox):
    session = sandbox.session(files={"f.txt": "kept"})
    session.run("x = 1")
    # ignores the interrupt: killed after the grace period; the state is gone
    result = session.run("import signal\nsignal.signal(signal.SIGUSR1, signal.SIG_IGN)\nwhile True:\n    pass", timeout_s=0.3)
    assert (result.kind, result.detail) == ("timeout", "wall")
    result = session.run("print(open('f.txt').read())\nx")
    assert result.state_reset and result.kind == "error" and "NameError" in result.error
    assert result.output == "kept\n" and result.text().startswith("[note: the Python session was restarted")
    session.close()
    healthy(sandbox)


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that hold one instant in common."""
    return max(sum(start <= t < end for start, end in intervals) for t, _ in intervals)


def test_async_calls_run_concurrently(sandbox):
    # Each call reports when its worker started and stopped sleeping (the host's clock, shared by every
    # worker): calls run one after another never overlap, whatever the load.
    code = "import time\nt0 = time.time()\ntime.sleep(1.0)\nprint(t0, time.time())\nprint('done')"

    async def main():
        return await asyncio.gather(*(sandbox.arun(code) for _ in range(10)))

    results = asyncio.run(main())
    assert all(r.kind == "ok" and r.output.endswith("\ndone\n") for r in results), results
    intervals = [tuple(map(float, r.output.split("\n")[0].split())) for r in results]
    assert max_overlap(intervals) > 1, f"no two of 10 calls ran at once: {intervals}"


def test_arun_does_not_block_the_event_loop(sandbox):
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.ensure_future(ticker())
        result = await sandbox.arun("import time\ntime.sleep(0.5)")
        task.cancel()
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result.ok and ticks >= 10


def test_isolation_report_says_what_is_in_force(sandbox):
    iso = sandbox.isolation
    assert {"setuid", "chroot", "netns", "seccomp", "audit_hook", "errors"} <= set(iso)
    assert iso["audit_hook"] is True
    if ROOT and os.uname().machine in ("x86_64", "aarch64"):
        assert iso["seccomp"] and iso["setuid"] and iso["chroot"] and iso["netns"], iso
        # only the Python installation and system libraries are visible (read-only): not the data beside the
        # checkout, not the repository's own files. (Its folder may show as the path to a virtualenv inside it.)
        repo = Path(__file__).resolve().parents[2]
        hidden = (str(repo.parent / "shared"), str(repo / "pyproject.toml"), "/etc/passwd", "/root/.ssh")
        code = f"import os\nprint(os.getuid() != 0, [os.path.exists(p) for p in {hidden!r}])"
        assert sandbox.run(code).output == "True [False, False, False, False]\n"


@pytest.mark.skipif(not ROOT, reason="the kernel layers behind the audit hook are checked as root")
def test_kernel_layers_hold_without_the_audit_hook(tmp_path):
    """With the audit hook off, seccomp, the read-only private root, the uid and the network
    namespace still stop every escape (errors are plain OSErrors then, not typed violations)."""
    with Sandbox(timeout_s=3, cpu_s=2, audit_hook=False, prefork=0) as sb:
        target = tmp_path / "x"
        for code in (
            "import os\nos.fork()",
            "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'true'])",
            "import socket\nsocket.socket(socket.AF_INET)",
            "open('/usr/pwned', 'w')",
            f"open({str(target)!r}, 'w')",
            "import os, signal\nos.kill(1, signal.SIGKILL)",
            "print(open('/etc/shadow').read())",
        ):
            result = sb.run(code)
            assert result.kind == "error" and ("Errno" in result.error or "Error" in result.error), (code, result)
        assert not target.exists()
        healthy(sb)


@pytest.mark.skipif(not ROOT, reason="per-call uids and RLIMIT_NPROC need root")
def test_fork_bomb_without_seccomp_is_bounded_by_rlimit_nproc_and_cleaned_up():
    with Sandbox(timeout_s=3, cpu_s=2, audit_hook=False, seccomp=False, max_threads=6, prefork=0) as sb:
        result = sb.run("import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(60)")
        assert result.kind == "error" and "Resource temporarily unavailable" in result.error, result
        healthy(sb)  # the sleeping children were killed with their uid


def test_portable_layers_without_privileges(portable, tmp_path):
    iso = portable.isolation
    assert not iso["setuid"] and not iso["chroot"] and not iso["netns"]
    assert (portable.run("import os\nos.fork()").detail) == "fork"
    assert (portable.run(f"open({str(tmp_path / 'x')!r}, 'w')").detail) == "file"
    assert (portable.run("print(open('/etc/passwd').read())").detail) == "file"  # reads outside are refused too
    assert (portable.run("import socket\nsocket.create_connection(('1.1.1.1', 80))").detail) == "network"
    assert portable.run("import json, fractions\nprint(fractions.Fraction(1, 3) * 3)").output == "1\n"
    cwd = portable.run("import os\nprint(os.getcwd())").output.strip()
    deadline = time.monotonic() + 5
    while os.path.exists(cwd) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(cwd)
    healthy(portable)


def test_server_restarts_after_dying():
    with Sandbox(prefork=0) as sb:
        pid = sb.server_pid
        os.kill(pid, 9)
        deadline = time.monotonic() + 5
        while sb._conn is not None and sb._conn.alive and time.monotonic() < deadline:
            time.sleep(0.02)
        result = sb.run("print('back')")
        assert result.output == "back\n" and sb.server_pid != pid


def test_config_validation_and_result_text():
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        SandboxConfig(timeout_s=0)
    with pytest.raises(ValueError, match="unknown sandbox option"):
        SandboxConfig.coerce({"timeout": 3})
    assert SandboxConfig.coerce({"preload": ["pandas"]}).preload == ("pandas",)
    r = SandboxResult(kind="forbidden", detail="network", error="PermissionError: no")
    assert r.error_kind == "sandbox_forbidden_network" and r.text() == "PermissionError: no"
    assert SandboxResult(kind="ok").text() == "(no output)" and SandboxResult(kind="ok").error_kind is None


def _wait_for(sb: Sandbox, condition, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = sb.stats()
        if condition(stats) or time.monotonic() > deadline:
            return stats
        time.sleep(0.01)


@pytest.mark.parametrize("refill", ["quiet", "eager"])
def test_prefork_refill_waits_for_running_calls_only_when_quiet(refill):
    """Two pre-forked workers are taken by two calls that sleep: "quiet" forks no replacement while
    they run (the burst keeps the CPU) and refills the pool once they are done; "eager" refills at once."""
    with Sandbox(prefork=2, prefork_refill=refill, timeout_s=10) as sb:
        start = _wait_for(sb, lambda s: s["idle"] == 2)
        assert start["idle"] == 2 and start["spawned"] == 2, start
        calls = [sb.submit("import time; time.sleep(2.0)") for _ in range(2)]
        _wait_for(sb, lambda s: s["busy"] == 2)
        time.sleep(1.0)  # half-way through the calls: room for the eager server to refill (a fork takes ms)
        during = sb.stats()
        assert during["busy"] == 2, during
        if refill == "quiet":
            assert (during["idle"], during["spawned"]) == (0, 2), during
        else:
            assert (during["idle"], during["spawned"]) == (2, 4), during
        assert [c.result(timeout=10).kind for c in calls] == ["ok", "ok"]
        after = _wait_for(sb, lambda s: s["idle"] == 2 and s["busy"] == 0)
        assert (after["idle"], after["spawned"]) == (2, 4), after


def test_prefork_refill_is_validated():
    with pytest.raises(ValueError, match=r"prefork_refill must be one of \('quiet', 'eager'\), got 'lazy'"):
        SandboxConfig(prefork_refill="lazy")
