"""The sandbox's private root shows a virtualenv that lives under /tmp.

The root is built in a tmpfs that the server mounts over /tmp in its own mount namespace, so
everything the root must show from under the host's /tmp (an interpreter, a virtualenv, a checkout:
CI runs from a clone under /tmp) has to be reached without going through that path once it is
shadowed. This test builds a real virtualenv under /tmp whose own site-packages holds pandas, and
runs a pandas tool call in a sandbox whose server is that virtualenv's interpreter.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

import agent_gym
from agent_gym.sandbox import Sandbox

ROOT = os.geteuid() == 0

CSV = "city,n\nOslo,3\nLima,5\nOslo,4\n"
CODE = "print(int(df.loc[df.city == 'Oslo', 'n'].sum()))\nprint(df.groupby('city').n.sum().to_dict())\nprint(pd.__file__)"

# Runs with the new virtualenv's interpreter, so the sandbox server (started with sys.executable)
# is that interpreter and finds pandas only in that virtualenv's site-packages: the server runs
# with -I and a scrubbed environment, so the host paths this client adds below never reach it.
DRIVER = """\
import asyncio, json, site, sys
sys.path.insert(0, {project!r})    # the agent_gym under test
site.addsitedir({host_site!r})     # its dependencies (gymnasium, pydantic, ...), for this client only
from agent_gym.sandbox import PythonTool, Sandbox
with Sandbox(preload=("pandas",), timeout_s=30, cpu_s=20, prefork=0) as sb:
    tool = PythonTool(sb, stateful=True, files={{"t.csv": {csv!r}}}, prelude="import pandas as pd\\ndf = pd.read_csv('t.csv')")
    result = asyncio.run(tool.arun_code({code!r}))
    tool.close()
    print(json.dumps({{"kind": result.kind, "output": result.output, "error": result.error,
                      "isolation": sb.isolation, "python": sys.executable}}))
"""


def _requirements(dist) -> list[str]:
    """Names of the distributions ``dist`` needs on this platform (extras left out)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # without packaging: every requirement outside an extra (more than needed)
        Requirement = None  # noqa: N806
    names = []
    for spec in dist.requires or []:
        if Requirement is not None:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                names.append(req.name)
        elif "extra ==" not in spec:
            names.append(re.match(r"[A-Za-z0-9._-]+", spec).group(0))
    return names


def _copy_installed(names: list[str], site_packages: Path) -> list[str]:
    """Copy the installed files of ``names`` and of everything they need into ``site_packages``.

    This installs exactly the wheels the host's environment already has (same versions, same
    interpreter ABI), from the files each distribution's RECORD lists, without the network or a
    package index, and whatever the packages' layout (``numpy.libs``, single-module distributions
    such as ``six``, the ``.dist-info`` folders so that ``importlib.metadata`` still sees them).
    """
    todo, done = list(names), []
    while todo:
        name = todo.pop()
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in done:
            continue
        done.append(key)
        for f in dist.files or []:
            rel = Path(f)
            if rel.is_absolute() or ".." in rel.parts:  # scripts in bin/, outside site-packages
                continue
            src = Path(dist.locate_file(f))
            if src.is_file():
                dst = site_packages / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        todo += _requirements(dist)
    return sorted(done)


@pytest.fixture(scope="module")
def private_root():
    if not ROOT:
        pytest.skip("the private root (mount namespace + chroot) is only built when running as root")
    with Sandbox(prefork=0) as sb:
        iso = sb.isolation
    if not iso.get("chroot"):
        pytest.skip(f"no private root on this machine (mount namespaces unavailable): {iso.get('errors')}")
    return iso


@pytest.mark.slow
def test_pandas_from_a_virtualenv_under_tmp(private_root):
    base = Path(os.path.realpath(tempfile.mkdtemp(prefix="agent-gym-venv-test-", dir="/tmp")))
    try:
        venv = base / "venv"
        # No pip in it: the packages are copied from this environment (see _copy_installed), which
        # is faster than pip, needs no network and cannot pick other versions than the host's.
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        site_packages = Path(subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip())
        assert str(site_packages).startswith(str(base) + "/"), site_packages
        copied = _copy_installed(["pandas"], site_packages)
        assert {"pandas", "numpy"} <= set(copied), copied

        host_site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "gymnasium")))
        project = str(Path(agent_gym.__file__).resolve().parents[1])
        driver = DRIVER.format(project=project, host_site=host_site, csv=CSV, code=CODE)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        proc = subprocess.run([python, "-c", driver], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])

        assert out["python"] == python
        iso = out["isolation"]
        assert iso["chroot"] and iso["setuid"] and iso["netns"], iso
        assert out["kind"] == "ok", out
        assert iso["preloaded"] == ["pandas"] and iso["errors"] == [], iso
        # the virtualenv's own pandas, at its host path (the root binds every path where it lives)
        assert out["output"] == f"7\n{{'Lima': 5, 'Oslo': 7}}\n{site_packages}/pandas/__init__.py\n"
    finally:
        shutil.rmtree(base, ignore_errors=True)
