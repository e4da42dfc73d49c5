"""The helpers that run inside the sandbox worker of one episode (sent as the session's prelude).

Standard library only: this file is not imported by the env, it is read as text and run by
``agent_gym.sandbox`` in the episode's worker, whose working directory holds the episode's
``repo/`` (the agent's copy) and, while a submit is graded, ``grade/`` (a fresh copy). The pristine
repository stays in this process's memory, out of the shell's reach (another process cannot read
it: no ptrace, no /proc in the private root). Every helper prints what the env returns to the
policy, or one JSON line the env parses.
"""

import base64
import io
import json
import os
import re
import select
import signal
import subprocess
import tarfile
import time

WORK = os.getcwd()
REPO = os.path.join(WORK, "repo")
_PRISTINE = b""
_GRADE_BASE = b""
_SETUP: dict = {}


def _setup(archive_b64: str, setup: dict) -> None:
    """Unpack the episode's repository (a gzipped tar) into ``repo/``; keep it, and the tree that
    grades (the same, or with SWE-bench's test patch applied: ``setup["grade_archive"]``)."""
    global _PRISTINE, _GRADE_BASE, _SETUP
    _PRISTINE = base64.b64decode(archive_b64)
    _SETUP = dict(setup)
    _GRADE_BASE = base64.b64decode(_SETUP.pop("grade_archive")) if _SETUP.get("grade_archive") else _PRISTINE
    _unpack(REPO, _PRISTINE)
    for path, content in (setup.get("changes") or {}).items():
        _write_change(REPO, path, content)


def _unpack(dest: str, archive: bytes) -> None:
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")


def _write_change(root: str, path: str, content) -> None:
    target = os.path.join(root, path)
    if content is None:
        if os.path.lexists(target):
            os.remove(target)
        return
    os.makedirs(os.path.dirname(target) or root, exist_ok=True)
    with open(target, "wb") as f:
        f.write(base64.b64decode(content))


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")}
    env.update(HOME=WORK, TMPDIR=WORK, USER="agent", LOGNAME="agent", PYTHONDONTWRITEBYTECODE="1", TERM="dumb",
               PATH=_SETUP.get("path", env.get("PATH", "/usr/bin:/bin")))
    if _SETUP.get("pythonpath"):
        env["PYTHONPATH"] = _SETUP["pythonpath"]
    return env


def _run(command: str, cwd: str, timeout_s: float, limit: int):
    """Run ``command`` with bash in ``cwd``: (exit status or None on timeout, first ``limit`` bytes of
    stdout+stderr, bytes dropped). Whatever it started is killed when it returns: background
    processes never outlive the call."""
    proc = subprocess.Popen(["/bin/bash", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, env=_env())
    out, dropped = bytearray(), 0
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None  # stdout=PIPE
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    timed_out = False

    def take(chunk: bytes) -> None:
        nonlocal dropped
        room = limit - len(out)
        if room > 0:
            out.extend(chunk[:room])
        dropped += max(0, len(chunk) - max(room, 0))

    # Until the command itself exits (a background process may hold the pipe open after it) or the
    # time is up; then whatever the pipe holds at that moment.
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.05))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                take(chunk)
                continue
            if chunk == b"":
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                break
        if proc.poll() is not None:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    break
                if not chunk:
                    break
                take(chunk)
                if len(out) >= limit:
                    break
            break
    # Every other process of this uid (the command's and whatever it left behind in the background):
    # kill(-1) reaches exactly those, never this worker, the server or another episode. One pass is
    # not enough against a fork bomb: a child forked while the kernel walks the process list can be
    # missed, so kill again until no process of the uid is left (ESRCH; a zombie still counts, so
    # the command's own shell is reaped first and the orphans are the server's to reap), a bounded
    # number of times.
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    status = proc.wait()
    for _ in range(1000):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:  # ESRCH: none left (EPERM cannot happen: only this uid's processes are tried)
            break
        time.sleep(0.001)
    proc.stdout.close()
    return (None if timed_out else status), bytes(out), dropped


def bash(command: str, timeout_s: float, limit: int) -> None:
    status, out, dropped = _run(command, REPO, timeout_s, limit)
    text = out.decode("utf-8", "replace").rstrip("\n") or "(no output)"
    if dropped:
        text += f"\n... [output truncated: {dropped} more bytes]"
    if status is None:
        text += f"\n[the command was stopped after {timeout_s:g} s]"
    elif status != 0:
        text += f"\n[exit code {status}]"
    # A command that fails is an answer like any other (a failing test run is what the agent needs to
    # see); only one that had to be stopped is a tool error.
    print(json.dumps({"ok": status is not None, "text": text}))


def _inside(path: str):
    full = os.path.realpath(os.path.join(REPO, path))
    if full != REPO and not full.startswith(REPO + os.sep):
        return None
    return full


def view(path: str, start, end, limit: int) -> None:
    full = _inside(path)
    if full is None:
        return _fail(f"{path} is outside the repository")
    if os.path.isdir(full):
        names = []
        for root, dirs, files in os.walk(full):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            depth = os.path.relpath(root, full).count(os.sep) + (root != full)
            if depth >= 2:
                dirs[:] = []
            for name in sorted(files) + [d + "/" for d in dirs]:
                names.append(os.path.relpath(os.path.join(root, name), REPO) + ("/" if name.endswith("/") else ""))
        return _ok("\n".join(sorted(set(n.replace("//", "/") for n in names)))[:limit] or "(empty directory)")
    if not os.path.isfile(full):
        return _fail(f"{path} does not exist")
    with open(full, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines()
    first = 1 if start is None else max(1, int(start))
    last = len(lines) if end is None or int(end) < 0 else min(len(lines), int(end))
    if first > max(1, len(lines)) or last < first - 1:
        return _fail(f"lines {first}-{last} are outside {path}, which has {len(lines)} lines")
    body = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(first, last + 1))
    if len(body) > limit:
        body = body[:limit] + f"\n... [truncated: view a smaller line range of the {len(lines)} lines]"
    _ok(body or "(empty file)")


