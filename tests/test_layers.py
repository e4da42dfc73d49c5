"""The import layers of docs/architecture.md, checked for every pair of units, and no import cycles.

The layer table is written once, in docs/architecture.md ("## Layers"); this module parses it. Each row
is a layer, numbered from the top; its cell of units names packages or modules (``agent_gym.core``) and
folder globs (``envs/*/agent_gym_*``: each matching package is a unit of its own). A unit may import its
own modules and the units of every layer below its own, nothing else: not a unit above, not another unit
of its own layer (the env packages are peers, and so are the core's command line and the adapters). A
unit that other units of the table lie inside (``agent_gym``) is its ``__init__`` alone.

The graph is read with ``ast`` from the source files, so it covers every import a file can run: at the
top, inside functions and under ``if TYPE_CHECKING:`` (a type-only import is held to the same rules,
since mypy follows it), ``import x`` and ``from x import y`` (``from agent_gym import cli`` imports
``agent_gym.cli``; ``from agent_gym import list_envs`` imports ``agent_gym``), relative imports resolved
against the file's package, and ``importlib.import_module("...")`` / ``__import__("...")`` with a
literal name. ``import a.b.c`` is an edge to ``a.b.c`` alone: Python runs the ``__init__`` of ``a`` and
``a.b`` first anyway, so a module is never made to depend on its own package by being inside it.

The checker works on a mapping of file paths to source texts, so the tests below prove it on planted
violations without touching the tree.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"

#: Imports between units that break the table today, each with the reason it is tolerated for now.
#: An entry that no import needs any more fails the test: delete it then, so the list only shrinks.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Unit:
    name: str  # the import name of its package or module
    layer: int  # 1 is the top
    row: str  # the row's units as the table writes them, for messages


@dataclass(frozen=True)
class Layers:
    units: dict[str, Unit]
    globs: dict[str, int]  # folder glob -> layer

    def unit_of(self, module: str) -> Unit | None:
        """The unit ``module`` belongs to: the innermost unit holding it; a unit with units inside it
        holds only itself (its ``__init__``)."""
        parts = module.split(".")
        for n in range(len(parts), 0, -1):
            unit = self.units.get(".".join(parts[:n]))
            if unit is not None:
                if n < len(parts) and any(u.startswith(unit.name + ".") for u in self.units):
                    return None
                return unit
        return None


def parse_layers(markdown: str, paths: Iterable[str]) -> Layers:
    """The layer table of ``markdown`` (the table whose header starts ``| layer | units |``); its globs
    are expanded against ``paths`` (repository-relative file paths)."""
    lines = markdown.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"\|\s*layer\s*\|\s*units\s*\|", line)), None)
    if start is None:
        raise AssertionError("docs/architecture.md has no layer table (a table with the header | layer | units | ...)")
    units: dict[str, Unit] = {}
    globs: dict[str, int] = {}
    paths = list(paths)
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        layer, row = int(cells[0]), cells[1]
        for name in re.findall(r"`([^`]+)`", row):
            if "/" in name:
                globs[name] = layer
                for package in sorted({_package_of(name, p) for p in paths} - {None}):
                    units[package] = Unit(package, layer, row)
            else:
                units[name] = Unit(name, layer, row)
    return Layers(units, globs)


def _package_of(pattern: str, path: str) -> str | None:
    """The package a folder glob matches for ``path`` (its last matched folder), or None."""
    want, parts = pattern.split("/"), path.split("/")
    if len(parts) > len(want) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, want)):
        return parts[len(want) - 1]
    return None


def module_name(path: str) -> tuple[str, bool]:
    """The dotted module name of ``path`` and whether it is a package's ``__init__``. Its import root is
    the folder above its top-level package (the repository for agent_gym, envs/X, trainers/X or models/X
    else)."""
    rel = path.split("/")
    top = next(i for i, part in enumerate(rel) if part.startswith("agent_gym"))
    parts = list(rel[top:])
    is_package = parts[-1] == "__init__.py"
    parts[-1] = parts[-1][: -len(".py")]
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def resolve(module: str | None, level: int, here: str, is_package: bool) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in module ``here``."""
    if level == 0:
        return module or ""
    package = here.split(".") if is_package else here.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_names(path: str, source: str) -> list[tuple[int, str, str | None]]:
    """Every ``(line, module, name)`` the file imports: ``import m`` gives ``(m, None)``, ``from m
    import n`` gives ``(m, n)`` (``n`` may be a submodule or a name of ``m``)."""
    here, is_package = module_name(path)
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.module, node.level, here, is_package)
            found += [(node.lineno, base, None if alias.name == "*" else alias.name) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value, None))
    return found


