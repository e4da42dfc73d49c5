"""The built wheel carries the demo (its server module, its tasks, the prompt template) and declares the SDK."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import agent_gym_mcp
from agent_gym_mcp.env import DEMO_TASKS

PACKAGE_DIR = Path(agent_gym_mcp.__file__).resolve().parent


def test_the_wheel_carries_the_demo_and_requires_the_sdk(tmp_path: Path) -> None:
    pytest.importorskip("build")
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    shutil.copytree(PACKAGE_DIR.parent, src,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "*.pyc", "tests"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-x", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert zf.read("agent_gym_mcp/data/warehouse_tasks.jsonl") == DEMO_TASKS.read_bytes()
        metadata = Parser().parsestr(zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert {"agent_gym_mcp/demo_server.py", "agent_gym_mcp/env.py", "agent_gym_mcp/templates/mcp_system.j2",
            "agent_gym_mcp/py.typed"} <= names
    assert not any(n.startswith("tests/") for n in names)
    requires = metadata.get_all("Requires-Dist") or []
    assert "mcp>=2.3" in requires and any(r.startswith("agent-r1-gym>=") for r in requires)
    assert "[agent_gym.envs]\nmcp = agent_gym_mcp:register" in entry_points
