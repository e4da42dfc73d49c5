"""One version for every distribution (.ci/version.py): every tracked pyproject file agrees with
``agent_gym.__version__``, their pins on each other are ``>=`` it, and the tool finds and fixes a
disagreement in a copy of the repository."""

from __future__ import annotations

import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import agent_gym

REPO_ROOT = Path(__file__).resolve().parents[1]


# .ci/version.py is a script, not a module of a package: its functions, as a namespace.
version_tool = SimpleNamespace(**runpy.run_path(str(REPO_ROOT / ".ci" / "version.py")))
N_DISTRIBUTIONS = len(version_tool.pyprojects(REPO_ROOT))


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The tracked pyproject files and version modules in a git repository of their own."""
    copy = tmp_path / "repo"
    for pyproject in version_tool.pyprojects(REPO_ROOT):
        for path in {pyproject, version_tool.version_file(pyproject, REPO_ROOT), version_tool.SOURCE}:
            (copy / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / path, copy / path)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    subprocess.run(["git", "-C", str(copy), "add", "."], check=True)
    return copy


def test_every_distribution_has_the_cores_version():
    assert version_tool.current(REPO_ROOT) == agent_gym.__version__
    assert len(version_tool.pyprojects(REPO_ROOT)) == N_DISTRIBUTIONS >= 14  # the core, 3 adapters, the model, the envs
    assert version_tool.problems(REPO_ROOT) == []
    versions = [p for p in version_tool.places(REPO_ROOT) if p.kind == "version"]
    assert len(versions) == N_DISTRIBUTIONS and {p.version for p in versions} == {agent_gym.__version__}
    pins = {(str(p.path), p.text) for p in version_tool.places(REPO_ROOT) if p.kind == "pin"}
    assert ("envs/countdown/pyproject.toml", f"agent-r1-gym>={agent_gym.__version__}") in pins
    assert ("envs/customer_service/pyproject.toml", f"agent-r1-gym[hf]>={agent_gym.__version__}") in pins
    assert ("pyproject.toml", f"agent-r1-gym-verl>={agent_gym.__version__}") in pins


def test_the_adapters_and_the_core_say_it_once():
    """Where a package has a ``__version__``, its pyproject reads it instead of repeating it."""
    files = {str(version_tool.version_file(p, REPO_ROOT)) for p in version_tool.pyprojects(REPO_ROOT)}
    assert {"agent_gym/__init__.py", "trainers/trl/agent_gym_trl/__init__.py", "trainers/openenv/agent_gym_openenv/__init__.py",
            "trainers/verl/agent_gym_verl/__init__.py"} <= files
    for pyproject in version_tool.pyprojects(REPO_ROOT):
        text = (REPO_ROOT / pyproject).read_text()
        has_literal = re.search(r'^version\s*=\s*"', text, re.M) is not None
        assert has_literal != ('dynamic = ["version"]' in text), pyproject


def test_a_disagreement_is_named_and_set_fixes_it(repo_copy: Path):
    countdown = repo_copy / "envs/countdown/pyproject.toml"
    countdown.write_text(countdown.read_text().replace(f'version = "{agent_gym.__version__}"', 'version = "0.1.9"'))
    python = repo_copy / "envs/python/pyproject.toml"
    python.write_text(python.read_text().replace(f'"agent-r1-gym>={agent_gym.__version__}"', '"agent-r1-gym>=0.1"'))
    trl = repo_copy / "trainers/trl/agent_gym_trl/__init__.py"
    trl.write_text(trl.read_text().replace(f'__version__ = "{agent_gym.__version__}"', '__version__ = "0.2.1"'))
    assert version_tool.problems(repo_copy) == [
        f"envs/countdown/pyproject.toml: 'version = \"0.1.9\"', want '{agent_gym.__version__}'",
        f"envs/python/pyproject.toml: 'agent-r1-gym>=0.1', want '>={agent_gym.__version__}'",
        f"trainers/trl/agent_gym_trl/__init__.py: '__version__ = \"0.2.1\"', want '{agent_gym.__version__}'",
    ]

    changed = version_tool.set_version("0.3.0", repo_copy)
    assert len(changed) == N_DISTRIBUTIONS + 4  # every pyproject file (versions, pins) and the 4 __version__ lines
    assert version_tool.problems(repo_copy) == []
    assert version_tool.current(repo_copy) == "0.3.0"
    assert '"agent-r1-gym[hf]>=0.3.0"' in (repo_copy / "envs/customer_service/pyproject.toml").read_text()
    assert 'version = "0.3.0"' in countdown.read_text() and '"agent-r1-gym>=0.3.0"' in python.read_text()
    # nothing else of a pyproject moves: the other requirements keep their own bounds
    assert '"mcp>=2.3"' in (repo_copy / "envs/mcp/pyproject.toml").read_text()


def test_the_command_line(repo_copy: Path):
    """The script, run from a copy: it checks the copy it lives in, sets a version, refuses a bad one."""
    (repo_copy / ".ci").mkdir()
    tool = repo_copy / ".ci" / "version.py"
    shutil.copy2(REPO_ROOT / ".ci" / "version.py", tool)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tool), *args], capture_output=True, text=True, cwd=repo_copy)

    pins = sum(p.kind == "pin" for p in version_tool.places(REPO_ROOT))
    ok = run()
    assert (ok.returncode, ok.stdout) == (0, f"{agent_gym.__version__}: {N_DISTRIBUTIONS} distributions, {pins} pins on each other\n")
    bad = run("version-one")
    assert bad.returncode != 0 and "'version-one' is not a PEP 440 release version" in bad.stderr
    games = repo_copy / "envs/games/pyproject.toml"
    games.write_text(games.read_text().replace(f'version = "{agent_gym.__version__}"', 'version = "9"'))
    stale = run()
    assert stale.returncode == 1
    assert stale.stderr.splitlines() == [
        f"envs/games/pyproject.toml: 'version = \"9\"', want '{agent_gym.__version__}'",
        f"1 places disagree with agent_gym/__init__.py's {agent_gym.__version__}; `python .ci/version.py {agent_gym.__version__}` sets them",
    ]
    fixed = run("1.0.0rc1")
    assert fixed.returncode == 0, fixed.stderr
    assert "set 1.0.0rc1 in envs/games/pyproject.toml" in fixed.stdout.splitlines()
    assert fixed.stdout.splitlines()[-1] == f"1.0.0rc1: {N_DISTRIBUTIONS} distributions, {pins} pins on each other"