@dataclass(frozen=True)
class Edge:
    path: str
    line: int
    source: str  # the importing module
    target: str  # the imported module (the innermost module of the tree the import names)


def edges(files: Mapping[str, str]) -> list[Edge]:
    """The imports among the modules of ``files`` (path -> source text)."""
    known = {module_name(p)[0] for p in files}

    def innermost(name: str) -> str | None:
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in known:
                return ".".join(parts[:n])
        return None

    found: list[Edge] = []
    for path, source in sorted(files.items()):
        here = module_name(path)[0]
        for line, module, name in imported_names(path, source):
            target = innermost(f"{module}.{name}" if name and f"{module}.{name}" in known else module)
            if target is not None and target != here:
                found.append(Edge(path, line, here, target))
    return found


def layer_violations(files: Mapping[str, str], layers: Layers,
                     known: Mapping[tuple[str, str], str] = KNOWN_VIOLATIONS) -> list[str]:
    """``path:line: ...`` for every import the table forbids (less the ``known`` pairs), and for every
    module of ``files`` no unit holds."""
    found: dict[tuple[str, int, str], str] = {}
    for path in sorted(files):
        if layers.unit_of(module_name(path)[0]) is None:
            found[(path, 0, "")] = f"{path}: in no layer of the table (add its package to docs/architecture.md)"
    for e in edges(files):
        src, dst = layers.unit_of(e.source), layers.unit_of(e.target)
        if src is None or dst is None or src == dst or dst.layer > src.layer or (src.name, dst.name) in known:
            continue
        why = (f"units of one layer do not import each other (layer {src.layer}: {src.row})" if dst.layer == src.layer
               else f"layer {dst.layer} is above layer {src.layer}")
        found.setdefault((e.path, e.line, dst.name),
                         f"{e.path}:{e.line}: {e.source} imports {e.target}: {src.name} (layer {src.layer}) may not "
                         f"import {dst.name} (layer {dst.layer}): {why}")
    return [found[key] for key in sorted(found)]


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def module_cycles(files: Mapping[str, str]) -> list[list[str]]:
    """Import cycles among the modules of ``files``."""
    graph: dict[str, set[str]] = {module_name(p)[0]: set() for p in files}
    for e in edges(files):
        graph[e.source].add(e.target)
    return cycles(graph)


def package_cycles(files: Mapping[str, str]) -> list[list[str]]:
    """Import cycles among packages: agent_gym's subpackages and top-level modules (its ``__init__`` as
    ``agent_gym``), and every other top-level package."""

    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == "agent_gym" else parts[0]

    graph: dict[str, set[str]] = {package(module_name(p)[0]): set() for p in files}
    for e in edges(files):
        if package(e.source) != package(e.target):
            graph[package(e.source)].add(package(e.target))
    return cycles(graph)


# -- the repository ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def repository_files(root: Path = REPO) -> dict[str, str]:
    """The Python files of agent_gym and of every package the table's globs name, by relative path."""
    markdown = ARCHITECTURE.read_text(encoding="utf-8")
    candidates = {p for p in root.glob("agent_gym/**/*.py")}
    for pattern in parse_layers(markdown, []).globs:
        candidates |= set(root.glob(f"{pattern}/**/*.py"))
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8")
        for p in sorted(candidates)
        if not {"build", ".venv", "__pycache__"} & set(p.relative_to(root).parts)  # setuptools' copies
    }


def repository_layers(files: Mapping[str, str]) -> Layers:
    return parse_layers(ARCHITECTURE.read_text(encoding="utf-8"), files)


def test_the_table_names_every_package_of_the_tree():
    files = repository_files()
    layers = repository_layers(files)
    on_disk = {module_name(p)[0] for p in files}
    missing = sorted(u for u in layers.units if u not in on_disk)
    assert missing == [], f"docs/architecture.md's layer table names units that do not exist: {missing}"
    for pattern in layers.globs:
        assert any(u.layer == layers.globs[pattern] and _package_of(pattern, p) == u.name
                   for u in layers.units.values() for p in files), f"{pattern} matches no package"
    expected = {"agent_gym_verl", "agent_gym_trl", "agent_gym_openenv", "agent_gym_gsm8k", "agent_gym_python",
                "agent_gym.core", "agent_gym.rollout", "agent_gym.cli", "agent_gym.commands", "agent_gym"}
    assert expected <= set(layers.units)


def test_no_import_breaks_the_layer_table():
    files = repository_files()
    violations = layer_violations(files, repository_layers(files))
    assert violations == [], "imports the layer table forbids:\n" + "\n".join(violations)


