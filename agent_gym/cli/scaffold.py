"""``agent-gym new-env NAME``: write a new env package that passes its own tests out of the box.

:func:`new_env` writes ``<dest>/<name>/``::

    pyproject.toml              distribution agent-r1-gym-<name>, entry point in group agent_gym.envs
    README.md
    agent_gym_<name>/__init__.py    register(): registers AgentR1/<Name>-v0
    agent_gym_<name>/env.py         the env: an AgentEnv subclass with the five task hooks filled in
    agent_gym_<name>/templates/     system.j2 and user.j2 (the prompts)
    tests/test_<name>.py            the env contract (agent-gym check), seeding, rewards, bad actions

The example task (add two numbers, answer in ``<answer>...</answer>``) is generated from the seed, so
the package works without data; replace it with yours. ``cd <dest>/<name> && pytest`` runs its tests
without installing it (its pyproject puts the folder on pytest's path);
``pip install -e <dest>/<name>`` makes ``gym.make("AgentR1/<Name>-v0")`` work after ``import agent_gym``.

Hooking into the CLI (``agent_gym/cli/main.py``), in ``build_parser`` after the other subcommands::

    from agent_gym.cli.scaffold import add_parser as add_new_env_parser
    add_new_env_parser(sub, formatter)

The subcommand's function returns the exit status and raises ``agent_gym.commands.UsageError`` for
a user's mistake (a bad name, an existing folder), as the other subcommands do. Without the hook,
``python -m agent_gym.cli.scaffold NAME`` does the same.
"""

from __future__ import annotations

import argparse
import keyword
import re
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

__all__ = ["EnvNames", "ScaffoldError", "add_parser", "env_names", "main", "new_env"]

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*$")


class ScaffoldError(ValueError):
    """The name or destination cannot be used (message written for the user)."""


@dataclass(frozen=True)
class EnvNames:
    """Every name derived from the one the user typed (e.g. ``"my-task"`` or ``"MyTask"``)."""

    slug: str  # my-task: folder name and distribution suffix
    distribution: str  # agent-r1-gym-my-task
    module: str  # agent_gym_my_task
    title: str  # MyTask
    env_class: str  # MyTaskEnv
    env_name: str  # MyTask-v0
    env_id: str  # AgentR1/MyTask-v0


def env_names(name: str) -> EnvNames:
    """Derive the package, module, class and env id names from ``name``; ``ScaffoldError`` if unusable."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ScaffoldError(
            f"invalid env name {name!r}: use letters and digits, optionally separated by '-' or '_', "
            "starting with a letter (e.g. my-task or MyTask)"
        )
    words: list[str] = []
    for part in re.split(r"[-_]", name):
        words += re.split(r"(?<=[a-z])(?=[A-Z])", part)  # MyTask -> My, Task
    slug = "-".join(w.lower() for w in words)
    title = "".join(w if any(c.isupper() for c in w) else w.capitalize() for w in words)
    module = "agent_gym_" + "_".join(w.lower() for w in words)
    if keyword.iskeyword(module) or not module.isidentifier():  # pragma: no cover - excluded by the regex
        raise ScaffoldError(f"{name!r} does not give a valid Python module name")
    return EnvNames(
        slug=slug,
        distribution=f"agent-r1-gym-{slug}",
        module=module,
        title=title,
        env_class=f"{title}Env",
        env_name=f"{title}-v0",
        env_id=f"AgentR1/{title}-v0",
    )


def new_env(name: str, dest: str | Path = ".", *, force: bool = False) -> Path:
    """Write a new env package into ``<dest>/<slug>`` and return that folder.

    Args:
        name: the env's name, e.g. ``"my-task"`` (env id ``AgentR1/MyTask-v0``).
        dest: the parent folder (e.g. ``envs``); created if missing.
        force: overwrite the generated files in an existing, non-empty folder.
    """
    from agent_gym import __version__

    names = env_names(name)
    root = Path(dest) / names.slug
    if root.exists() and not root.is_dir():
        raise ScaffoldError(f"{root} exists and is not a folder")
    if root.is_dir() and any(root.iterdir()) and not force:
        raise ScaffoldError(f"{root} already exists and is not empty (pass --force to overwrite its files)")
    values = {
        "slug": names.slug,
        "distribution": names.distribution,
        "module": names.module,
        "title": names.title,
        "env_class": names.env_class,
        "env_name": names.env_name,
        "env_id": names.env_id,
        "core_version": __version__,
    }
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        f"{names.module}/__init__.py": _INIT,
        f"{names.module}/env.py": _ENV,
        f"{names.module}/templates/system.j2": _SYSTEM_J2,
        f"{names.module}/templates/user.j2": _USER_J2,
        f"tests/test_{names.module.removeprefix('agent_gym_')}.py": _TEST,
    }
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(string.Template(template).substitute(values), encoding="utf-8")
    return root


# -- CLI --------------------------------------------------------------------------------------------------

_EPILOG = """\
Writes DEST/NAME/: pyproject.toml (entry point in group agent_gym.envs), the env class (an AgentEnv
subclass), jinja2 prompt templates and a test file. The example task (add two numbers) passes its
tests as written: replace it with yours.

