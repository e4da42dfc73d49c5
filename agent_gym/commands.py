"""The interface a subcommand of ``agent-gym`` is built from: the core's own commands and the ones
trainer adapters add (which never import :mod:`agent_gym.cli`).

``agent-gym`` (:mod:`agent_gym.cli`) has the core's commands; a trainer adapter adds its own
(``export-verl``: trainers/verl, ``serve``: trainers/openenv) by declaring an entry point in the group
:data:`COMMAND_GROUP`, the way env packages declare theirs in ``agent_gym.envs``::

    [project.entry-points."agent_gym.commands"]
    export-verl = "agent_gym_verl.export:add_parser"

The entry point names a function ``add_parser(subparsers, formatter_class)`` that adds the subparser of
that name and sets its ``func`` default to a function ``func(args) -> int`` (the exit status) that runs
it. ``agent-gym`` loads every one of them whenever it builds its parser, ``--help`` included, so the
module the entry point names imports no trainer library; ``func`` imports what the command needs.
``func`` raises :class:`UsageError` for a user's mistake: ``agent-gym`` prints it as one
``agent-gym: error: ...`` line and exits with status 2.

This module holds what such a command shares with the core's: :class:`UsageError`, the env options
every command that makes envs takes (:func:`add_env_options`, :func:`add_env_kwarg_option`,
:func:`parse_env_kwargs`, :func:`env_kwargs`, :func:`resolve_env_id`), :func:`positive_int`,
:func:`user_errors`, and the install line of each adapter command (:func:`missing_adapter_message`).
It lives outside :mod:`agent_gym.cli` so that an adapter builds its command without importing the
core's command line, which in turn imports no adapter: it finds their commands through the entry points.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable, Sequence

__all__ = [
    "PROG",
    "COMMAND_GROUP",
    "ADAPTER_COMMANDS",
    "UsageError",
    "positive_int",
    "add_env_options",
    "add_env_kwarg_option",
    "parse_env_kwargs",
    "env_kwargs",
    "chat_template_arg",
    "resolve_env_id",
    "user_errors",
    "one_line",
    "missing_adapter_message",
]

#: The command's name in usage lines and error messages.
PROG = "agent-gym"

#: The entry-point group a package adds ``agent-gym`` subcommands under (see the module docstring).
COMMAND_GROUP = "agent_gym.commands"

#: The commands this project's trainer adapters add, and what to install for each. ``agent-gym`` says
#: it when one of them is asked for and no installed package provides it (a command of any other
#: package is simply unknown then); the adapter says it too when a library it needs is missing.
ADAPTER_COMMANDS: dict[str, str] = {
    "export-verl": "export-verl needs the verl adapter: pip install -e trainers/verl (or pip install agent-r1-gym-verl)",
    "serve": "serve needs the OpenEnv adapter: pip install -e trainers/openenv",
}


class UsageError(Exception):
    """A mistake of the user's: reported as one line, exit status 2."""


def missing_adapter_message(command: str, exc: BaseException | None = None) -> str:
    """The line naming the install of ``command``'s adapter (:data:`ADAPTER_COMMANDS`), with the
    ImportError that shows it missing, when there is one."""
    line = ADAPTER_COMMANDS.get(command, f"{command}: the package that adds this command cannot be loaded")
    return f"{line} ({exc})" if exc is not None else line