def test_every_tolerated_violation_is_still_there():
    files = repository_files()
    layers = repository_layers(files)
    used = {(layers.unit_of(e.source), layers.unit_of(e.target)) for e in edges(files)}
    stale = [pair for pair in KNOWN_VIOLATIONS if not any(s and t and (s.name, t.name) == pair for s, t in used)]
    assert stale == [], f"no import needs these KNOWN_VIOLATIONS entries any more; delete them: {stale}"


def test_the_lazy_names_of_agent_gym_come_from_below_it():
    """``agent_gym.__getattr__`` imports its lazily re-exported names by a name the graph cannot see."""
    import agent_gym

    files = repository_files()
    layers = repository_layers(files)
    top = layers.units["agent_gym"]
    for name, module in agent_gym._LAZY.items():
        unit = layers.unit_of(module)
        assert unit is not None and unit.layer > top.layer, f"agent_gym.{name} comes from {module}, not below agent_gym"


def test_no_import_cycles():
    files = repository_files()
    assert package_cycles(files) == [], "import cycles among packages"
    assert module_cycles(files) == [], "import cycles among modules"


# -- the checker, on planted violations -------------------------------------------------------------


def planted_tree(**extra: str) -> dict[str, str]:
    """A tree with one module per unit of the table, each importing nothing, plus ``extra`` (path with
    ``__`` for ``/``, as a keyword)."""
    files = {
        "agent_gym/__init__.py": "from agent_gym.registry import register_env\n",
        "agent_gym/cli/__init__.py": "",
        "agent_gym/cli/main.py": "from agent_gym.rollout import run_episodes\nfrom agent_gym import __version__\n",
        "agent_gym/commands.py": "from agent_gym import list_envs\n",
        "agent_gym/core/__init__.py": "",
        "agent_gym/core/env.py": "from ..chat import template\nfrom agent_gym.tools import Tool\n",
        "agent_gym/chat/__init__.py": "",
        "agent_gym/chat/template.py": "def f():\n    from agent_gym.models import load_tokenizer\n",
        "agent_gym/models/__init__.py": "",
        "agent_gym/tools/__init__.py": "from agent_gym.tools.parsing import ToolCall\n",
        "agent_gym/tools/parsing.py": "from . import base\n",
        "agent_gym/tools/base.py": "",
        "agent_gym/registry/__init__.py": "from agent_gym.core import env\n",
        "agent_gym/rollout/__init__.py": "from agent_gym.core.env import AgentEnv\nfrom agent_gym import registry\n",
        "envs/toy/agent_gym_toy/__init__.py": "from agent_gym.core.env import AgentEnv\n",
        "envs/other/agent_gym_other/__init__.py": "from agent_gym.tools import Tool\n",
        "trainers/fake/agent_gym_fake/__init__.py": "from agent_gym.commands import UsageError\nfrom . import helper\n",
        "trainers/fake/agent_gym_fake/helper.py": "from agent_gym.rollout import run_episodes\n",
    }
    files.update({key.replace("__", "/"): text for key, text in extra.items()})
    return files


def planted_layers(files: Mapping[str, str]) -> Layers:
    return parse_layers(ARCHITECTURE.read_text(encoding="utf-8"), files)


def test_the_planted_tree_is_clean():
    files = planted_tree()
    assert layer_violations(files, planted_layers(files), known={}) == []
    assert module_cycles(files) == [] and package_cycles(files) == []