examples:
  agent-gym new-env my-task --dest envs
  cd envs/my-task && python -m pytest -q        # its tests pass out of the box
  pip install -e envs/my-task                   # then: gym.make("AgentR1/MyTask-v0")
  python -m build envs/my-task && twine upload envs/my-task/dist/*"""


def add_parser(subparsers: Any, formatter_class: Any = argparse.RawDescriptionHelpFormatter) -> argparse.ArgumentParser:
    """Add the ``new-env`` subcommand to an ``argparse`` subparsers object (``agent-gym``'s)."""
    p = subparsers.add_parser(
        "new-env",
        help="write a new env package (pyproject, env class, prompts, tests)",
        description="Write a new env package that passes its own tests out of the box.",
        epilog=_EPILOG,
        formatter_class=formatter_class,
    )
    p.add_argument("name", metavar="NAME", help="env name, e.g. my-task (env id AgentR1/MyTask-v0)")
    p.add_argument("--dest", default=".", help="parent folder of the new package (default: the current folder)")
    p.add_argument("--force", action="store_true", help="overwrite files in an existing folder")
    p.set_defaults(func=_cmd_new_env)
    return p


def _cmd_new_env(args: argparse.Namespace) -> int:
    from agent_gym.commands import UsageError  # `agent-gym` prints it as one line, exit status 2

    try:
        root = new_env(args.name, args.dest, force=args.force)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    names = env_names(args.name)
    print(f"created {root}/ ({names.distribution}, env id {names.env_id})")
    print("next steps:")
    print(f"  cd {root} && python -m pytest -q")
    print(f"  pip install -e {root}")
    print(f"  python -m build {root}   # then: twine upload {root}/dist/*")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_gym.cli.scaffold NAME [--dest DIR] [--force]``."""
    parser = argparse.ArgumentParser(prog="agent-gym")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["new-env", *(sys.argv[1:] if argv is None else argv)])
    from agent_gym.commands import UsageError

    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"agent-gym: error: {exc}", file=sys.stderr)
        return 2


# -- the files written --------------------------------------------------------------------------------
# string.Template placeholders: $$ is a literal dollar sign; jinja's {{ }} passes through untouched.

_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "$distribution"
version = "0.1.0"
description = "The $title environment for agent-r1-gym"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["agent-r1-gym>=$core_version"]

[project.optional-dependencies]
test = ["pytest>=8"]

# `import agent_gym` calls register() of every installed package in this group.
[project.entry-points."agent_gym.envs"]
$slug = "$module:register"

[tool.setuptools.packages.find]
include = ["$module*"]

[tool.setuptools.package-data]
$module = ["templates/*.j2"]

[tool.pytest.ini_options]
pythonpath = ["."]  # the tests run from this folder without installing the package
'''

_README = '''\
# $distribution

`$env_id`: an environment for [agent-r1-gym](https://pypi.org/project/agent-r1-gym/).

```python
import gymnasium as gym
import agent_gym  # registers every installed env package

env = gym.make("$env_id")
obs, info = env.reset(seed=0)
```

Task: add two numbers; the answer goes in `<answer>...</answer>`. Reward: 1.0 for the right sum,
else 0.0 (`info["answer_check"]` says why).

Develop: `python -m pytest -q` (in this folder). Publish: `python -m build` then `twine upload dist/*`.
'''

_INIT = '''\
"""$title environment for agent-r1-gym (``$module``)."""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``$env_id`` (called by ``import agent_gym`` through the entry point)."""
    from agent_gym.registry import register_env

    register_env(
        "$env_name",
        "$module.env:$env_class",
        description="$title: add two numbers; reward 1 for the right sum in <answer>",
        package="$distribution",
    )
'''

_ENV = '''\
"""The $title env. Replace the example task (add two numbers) with yours."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from agent_gym.core.env import AgentEnv, Grade, Turn
from agent_gym.core.prompts import PromptTemplates

__all__ = ["$env_class", "Task"]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass(frozen=True)
class Task:
    id: str
    a: int
    b: int

    @property
    def answer(self) -> int:
        return self.a + self.b


def make_task(n: int) -> Task:
    """Task number ``n``: the same in every process (seeded by ``n`` alone)."""
    rng = np.random.default_rng(n)
    a, b = (int(x) for x in rng.integers(0, 100, size=2))
    return Task(f"task-{n}", a, b)


class $env_class(AgentEnv):
    """$title: add two numbers.

    Reward: 1.0 when the last ``<answer>...</answer>`` holds the sum, else 0.0;
    ``info["answer_check"]`` is ``correct``, ``wrong_answer`` or ``no_answer``.

    Args:
        tokenizer: any Hugging Face tokenizer or path; ``None``: the embedded default model's.
        prompt_dir: a folder of jinja2 templates overriding the packaged ones (same file names).
        **kwargs: passed to :class:`agent_gym.AgentEnv` (``max_turns``, ``max_action_tokens``, ...).
    """

    description = "$title: add two numbers; reward 1 for the right sum in <answer>"

    def __init__(self, tokenizer: Any = None, *, prompt_dir: str | os.PathLike[str] | None = None, **kwargs: Any):
        super().__init__(tokenizer, **kwargs)
        self.prompts = PromptTemplates("$module", prompt_dir)

    # The five task hooks -------------------------------------------------------------------------

    def sample_task(self, rng: np.random.Generator) -> Task:
        return make_task(int(rng.integers(0, 2**31)))

    def get_task(self, task_id: str) -> Task:
        prefix, _, number = str(task_id).partition("-")
        if prefix != "task" or not number.isdigit():
            raise KeyError(f"no $title task with id {task_id!r} (ids look like 'task-123')")
        return make_task(int(number))

    def task_from_dict(self, task: Mapping[str, Any]) -> Task:
        try:
            return Task(str(task.get("id", "custom")), int(task["a"]), int(task["b"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError("a $title task needs integer keys a and b") from None

    def initial_messages(self, task: Task) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": self.prompts.render("system.j2")},
            {"role": "user", "content": self.prompts.render("user.j2", a=task.a, b=task.b)},
        ]

    def grade(self, task: Task, turn: Turn) -> Grade:
        answers = _ANSWER_RE.findall(turn.parsed.content)
        if not answers:
            reason = "no_answer"
        else:
            text = answers[-1].strip()
            reason = "correct" if re.fullmatch(r"[+-]?\\d+", text) and int(text) == task.answer else "wrong_answer"
        return Grade.from_check(reason == "correct", reason)
'''

_SYSTEM_J2 = '''\
{#- System prompt of $env_id. Variables: none. -#}
You are a careful assistant. Solve the task, then give the final answer in <answer></answer> tags.
{{- "" -}}
'''

_USER_J2 = '''\
{#- User turn of $env_id. Variables: a (int), b (int). -#}
What is {{ a }} + {{ b }}? Give the result in <answer></answer> tags.
{{- "" -}}
'''

_TEST = '''\
"""Tests of $env_id: run them with `python -m pytest -q` in the package folder."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

import agent_gym  # noqa: F401  (registers the installed env packages)
from agent_gym.core.contract import check_contract
from $module import register

register()  # also when this package is not installed (register() is idempotent)

ENV_ID = "$env_id"
# Any Hugging Face tokenizer (path or hub name); unset: the embedded default model's.
TOKENIZER = os.environ.get("AGENT_GYM_TEST_TOKENIZER") or None


@pytest.fixture(scope="module")
def env():
    return gym.make(ENV_ID, tokenizer=TOKENIZER)


def act(env, text):
    """The ids a policy would generate for ``text``: its tokens, then the end-of-turn token."""
    template = env.unwrapped.template
    return template.encode(text) + list(template.end_of_turn_ids)


def test_contract():
    """`agent-gym check $env_id`: spaces, types, seeding, snapshots, no drift, gymnasium's check_env."""
    check_contract(ENV_ID, tokenizer=TOKENIZER).raise_if_failed()


def test_reset_is_seeded(env):
    _, first = env.reset(seed=3)
    _, again = env.reset(seed=3)
    assert first["task_id"] == again["task_id"]
    obs, info = env.reset(options={"task_id": first["task_id"]})
    assert info["task_id"] == first["task_id"]


def test_rewards(env):
    env.reset(options={"task": {"a": 2, "b": 3}})
    _, reward, terminated, _, info = env.step(act(env, "2 + 3 = 5. <answer>5</answer>"))
    assert (reward, terminated, info["answer_check"]) == (1.0, True, "correct")
    env.reset(options={"task": {"a": 2, "b": 3}})
    _, reward, _, _, info = env.step(act(env, "<answer>6</answer>"))
    assert (reward, info["answer_check"]) == (0.0, "wrong_answer")
    env.reset(options={"task": {"a": 2, "b": 3}})
    _, reward, _, _, info = env.step(act(env, "five"))
    assert (reward, info["answer_check"]) == (0.0, "no_answer")


def test_bad_actions_never_raise(env):
    vocab = env.unwrapped.template.vocab_size
    for action in ([], [vocab + 1], np.ones(100_000, dtype=np.int64), np.random.default_rng(0).integers(0, vocab, 50)):
        env.reset(seed=0)
        _, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and (terminated or truncated)
        assert info.get("invalid_action") or info.get("answer_check")
'''


if __name__ == "__main__":  # python -m agent_gym.cli.scaffold NAME
    sys.exit(main())