def positive_int(text: str) -> int:
    """``argparse`` type for counts (episodes, repeats, ...): an int >= 1, else a one-line error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_env_options(p: argparse.ArgumentParser) -> None:
    """The env id and the env options (``--split``, ``--data-dir``, ``--env-kwarg``, ``--chat-template``)
    of a command that makes envs; :func:`env_kwargs` reads them back as constructor arguments."""
    p.add_argument("env_id", metavar="ID", help="env id, e.g. AgentR1/GSM8KTool-v0 (the AgentR1/ prefix may be left out)")
    p.add_argument("--split", default="test", help="dataset split (default: %(default)s)")
    p.add_argument("--data-dir", default=None, help="folder with the dataset files (default: the env's own lookup)")
    add_env_kwarg_option(p)


def add_env_kwarg_option(p: argparse.ArgumentParser) -> None:
    """The repeatable ``--env-kwarg KEY=VALUE`` option (read with :func:`parse_env_kwargs`); every command
    that makes envs takes it."""
    p.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra env constructor argument, repeatable; VALUE is read as JSON when it parses "
        "(e.g. --env-kwarg difficulty=easy --env-kwarg max_turns=3)",
    )
    p.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE_OR_NAME",
        help="the chat template the env renders with, replacing the tokenizer's own: a jinja file or a built-in "
        "name (completion: plain prose for base models, docs/base-models.md)",
    )


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``--env-kwarg`` items (``KEY=VALUE``) as constructor arguments: VALUE as JSON when it parses (``3``,
    ``true``, ``[1, 2]``), else as the text itself; a later item wins over an earlier one.

    Raises:
        UsageError: an item that is not ``KEY=VALUE`` with a Python identifier as KEY.
    """
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-kwarg expects KEY=VALUE with a Python identifier as KEY, got {item!r}")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Constructor arguments from the options :func:`add_env_options` adds: --split, --data-dir,
    --chat-template and --env-kwarg."""
    kwargs: dict[str, Any] = {"split": args.split}
    if args.data_dir is not None:
        kwargs["data_dir"] = args.data_dir
    if getattr(args, "chat_template", None) is not None:
        kwargs["chat_template"] = chat_template_arg(args.chat_template)
    kwargs.update(parse_env_kwargs(args.env_kwarg))
    return kwargs


def chat_template_arg(value: str) -> str:
    """``--chat-template``: a file's jinja text, or a built-in template's name (kept as the name, which
    the env resolves)."""
    from agent_gym.models import CHAT_TEMPLATES

    if os.path.isfile(os.path.expanduser(value)):
        with open(os.path.expanduser(value), encoding="utf-8") as fh:
            return fh.read()
    if value in CHAT_TEMPLATES:
        return value
    raise UsageError(f"--chat-template {value!r} is no file and no built-in template (built-in: {', '.join(CHAT_TEMPLATES)})")


def resolve_env_id(name: str) -> str:
    """The installed env id ``name`` means (``name`` itself, or with the ``AgentR1/`` prefix).

    Raises:
        UsageError: no such env is installed (the message lists the known ids).
    """
    from agent_gym import NAMESPACE, list_envs

    ids = [card.id for card in list_envs()]
    for candidate in (name, f"{NAMESPACE}/{name}"):
        if candidate in ids:
            return candidate
    known = ", ".join(ids) if ids else "none (install an env package, e.g. agent-r1-gym-gsm8k)"
    raise UsageError(f"unknown env id {name!r}; known ids: {known}")


def user_errors(what: Callable[[], Any]) -> Any:
    """Call ``what``; turn the errors a user causes (missing data or model, bad names) into UsageError."""
    from agent_gym.models import DefaultModelNotInstalled

    try:
        return what()
    except DefaultModelNotInstalled as exc:
        raise UsageError(str(exc)) from None
    except ImportError as exc:  # an optional backend (vLLM) that is not installed
        raise UsageError(str(exc)) from None
    except KeyError as exc:  # unknown task id: the env's message is the KeyError's argument
        raise UsageError(str(exc.args[0]) if exc.args else repr(exc)) from None
    except TypeError as exc:  # serve: its server reports a bad env argument in make_error_message's words
        raise UsageError(one_line(str(exc))) from None
    except (FileNotFoundError, ValueError) as exc:  # missing dataset, bad split, bad model path
        raise UsageError(one_line(str(exc))) from None
    except OSError as exc:  # transformers: a model folder or hub name that cannot be loaded
        raise UsageError(one_line(str(exc))) from None


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(text.split())