def test_the_checker_catches_every_kind_of_violation():
    files = planted_tree(**{
        # core imports rollout, inside a function, relatively
        "agent_gym/core/tasks.py": "def make():\n    from ..rollout import run_episodes\n",
        # core imports an env package, under TYPE_CHECKING
        "agent_gym/core/types.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agent_gym_toy\n",
        # core imports the command line (relatively, a submodule) and an adapter
        "agent_gym/core/snapshot.py": "from ..cli.main import main\nimport agent_gym_fake\n",
        # one env package imports another, with `from x import y`
        "envs/toy/agent_gym_toy/grading.py": "from agent_gym_other import answer_check\n",
        # an adapter imports the core's command line, by a submodule name
        "trainers/fake/agent_gym_fake/command.py": "from agent_gym import cli\n",
        # the command line imports an adapter, by a literal import_module
        "agent_gym/cli/plugins.py": "import importlib\nimportlib.import_module('agent_gym_fake.helper')\n",
        # the lowest layer imports the package's __init__
        "agent_gym/models/gguf.py": "from agent_gym import list_envs\n",
        # a module of agent_gym no row of the table holds
        "agent_gym/newthing.py": "",
    })
    assert layer_violations(files, planted_layers(files), known={}) == [
        "agent_gym/cli/plugins.py:2: agent_gym.cli.plugins imports agent_gym_fake.helper: agent_gym.cli (layer 1) may "
        "not import agent_gym_fake (layer 1): units of one layer do not import each other (layer 1: `agent_gym.cli`, "
        "`trainers/*/agent_gym_*`)",
        "agent_gym/core/snapshot.py:1: agent_gym.core.snapshot imports agent_gym.cli.main: agent_gym.core (layer 6) "
        "may not import agent_gym.cli (layer 1): layer 1 is above layer 6",
        "agent_gym/core/snapshot.py:2: agent_gym.core.snapshot imports agent_gym_fake: agent_gym.core (layer 6) may "
        "not import agent_gym_fake (layer 1): layer 1 is above layer 6",
        "agent_gym/core/tasks.py:2: agent_gym.core.tasks imports agent_gym.rollout: agent_gym.core (layer 6) may not "
        "import agent_gym.rollout (layer 4): layer 4 is above layer 6",
        "agent_gym/core/types.py:3: agent_gym.core.types imports agent_gym_toy: agent_gym.core (layer 6) may not "
        "import agent_gym_toy (layer 4): layer 4 is above layer 6",
        "agent_gym/models/gguf.py:1: agent_gym.models.gguf imports agent_gym: agent_gym.models (layer 8) may not import "
        "agent_gym (layer 3): layer 3 is above layer 8",
        "agent_gym/newthing.py: in no layer of the table (add its package to docs/architecture.md)",
        "envs/toy/agent_gym_toy/grading.py:1: agent_gym_toy.grading imports agent_gym_other: agent_gym_toy (layer 4) "
        "may not import agent_gym_other (layer 4): units of one layer do not import each other (layer 4: "
        "`agent_gym.rollout`, `agent_gym.wrappers`, `envs/*/agent_gym_*`)",
        "trainers/fake/agent_gym_fake/command.py:1: agent_gym_fake.command imports agent_gym.cli: agent_gym_fake "
        "(layer 1) may not import agent_gym.cli (layer 1): units of one layer do not import each other (layer 1: "
        "`agent_gym.cli`, `trainers/*/agent_gym_*`)",
    ]


def test_a_known_violation_is_tolerated_by_its_pair_only():
    files = planted_tree(**{"envs/toy/agent_gym_toy/grading.py": "import agent_gym_other\n"})
    layers = planted_layers(files)
    assert layer_violations(files, layers, known={("agent_gym_toy", "agent_gym_other"): "planted"}) == []
    assert len(layer_violations(files, layers, known={("agent_gym_other", "agent_gym_toy"): "planted"})) == 1


def test_the_checker_catches_planted_cycles():
    files = planted_tree(**{
        # a module cycle inside one package, closed by an import inside a function
        "agent_gym/tools/base.py": "def f():\n    from agent_gym.tools.parsing import ToolCall\n",
        # a package cycle: chat -> models -> chat (the env-side chat backends importing a template)
        "agent_gym/chat/template.py": "def f():\n    from agent_gym.models.backends import HFChat\n",
        "agent_gym/models/backends.py": "from agent_gym.chat.template import ChatTemplate\n",
        # a cycle within an adapter, through its package's __init__
        "trainers/fake/agent_gym_fake/helper.py": "from agent_gym_fake import helper_name\n",
    })
    assert module_cycles(files) == [
        ["agent_gym.chat.template", "agent_gym.models.backends"],
        ["agent_gym.tools.base", "agent_gym.tools.parsing"],
        ["agent_gym_fake", "agent_gym_fake.helper"],
    ]
    assert package_cycles(files) == [["agent_gym.chat", "agent_gym.models"]]


def env_package_imports(files: Mapping[str, str], layers: Layers) -> list[str]:
    """``source -> target`` for every import of one env package by another (``envs/*/agent_gym_*``)."""
    envs = {u.name for u in layers.units.values() if any(_package_of("envs/*/agent_gym_*", p) == u.name for p in files)}
    found = set()
    for e in edges(files):
        src, dst = layers.unit_of(e.source), layers.unit_of(e.target)
        if src and dst and src != dst and src.name in envs and dst.name in envs:
            found.add(f"{e.source} -> {e.target}")
    return sorted(found)


def test_no_env_package_imports_another():
    files = repository_files()
    assert env_package_imports(files, repository_layers(files)) == []


def test_an_env_package_importing_another_is_caught_without_the_table_rule():
    files = planted_tree(**{"envs/toy/agent_gym_toy/data.py": "def f():\n    from agent_gym_other.env import X\n"})
    assert env_package_imports(files, planted_layers(files)) == ["agent_gym_toy.data -> agent_gym_other"]
