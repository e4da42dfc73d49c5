"""``agent_gym.cli.scaffold``: a new env package passes its own generated tests out of the box."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

from agent_gym.cli.scaffold import ScaffoldError, env_names, main, new_env

# The module (the package re-exports its function `main`, which hides the submodule's name).
cli_main = importlib.import_module("agent_gym.cli.main")


@pytest.mark.parametrize(
    "name, slug, module, env_id",
    [
        ("my-task", "my-task", "agent_gym_my_task", "AgentR1/MyTask-v0"),
        ("MyTask", "my-task", "agent_gym_my_task", "AgentR1/MyTask-v0"),
        ("my_task2", "my-task2", "agent_gym_my_task2", "AgentR1/MyTask2-v0"),
        ("GSM8K", "gsm8k", "agent_gym_gsm8k", "AgentR1/GSM8K-v0"),
        ("tableqa", "tableqa", "agent_gym_tableqa", "AgentR1/Tableqa-v0"),
    ],
)
def test_names(name, slug, module, env_id):
    names = env_names(name)
    assert (names.slug, names.module, names.env_id) == (slug, module, env_id)
    assert names.distribution == f"agent-r1-gym-{slug}" and names.env_class == env_id.split("/")[1][:-3] + "Env"


@pytest.mark.parametrize("bad", ["", "9lives", "my task", "my--task", "-x", "a.b", "x/y"])
def test_bad_names_are_refused(bad, tmp_path):
    with pytest.raises(ScaffoldError, match="invalid env name"):
        new_env(bad, tmp_path)


def test_generated_package_passes_its_own_tests(tmp_path):
    root = new_env("scaffold-probe", tmp_path)
    assert root == tmp_path / "scaffold-probe"
    expected = {
        "pyproject.toml", "README.md", "agent_gym_scaffold_probe/__init__.py", "agent_gym_scaffold_probe/env.py",
        "agent_gym_scaffold_probe/templates/system.j2", "agent_gym_scaffold_probe/templates/user.j2",
        "tests/test_scaffold_probe.py",
    }
    assert {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} == expected
    if tomllib is not None:
        meta = tomllib.loads((root / "pyproject.toml").read_text())
        assert meta["project"]["name"] == "agent-r1-gym-scaffold-probe"
        assert meta["project"]["entry-points"]["agent_gym.envs"] == {"scaffold-probe": "agent_gym_scaffold_probe:register"}
        assert any(dep.startswith("agent-r1-gym>=") for dep in meta["project"]["dependencies"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::RuntimeWarning"],
        cwd=root, capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "4 passed" in result.stdout


def test_existing_folder_is_kept_unless_forced(tmp_path):
    root = new_env("probe", tmp_path)
    (root / "README.md").write_text("mine")
    with pytest.raises(ScaffoldError, match="already exists and is not empty"):
        new_env("probe", tmp_path)
    assert (root / "README.md").read_text() == "mine"
    new_env("probe", tmp_path, force=True)
    assert (root / "README.md").read_text() != "mine"


def test_standalone_entry_point(tmp_path, capsys):
    assert main(["cli-probe", "--dest", str(tmp_path)]) == 0
    assert "created" in capsys.readouterr().out and (tmp_path / "cli-probe" / "pyproject.toml").is_file()
    assert main(["cli-probe", "--dest", str(tmp_path)]) == 2
    assert "agent-gym: error: " in capsys.readouterr().err


def test_hooks_into_the_agent_gym_parser(tmp_path, capsys):
    """agent-gym's parser has the new-env subcommand; its errors become UsageError."""
    parser = cli_main.build_parser()
    args = parser.parse_args(["new-env", "hooked", "--dest", str(tmp_path)])
    assert args.func(args) == 0
    assert (tmp_path / "hooked" / "agent_gym_hooked" / "env.py").is_file()
    with pytest.raises(cli_main.UsageError, match="already exists"):
        args.func(args)
