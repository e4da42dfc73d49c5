"""Run some of a doc block's Python commands only as far as their argument parsing (tests/doc_blocks.py:
the ``doctest-args`` marker, the ``args-only=`` option, and every ``pip``). The runner puts this folder
first on PYTHONPATH and sets AGENT_GYM_DOC_ARGS_ONLY to the programs it stops (``*``: all; else a comma
list of names: a console script's or a script's file name, ``agent-gym``, ``train_trl.py``, or a
``python -m`` module's, ``build``), so every Python program the block starts imports this file first.
A program it stops:

- if it parses its command line with argparse (agent-gym, examples/*.py, benchmarks/*.py, pytest,
  build, twine), exits with status 0 right after its outermost ``parse_known_args`` accepted the
  arguments as written, and with argparse's own error (status 2) when they are not: the script exists,
  imports, and takes the block's options;
- if it is pip: ``pip install`` parses its options with pip's own parser and checks that each local
  folder it names holds a Python project and each requirement is well formed, and installs nothing;
  except projects that the block made in its own folder (a new env package), which it installs without
  their dependencies into the block's throwaway site (``AGENT_GYM_DOC_SITE``, first on PYTHONPATH).

Without AGENT_GYM_DOC_ARGS_ONLY this file does nothing.
"""

from __future__ import annotations

import os
import sys


def _stop(message: str, status: int = 0) -> None:
    sys.stdout.flush()
    print(f"doc-blocks (arguments only): {message}", file=sys.stderr, flush=True)
    os._exit(status)


def _patch_argparse() -> None:
    """Stop when the outermost ``parse_args`` or ``parse_known_args`` returns: ``parse_args`` has then
    refused unknown arguments too (it calls ``parse_known_args`` itself), a subparser's parse is inside."""
    import argparse

    depth = [0]

    def stopping(original):  # type: ignore[no-untyped-def]
        def parse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            depth[0] += 1
            try:
                result = original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                _stop(f"{self.prog}: arguments accepted; stopped before running")
            return result

        return parse

    for name in ("parse_args", "parse_known_args"):
        setattr(argparse.ArgumentParser, name, stopping(getattr(argparse.ArgumentParser, name)))


def _program() -> tuple[str, list[str]]:
    """This process's program name (a ``-m`` module's, else its script's file name) and its arguments."""
    argv = list(getattr(sys, "orig_argv", []))
    if len(argv) >= 3 and argv[1] == "-m":
        return argv[2], argv[3:]
    if len(argv) >= 2 and argv[1] != "-c":
        name = os.path.basename(argv[1])
        return ("pip" if name.rstrip("0123456789.") == "pip" else name), argv[2:]
    return "", argv[2:]


def _check_pip(args: list[str]) -> None:
    from pip._internal.commands import create_command
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

    if not args or args[0] != "install":
        _stop(f"pip {' '.join(args[:1])}: only `pip install` is checked", 0)
    command = create_command("install")
    options, positional = command.parse_args(args[1:])  # pip's own parser: exit status 2 on a bad option
    folders, requirements = [], []
    for spec in list(options.editables) + list(positional):
        base = spec.split("[", 1)[0]
        if spec.startswith((".", "/", "~")) or os.sep in base or base in options.editables:
            folder = os.path.expanduser(base)
            if not (os.path.isfile(os.path.join(folder, "pyproject.toml")) or os.path.isfile(os.path.join(folder, "setup.py"))):
                _stop(f"pip install: {spec} is no folder of a Python project (no pyproject.toml or setup.py) here", 1)
            folders.append(spec)
            continue
        try:
            Requirement(spec)
        except InvalidRequirement as exc:
            _stop(f"pip install: {spec!r} is no valid requirement ({exc})", 1)
        requirements.append(spec)
    for path in options.requirements:
        if not os.path.isfile(path):
            _stop(f"pip install -r {path}: no such file", 1)
    site = os.environ.get("AGENT_GYM_DOC_SITE", "")
    workdir = os.path.realpath(os.path.dirname(site)) if site else ""
    made_here = [os.path.realpath(os.path.expanduser(f.split("[", 1)[0])) for f in folders]
    if site and folders and not requirements and not options.requirements and all(
            f.startswith(workdir + os.sep) for f in made_here):
        # Projects the block made in its own folder (`agent-gym new-env`, then `pip install -e` it): really
        # installed, without their dependencies, into the block's throwaway site that the runner put first
        # on PYTHONPATH, so the commands after it find the package and its entry points.
        env = {k: v for k, v in os.environ.items() if k != "AGENT_GYM_DOC_ARGS_ONLY"}
        argv = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                "--disable-pip-version-check", "--target", site, *made_here]
        print(f"doc-blocks: pip install {' '.join(folders)}: made by this block, installed into {site}",
              file=sys.stderr, flush=True)
        os.execve(sys.executable, argv, env)
    _stop(f"pip install: options accepted, {len(folders)} local project(s) and {len(requirements)} requirement(s) "
          "well formed; nothing installed")


_STOPPED = {name.strip() for name in os.environ.get("AGENT_GYM_DOC_ARGS_ONLY", "").split(",") if name.strip()}
if _STOPPED:
    _name, _args = _program()
    if _name == "pip" and ("pip" in _STOPPED or "*" in _STOPPED):
        _check_pip(_args)
    elif _name and ("*" in _STOPPED or _name in _STOPPED):
        _patch_argparse()
