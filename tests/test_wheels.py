"""What the built distributions hold: every wheel and sdist of every distribution against the
files git tracks (templates, GSM8K's compressed data, the default model's LoRA weights, py.typed ...).

.ci/wheels.sh builds them (``python -m build``: the sdist, then the wheel from it) and runs this file
with ``AGENT_GYM_DIST`` naming the folder; without it the tests skip (building every distribution is
that stage's work, not the test suite's). Standard library and pytest only, so the stage's tools
virtualenv runs it: no agent_gym is imported.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DIST = os.environ.get("AGENT_GYM_DIST")
pytestmark = pytest.mark.skipif(not DIST, reason="AGENT_GYM_DIST names no folder of built distributions (bash .ci/wheels.sh builds them)")


# .ci/version.py is a script, not a module of a package: its functions, as a namespace.
version_tool = SimpleNamespace(**runpy.run_path(str(REPO_ROOT / ".ci" / "version.py")))
PROJECTS = [p.parent for p in version_tool.pyprojects(REPO_ROOT)]
VERSION = version_tool.current(REPO_ROOT)


def _tracked(folder: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--", str(folder)], check=True, capture_output=True, text=True).stdout
    return out.split()


def _name(project: Path) -> str:
    match = re.search(r'^name\s*=\s*"([^"]+)"', (REPO_ROOT / project / "pyproject.toml").read_text(), re.M)
    assert match, project
    return match.group(1)


def _packages(project: Path) -> list[str]:
    """The distribution's import packages: its top-level folders named agent_gym* holding an __init__.py."""
    return sorted(p.name for p in (REPO_ROOT / project).iterdir() if p.name.startswith("agent_gym") and (p / "__init__.py").is_file())


def _package_files(project: Path) -> dict[str, Path]:
    """Every tracked file of the distribution's import packages, by its path inside the wheel."""
    files = {}
    for package in _packages(project):
        for path in _tracked(project / package):
            relative = Path(path).relative_to(project) if str(project) != "." else Path(path)
            files[relative.as_posix()] = REPO_ROOT / path
    return files


def _built(project: Path, suffix: str) -> Path:
    stem = re.sub(r"[-_.]+", "_", _name(project)).lower()
    found = sorted(Path(DIST or ".").glob(f"{stem}-{VERSION}{suffix}"))
    assert len(found) == 1, f"{project}: {stem}-{VERSION}{suffix} in {DIST}: {found}"
    return found[0]


def _metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(zf.read(name).decode())


