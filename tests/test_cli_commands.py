"""Subcommands a package adds to ``agent-gym`` through the ``agent_gym.commands`` entry-point group: the
help lists the installed ones, a command runs with its own options and errors, a package that cannot
be loaded breaks its command alone, and an adapter command nothing provides names its install.

The packages here are real installed distributions: a ``*.dist-info`` folder (what pip writes) with
the entry point, on the path of a real ``agent-gym`` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from agent_gym.cli.main import main
from agent_gym.commands import ADAPTER_COMMANDS, COMMAND_GROUP

CORE_COMMANDS = ["list", "play", "eval", "replay", "check", "new-env", "export-model", "serve-retriever"]
#: What each adapter command says when nothing installed provides it (the words the CLI said before
#: the adapters added their commands themselves).
INSTALL_LINES = {
    "export-verl": "export-verl needs the verl adapter: pip install -e trainers/verl (or pip install agent-r1-gym-verl)",
    "serve": "serve needs the OpenEnv adapter: pip install -e trainers/openenv",
}
INSTALLED = sorted({ep.name for ep in entry_points(group=COMMAND_GROUP)})

GREET = '''\
import argparse

from agent_gym.commands import UsageError, positive_int


def add_parser(subparsers, formatter_class=argparse.HelpFormatter):
    p = subparsers.add_parser("greet", help="say hello (greet package)", formatter_class=formatter_class)
    p.add_argument("name")
    p.add_argument("--times", type=positive_int, default=1)
    p.set_defaults(func=run)
    return p


def run(args):
    if args.name == "nobody":
        raise UsageError("greet needs somebody to greet")
    for _ in range(args.times):
        print(f"hello {args.name}")
    return 0
'''


def install(site: Path, dist: str, entry_points_txt: str, modules: dict[str, str]) -> None:
    """Install ``dist`` into the folder ``site``: its modules and a dist-info with its entry points."""
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{COMMAND_GROUP}]\n{entry_points_txt}")
    for name, text in modules.items():
        (site / f"{name}.py").write_text(text)


#: The installed ``agent-gym`` script of this interpreter, else the same entry function.
_SCRIPT = Path(sys.executable).with_name("agent-gym")
AGENT_GYM = [str(_SCRIPT)] if _SCRIPT.is_file() else [
    sys.executable, "-c", "import sys; from agent_gym.cli.main import main; sys.exit(main())"]


def agent_gym(site: Path, *args: str) -> subprocess.CompletedProcess:
    """``agent-gym ARGS`` in a subprocess with the packages installed in ``site`` on its path."""
    path = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return subprocess.run([*AGENT_GYM, *args], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(path)),
                          timeout=120)


def listed(help_text: str) -> list[str]:
    """The command names of the help's list of subcommands (argparse's, under "positional arguments")."""
    section = help_text.split("positional arguments:", 1)[1].split("options:", 1)[0]
    return [line.split()[0] for line in section.splitlines()[2:] if line.startswith("    ") and not line.startswith("     ")]


def test_help_lists_exactly_the_installed_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert listed(text) == CORE_COMMANDS + INSTALLED
    # Each adapter command that is not installed is named in the description with its install line.
    missing = [name for name in ADAPTER_COMMANDS if name not in INSTALLED]
    if missing:
        block = text.split("not installed (each comes with a trainer adapter):\n", 1)[1].split("\n\n", 1)[0]
        assert block.splitlines() == [f"  {name:<13} {ADAPTER_COMMANDS[name].split(': ', 1)[1]}" for name in missing]
    else:
        assert "not installed" not in text


@pytest.mark.parametrize("command", sorted(INSTALL_LINES))
def test_an_adapter_command_that_is_not_installed_names_its_install(command, capsys):
    if command in INSTALLED:
        pytest.skip(f"{command}'s adapter is installed here")
    for args in ([command, "AgentR1/GSM8K-v0"], [command, "--help"]):
        assert main(args) == 2
        captured = capsys.readouterr()
        assert captured.err == f"agent-gym: error: {INSTALL_LINES[command]}\n" and captured.out == ""


def test_a_package_adds_a_command(tmp_path):
    install(tmp_path, "greet-cmd", "greet = greet_cmd:add_parser\n", {"greet_cmd": GREET})
    done = agent_gym(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == CORE_COMMANDS + sorted([*INSTALLED, "greet"])
    assert "  greet         say hello (greet package)\n" in done.stdout  # in the description's list too

    done = agent_gym(tmp_path, "greet", "world", "--times", "2")
    assert (done.returncode, done.stdout, done.stderr) == (0, "hello world\nhello world\n", "")
    done = agent_gym(tmp_path, "greet", "nobody")  # its UsageError: one line, status 2
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "agent-gym: error: greet needs somebody to greet\n")
    done = agent_gym(tmp_path, "greet", "world", "--times", "0")  # its own options' errors name it
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "agent-gym greet: error: argument --times: expected a positive integer, got 0"


def test_a_package_that_cannot_be_loaded_breaks_its_command_alone(tmp_path):
    install(tmp_path, "broken-cmd", "broken = broken_cmd:add_parser\n", {"broken_cmd": "import no_such_module_here\n"})
    done = agent_gym(tmp_path, "list")
    assert done.returncode == 0, done.stderr
    assert "AgentR1/GSM8K-v0" in done.stdout
    done = agent_gym(tmp_path, "broken", "x")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("agent-gym: error: broken: the package that adds this command cannot be loaded "
                           "(No module named 'no_such_module_here')\n")
    done = agent_gym(tmp_path, "--help")
    assert "broken" not in listed(done.stdout)
    assert ("installed, but cannot be loaded:\n  broken        ModuleNotFoundError: No module named 'no_such_module_here'\n"
            in done.stdout)


def test_a_command_may_not_replace_a_core_command(tmp_path):
    install(tmp_path, "shadow-cmd", "list = shadow_cmd:add_parser\n",
            {"shadow_cmd": "def add_parser(subparsers, formatter_class=None):\n    raise AssertionError('loaded')\n"})
    done = agent_gym(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == CORE_COMMANDS + INSTALLED and "loaded" not in done.stdout


def test_an_adapter_command_whose_package_cannot_be_loaded_names_the_install(tmp_path):
    if "serve" in INSTALLED:
        pytest.skip("the OpenEnv adapter is installed here: its own serve entry point would be loaded")
    install(tmp_path, "half-openenv", "serve = half_openenv:add_parser\n", {"half_openenv": "import no_openenv_here\n"})
    done = agent_gym(tmp_path, "serve", "AgentR1/GSM8K-v0")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("agent-gym: error: serve needs the OpenEnv adapter: pip install -e trainers/openenv "
                           "(No module named 'no_openenv_here')\n")