def edit(path: str, old: str, new: str) -> None:
    full = _inside(path)
    if full is None:
        return _fail(f"{path} is outside the repository")
    if not os.path.isfile(full):
        return _fail(f"{path} does not exist")
    with open(full, "rb") as f:
        text = f.read().decode("utf-8")
    count = text.count(old) if old else 0
    if count != 1:
        why = "old_str is empty" if not old else ("old_str was not found" if count == 0 else f"old_str occurs {count} times; add context to make it unique")
        return _fail(f"no edit made to {path}: {why}")
    at = text.index(old)
    text = text[:at] + new + text[at + len(old):]
    with open(full, "wb") as f:
        f.write(text.encode("utf-8"))
    line = text[:at].count("\n") + 1
    lines = text.splitlines()
    lo, hi = max(1, line - 3), min(len(lines), line + new.count("\n") + 3)
    snippet = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(lo, hi + 1))
    _ok(f"edited {path}; lines {lo}-{hi} now read:\n{snippet}")


def _ok(text: str) -> None:
    print(json.dumps({"ok": True, "text": text}))


def _fail(text: str) -> None:
    print(json.dumps({"ok": False, "text": text}))


def _files(root: str) -> dict:
    out = {}
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".pytest_cache")]
        for name in files:
            full = os.path.join(base, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            out[os.path.relpath(full, root)] = full
    return out


def _changed(root: str, limit: int) -> dict:
    """Files of ``root`` that differ from the pristine repository: path -> base64 content, None if deleted."""
    pristine: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(_PRISTINE), mode="r:gz") as tar:
        for m in tar.getmembers():
            member = tar.extractfile(m) if m.isfile() else None
            if member is not None:
                pristine[os.path.normpath(m.name)] = member.read()
    now = _files(root)
    changes: dict[str, str | None] = {}
    size = 0
    for path, full in sorted(now.items()):
        with open(full, "rb") as f:
            data = f.read()
        if pristine.get(path) != data:
            size += len(data)
            if size > limit:
                raise ValueError(f"the workspace holds more than {limit} bytes of changed files")
            changes[path] = base64.b64encode(data).decode("ascii")
    for path in pristine:
        if path not in now:
            changes[path] = None
    return changes


def changes(limit: int) -> None:
    print(json.dumps({"changes": _changed(REPO, limit)}))


_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+?)(?: - .*)?$")


def parse_outcomes(text: str) -> dict:
    """pytest's ``-rA`` summary lines -> {test id: outcome}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _OUTCOME.match(line.strip())
        if m and "::" in m.group(2):
            status, test = m.group(1), m.group(2)
            out[test] = "failed" if status == "ERROR" and out.get(test) == "passed" else status.lower()
    return out


def grade(test_command: str, source_globs: list, timeout_s: float, limit: int) -> None:
    """Rebuild a fresh copy of the repository in ``grade/``, bring over the agent's changes to source
    files only (never to tests, conftest.py or configuration: the tests that grade are the pristine
    ones), run the test command there and print the outcome of every test."""
    import fnmatch
    import shutil

    changes = _changed(REPO, 64 << 20)
    kept: dict[str, str | None] = {}
    ignored: list[str] = []
    for path, content in changes.items():
        name = os.path.basename(path)
        source = any(fnmatch.fnmatch(path, g) for g in source_globs) and not (name.startswith("test_") or name == "conftest.py")
        (kept.__setitem__(path, content) if source else ignored.append(path))
    dest = os.path.join(WORK, "grade")
    shutil.rmtree(dest, ignore_errors=True)
    _unpack(dest, _GRADE_BASE)
    for path, content in kept.items():
        _write_change(dest, path, content)
    status, out, dropped = _run(test_command, dest, timeout_s, limit)
    shutil.rmtree(dest, ignore_errors=True)
    text = out.decode("utf-8", "replace")
    print(json.dumps({"status": status, "outcomes": parse_outcomes(text), "changed": sorted(kept), "ignored": sorted(ignored),
                      "tail": text[-2000:], "dropped": dropped, "errors": failure_lines(text)}))


_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")


def failure_lines(text: str, sections: int = 3, lines: int = 20) -> list:
    """The ``E`` lines (what went wrong, without the test's name) of the first failure sections of a
    pytest report: what a problem statement is written from."""
    out: list[list[str]] = []
    current: list[str] | None = None
    inside = False
    for line in text.splitlines():
        if line.startswith("=") and "FAILURES" in line or line.startswith("=") and "ERRORS" in line:
            inside = True
            continue
        if line.startswith("=") and "short test summary" in line:
            break
        if not inside:
            continue
        if _SECTION.match(line):
            if current:
                out.append(current)
            current = []
            if len(out) >= sections:
                break
        elif current is not None and line.startswith("E ") and len(current) < lines:
            current.append(line[1:].strip() if not line[1:].startswith("   ") else line[4:])
    if current and len(out) < sections:
        out.append(current)
    return out