@pytest.mark.parametrize("project", PROJECTS, ids=str)
def test_the_wheel_holds_every_package_file_and_nothing_else(project: Path):
    files = _package_files(project)
    assert files, f"{project} has no tracked package files"
    wheel = _built(project, "-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = {n for n in zf.namelist() if ".dist-info/" not in n}
        assert names == set(files), f"missing: {sorted(set(files) - names)}; extra: {sorted(names - set(files))}"
        for name, path in files.items():
            assert zf.read(name) == path.read_bytes(), name
    for package in _packages(project):
        assert f"{package}/py.typed" in names, f"{package} is not marked typed (PEP 561)"


@pytest.mark.parametrize("project", PROJECTS, ids=str)
def test_the_metadata_has_one_version_and_pins_it(project: Path):
    meta = _metadata(_built(project, "-py3-none-any.whl"))
    assert (meta["Name"], meta["Version"]) == (_name(project), VERSION)
    own = [r for r in meta.get_all("Requires-Dist") or [] if r.startswith("agent-r1-gym")]
    for requirement in own:
        assert re.fullmatch(rf"agent-r1-gym[a-z0-9-]*(\[[\w,-]+\])?>={re.escape(VERSION)}(; .*)?", requirement), requirement
    assert meta["Description-Content-Type"] == "text/markdown" and meta.get_payload().strip(), "no readme on the package's page"


def _normalised(requirements: list[str]) -> list[str]:
    from packaging.requirements import Requirement  # build's own dependency

    return sorted(str(Requirement(r)) for r in requirements)


@pytest.mark.parametrize("project", PROJECTS, ids=str)
def test_the_metadata_says_what_the_pyproject_says(project: Path):
    """Requirements (extras included), entry points and scripts, as the pyproject declares them."""
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((REPO_ROOT / project / "pyproject.toml").read_text())["project"]
    wheel = _built(project, "-py3-none-any.whl")
    meta = _metadata(wheel)
    want = list(declared.get("dependencies", []))
    for extra, reqs in declared.get("optional-dependencies", {}).items():
        want += [f'{r}; extra == "{extra}"' for r in reqs]
    assert _normalised(meta.get_all("Requires-Dist") or []) == _normalised(want)
    groups = dict(declared.get("entry-points", {}))
    if "scripts" in declared:
        groups["console_scripts"] = declared["scripts"]
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = zf.read(names[0]).decode() if names else ""
    found: dict[str, dict[str, str]] = {}
    group = ""
    for line in text.splitlines():
        if line.startswith("["):
            group = line.strip("[]")
            found[group] = {}
        elif "=" in line:
            key, value = (s.strip() for s in line.split("=", 1))
            found[group][key] = value
    assert found == groups


@pytest.mark.parametrize("project", PROJECTS, ids=str)
def test_the_sdist_holds_the_package_files_and_the_pyproject(project: Path):
    sdist = _built(project, ".tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tf:
        members = {m.name.removeprefix(top + "/"): m for m in tf.getmembers() if m.isfile()}
        assert "pyproject.toml" in members and "PKG-INFO" in members
        assert tf.extractfile(members["pyproject.toml"]).read() == (REPO_ROOT / project / "pyproject.toml").read_bytes()
        for name, path in _package_files(project).items():
            assert name in members, f"{name} is not in {sdist.name}"
            assert tf.extractfile(members[name]).read() == path.read_bytes(), name


def test_the_data_that_the_envs_and_the_default_model_load_is_inside():
    """The files an installed package cannot work without, named (the test above checks all of them)."""
    expect = {
        "envs/gsm8k": ["agent_gym_gsm8k/dataset/train.jsonl.gz", "agent_gym_gsm8k/dataset/test.jsonl.gz",
                       "agent_gym_gsm8k/dataset/LICENSE", "agent_gym_gsm8k/templates/gsm8k_tool_system.j2"],
        "models/smollm2-135m-tool": ["agent_gym_smollm2_135m_tool/adapter_model.safetensors",
                                     "agent_gym_smollm2_135m_tool/adapter_config.json"],
        "envs/mcp": ["agent_gym_mcp/data/warehouse_tasks.jsonl"],
        "envs/games": ["agent_gym_games/data/words.txt"],
        "trainers/verl": ["agent_gym_verl/config/agent_loops.yaml"],
        ".": ["agent_gym/py.typed"],
    }
    for project, names in expect.items():
        with zipfile.ZipFile(_built(Path(project), "-py3-none-any.whl")) as zf:
            assert set(names) <= set(zf.namelist()), project
    with zipfile.ZipFile(_built(Path("."), "-py3-none-any.whl")) as zf:
        templates = [n for n in zf.namelist() if n.endswith(".j2")]
        assert templates and not any(n.endswith((".safetensors", ".gguf", ".jsonl.gz")) for n in zf.namelist())
    # the weights are the real file (9.8 MB), not a Git LFS pointer
    with zipfile.ZipFile(_built(Path("models/smollm2-135m-tool"), "-py3-none-any.whl")) as zf:
        assert zf.getinfo("agent_gym_smollm2_135m_tool/adapter_model.safetensors").file_size > 1_000_000


def test_every_distribution_was_built():
    built = {p.name for p in Path(DIST or ".").iterdir()}
    assert len(built) == 2 * len(PROJECTS), sorted(built)
