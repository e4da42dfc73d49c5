"""SWE tasks: a repository, a bug, the tests that show it, and the fix.

A task holds what an episode needs: the repository as a gzipped tar (the packaged projects, a folder
of yours, or a git checkout at a commit), the patch that makes its buggy state (``bug_patch``; empty
when the repository is already buggy), the reference fix (``patch``), the tests that must go from
failing to passing (``FAIL_TO_PASS``) and those that must keep passing (``PASS_TO_PASS``), the
problem statement the agent reads, and how the tests run. Its fields follow SWE-bench's instance
format (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``,
``PASS_TO_PASS``, ``problem_statement``), so SWE-bench-style files load as they are.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

from agent_gym_swe.patches import PatchError, apply_patch

__all__ = [
    "DIFFICULTIES",
    "RepoSpec",
    "SWETask",
    "load_tasks",
    "packaged_repos",
    "packaged_tasks",
    "repo_archive",
    "split_of",
    "tar_files",
    "task_files",
]

DIFFICULTIES = ("easy", "medium", "hard")
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox", ".venv", "venv", "node_modules", ".eggs"}
_TEST_FLAGS = " -rA -p no:cacheprovider -q --color=no"


@dataclass(frozen=True)
class RepoSpec:
    """A packaged project: where it came from, its licence, and how its tests run."""

    name: str
    version: str
    license: str
    source: str
    sha256: str
    homepage: str
    test_command: str
    pythonpath: str
    source_globs: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


@dataclass
class SWETask:
    """One episode's task (SWE-bench's instance fields, plus how to build and test the repository).

    Attributes:
        instance_id: unique id (``<repo key>__<n>`` for the packaged tasks).
        repo: the packaged project's key (``inflection-0.5.1``), a folder, or SWE-bench's ``owner/name``.
        problem_statement: what the agent reads.
        patch: the reference fix (a unified diff against the buggy repository).
        bug_patch: the diff that turns the pristine repository into the buggy one ("" if it is buggy).
        test_patch: SWE-bench's test changes, applied before the tests grade a submission.
        FAIL_TO_PASS / PASS_TO_PASS: pytest node ids.
        test_command: the shell command that runs the tests, from the repository's root.
        pythonpath: ``PYTHONPATH`` for the tests and the shell, relative to the repository's root.
        source_globs: files whose changes count at grading (never tests, conftest.py or configuration).
        difficulty: ``easy`` / ``medium`` / ``hard`` (files and tests touched).
        repo_path: a local folder or git checkout holding the repository (user and SWE-bench tasks).
        base_commit: the commit of ``repo_path`` to check out (SWE-bench tasks).
        meta: anything else (the mutation that made the bug; not shown to the agent).
    """

    instance_id: str
    repo: str
    problem_statement: str
    patch: str = ""
    bug_patch: str = ""
    test_patch: str = ""
    FAIL_TO_PASS: list[str] = field(default_factory=list)
    PASS_TO_PASS: list[str] = field(default_factory=list)
    test_command: str = "python -m pytest"
    pythonpath: str = ""
    source_globs: list[str] = field(default_factory=lambda: ["*"])
    difficulty: str = "easy"
    repo_path: str | None = None
    base_commit: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.instance_id

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: str | os.PathLike[str] | None = None) -> "SWETask":
        """A task from its dict (ours, or a SWE-bench instance: ``FAIL_TO_PASS`` may be a JSON string)."""
        d = dict(data)
        if "instance_id" not in d and "id" in d:
            d["instance_id"] = d.pop("id")
        d.pop("id", None)
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            if isinstance(d.get(key), str):
                d[key] = json.loads(d[key])
        missing = [k for k in ("instance_id", "repo", "problem_statement") if not d.get(k)]
        if missing:
            raise ValueError(f"an SWE task needs {missing}; got the keys {sorted(d)}")
        known = set(cls.__dataclass_fields__)
        extra = {k: d.pop(k) for k in list(d) if k not in known}
        task = cls(**d)
        task.meta = {**extra, **task.meta}
        if task.repo_path and base_dir is not None and not os.path.isabs(task.repo_path):
            task.repo_path = os.path.normpath(os.path.join(base_dir, task.repo_path))
        if task.difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {task.difficulty!r}")
        return task

    def grading_command(self) -> str:
        """The test command with pytest's per-test summary (what grading parses)."""
        if "pytest" in self.test_command and (self.FAIL_TO_PASS or self.PASS_TO_PASS):
            return self.test_command + _TEST_FLAGS
        return self.test_command


def split_of(instance_id: str) -> str:
    """``test`` for one task in five (a hash of its id, stable in every process), else ``train``."""
    return "test" if hashlib.sha256(instance_id.encode()).digest()[0] % 5 == 0 else "train"


# -- packaged data ---------------------------------------------------------------------------------------

def _data() -> Any:
    return resources.files("agent_gym_swe") / "data"


@functools.lru_cache(maxsize=1)
def packaged_repos() -> dict[str, RepoSpec]:
    """The packaged projects by key (``data/repos.json``: name, version, licence, source)."""
    specs = json.loads((_data() / "repos.json").read_text())
    return {s.key: s for s in (RepoSpec(**{**d, "source_globs": tuple(d["source_globs"])}) for d in specs)}


def data_dir() -> Path:
    """The package's data folder on disk (what the sandbox must not show the agent)."""
    return Path(str(_data()))


@functools.lru_cache(maxsize=8)
def _packaged_archive(key: str) -> bytes:
    path = _data() / "repos" / f"{key}.tar.gz"
    if not path.is_file():
        raise KeyError(f"no packaged repository {key!r}; packaged: {sorted(packaged_repos())}")
    return path.read_bytes()


@functools.lru_cache(maxsize=1)
def packaged_tasks() -> tuple[SWETask, ...]:
    """Every packaged task (``data/tasks.jsonl.gz``), in file order."""
    path = _data() / "tasks.jsonl.gz"
    with gzip.open(io.BytesIO(path.read_bytes()), "rt", encoding="utf-8") as f:
        return tuple(SWETask.from_dict(json.loads(line)) for line in f if line.strip())


def load_tasks(path: str | os.PathLike[str], *, repo: str | os.PathLike[str] | None = None,
               test_command: str | None = None) -> list[SWETask]:
    """Tasks from a JSONL file (``.gz`` too) of our task dicts or SWE-bench instances.

    Args:
        path: the file; relative ``repo_path`` entries are read from its folder.
        repo: the local folder (or git checkout) of every task that names none (``repo_path``).
        test_command: the test command of every task that names none.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"task file {p} does not exist")
    opener = gzip.open if p.suffix == ".gz" else open
    tasks = []
    with opener(p, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if repo is not None and not data.get("repo_path"):
                    data["repo_path"] = os.fspath(repo)
                    data.setdefault("repo", os.path.basename(os.path.abspath(repo)))
                if test_command is not None and not data.get("test_command"):
                    data["test_command"] = test_command
                task = SWETask.from_dict(data, base_dir=p.parent)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{p}:{n}: {exc}") from exc
            if task.repo_path is None and task.repo not in packaged_repos():
                raise ValueError(f"{p}:{n}: task {task.instance_id} names repository {task.repo!r}, which is neither packaged "
                                 "nor local: give repo_path in the file or repo=PATH (a folder, or a git checkout)")
            tasks.append(task)
    if not tasks:
        raise ValueError(f"task file {p} holds no tasks")
    return tasks


# -- the repository of a task, as a tar -------------------------------------------------------------------

def tar_files(files: Iterable[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name, data in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _read_tar(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {os.path.normpath(m.name): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _folder_files(root: Path) -> dict[str, bytes]:
    out = {}
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            full = Path(base) / name
            if full.is_file() and not full.is_symlink() and not name.endswith((".pyc", ".pyo")):
                out[str(full.relative_to(root))] = full.read_bytes()
    return out


def _git_files(root: Path, commit: str) -> dict[str, bytes]:
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, timeout=120).stdout

    try:
        archive = git("archive", "--format=tar", commit)
    except (OSError, subprocess.CalledProcessError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        raise ValueError(f"cannot read commit {commit} of the git checkout {root}: {err.decode(errors='replace').strip() or exc}") from exc
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        return {os.path.normpath(m.name): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def task_files(task: SWETask) -> dict[str, bytes]:
    """The buggy repository of ``task`` as path -> bytes (pristine + ``bug_patch``)."""
    if task.repo_path is None:
        files = _read_tar(_packaged_archive(task.repo))
    else:
        root = Path(task.repo_path)
        if not root.is_dir():
            raise ValueError(f"task {task.instance_id}: repository folder {root} does not exist")
        files = _git_files(root, task.base_commit) if task.base_commit else _folder_files(root)
    if task.bug_patch:
        try:
            files = apply_patch(files, task.bug_patch)
        except PatchError as exc:
            raise ValueError(f"task {task.instance_id}: its bug_patch does not apply: {exc}") from exc
    return files


@functools.lru_cache(maxsize=64)
def _archive_cached(key: str, task_json: str) -> bytes:
    return tar_files(task_files(SWETask.from_dict(json.loads(task_json))).items())


def repo_archive(task: SWETask) -> bytes:
    """The buggy repository of ``task`` as a gzipped tar (cached per task)."""
    return _archive_cached(task.instance_id, json.dumps(task.to_dict(), sort_keys=True))


def test_files(task: SWETask, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` with SWE-bench's ``test_patch`` applied (what grades a submission)."""
    return apply_patch(dict(files), task.test_patch) if task.test_patch else dict(files)

