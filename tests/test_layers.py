"""The import layers: the core never imports upward (its command line, the trainer adapters), adapters
never import the core's command line, env packages never import either.

The graph is read with ``ast`` from the source files, so it covers every import a file can run: at
the top and inside functions, ``import x`` and ``from x import y`` (``from agent_gym import cli`` is
an import of ``agent_gym.cli``), relative imports resolved against the file's package, and
``importlib.import_module("...")`` / ``__import__("...")`` with a literal name.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: "adapters" in a rule: the top-level package of every trainers/*/agent_gym_* folder.
ADAPTERS = "adapters"

#: The layering rules: (layer, its files (globs from the repository root; a file in two layers' globs
#: belongs to the first), the modules it must not import, why).
LAYERS: list[tuple[str, tuple[str, ...], tuple[str, ...], str]] = [
    ("cli", ("agent_gym/cli/**/*.py",), (ADAPTERS,),
     "the core CLI finds adapter commands through the agent_gym.commands entry points"),
    ("core", ("agent_gym/**/*.py",), ("agent_gym.cli", ADAPTERS),
     "the core sits below its command line and below the adapters (agent_gym.cli_support is the CLI's shared part)"),
    ("adapter", ("trainers/*/agent_gym_*/**/*.py",), ("agent_gym.cli",),
     "an adapter builds its commands from agent_gym.cli_support, not from the core's command line"),
    ("env", ("envs/*/agent_gym_*/**/*.py",), ("agent_gym.cli", ADAPTERS),
     "an env package depends on the core alone"),
]


def adapter_packages(root: Path) -> list[str]:
    return sorted({p.name for p in root.glob("trainers/*/agent_gym_*") if p.is_dir()})


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted module name of ``path`` and whether it is a package's ``__init__``. Its import root is
    the folder above its top-level package (the repository for agent_gym, trainers/X or envs/X else)."""
    rel = path.relative_to(root).parts
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


def imports(root: Path, path: Path) -> list[tuple[int, str]]:
    """Every (line, absolute module name) ``path`` imports; ``from m import n`` gives ``m`` and ``m.n``
    (``n`` may be a submodule)."""
    here, is_package = module_name(root, path)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.module, node.level, here, is_package)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def within(name: str, module: str) -> bool:
    """``name`` is ``module`` or one of its submodules (``agent_gym.cli_support`` is not in ``agent_gym.cli``)."""
    return name == module or name.startswith(module + ".")


def layered_files(root: Path) -> dict[str, list[Path]]:
    """The files of each layer of :data:`LAYERS` under ``root``."""
    seen: set[Path] = set()
    files: dict[str, list[Path]] = {}
    for layer, globs, _, _ in LAYERS:
        mine = sorted({p for pattern in globs for p in root.glob(pattern)} - seen)
        mine = [p for p in mine if "build" not in p.relative_to(root).parts]  # setuptools' copies
        seen.update(mine)
        files[layer] = mine
    return files


def upward_imports(root: Path) -> list[str]:
    """``file:line: <layer> imports <module> (rule: ...)`` for every import :data:`LAYERS` forbids."""
    adapters = adapter_packages(root)
    files = layered_files(root)
    found: dict[tuple[str, int, str], str] = {}  # one report per (file, line, forbidden module)
    for layer, _, forbidden, why in LAYERS:
        banned = [m for entry in forbidden for m in (adapters if entry == ADAPTERS else [entry])]
        for path in files[layer]:
            own = module_name(root, path)[0].split(".")[0]
            rel = str(path.relative_to(root))
            for line, name in imports(root, path):
                for module in banned:
                    if within(name, module) and not within(own, module):
                        found.setdefault((rel, line, module), f"{rel}:{line}: {layer} imports {name} "
                                         f"(rule: {layer} must not import {module}: {why})")
    return [found[key] for key in sorted(found)]


def test_no_layer_imports_upward():
    files = layered_files(REPO)
    assert all(files.values()), {layer: len(paths) for layer, paths in files.items()}  # every glob finds files
    assert {"agent_gym_verl", "agent_gym_trl", "agent_gym_openenv"} <= set(adapter_packages(REPO))
    violations = upward_imports(REPO)
    assert violations == [], "upward imports:\n" + "\n".join(violations)


def test_the_checker_catches_planted_upward_imports(tmp_path):
    def plant(rel: str, text: str) -> None:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    plant("agent_gym/__init__.py", "")
    plant("agent_gym/cli/__init__.py", "")
    plant("agent_gym/cli/main.py", "def f():\n    import agent_gym_fake.command\n")
    plant("agent_gym/cli_support.py", "")
    plant("agent_gym/core/__init__.py", "from .. import cli_support\n")  # allowed: the CLI's shared part
    plant("agent_gym/core/planted.py", "import os\n\n\ndef late():\n    from ..cli.main import f\n    return f\n")
    plant("agent_gym/core/named.py", "from agent_gym import cli\n")
    plant("agent_gym/core/dynamic.py", "import importlib\nimportlib.import_module('agent_gym_fake')\n")
    plant("trainers/fake/agent_gym_fake/__init__.py", "from agent_gym.cli_support import UsageError\n")
    plant("trainers/fake/agent_gym_fake/command.py", "from . import helper\nfrom agent_gym.cli.main import main\n")
    plant("trainers/fake/agent_gym_fake/helper.py", "import agent_gym_fake\n")  # its own package: fine
    plant("envs/toy/agent_gym_toy/__init__.py", "if True:\n    import agent_gym_fake as f\n")
    assert upward_imports(tmp_path) == [
        "agent_gym/cli/main.py:2: cli imports agent_gym_fake.command (rule: cli must not import agent_gym_fake: "
        "the core CLI finds adapter commands through the agent_gym.commands entry points)",
        "agent_gym/core/dynamic.py:2: core imports agent_gym_fake (rule: core must not import agent_gym_fake: "
        "the core sits below its command line and below the adapters (agent_gym.cli_support is the CLI's shared part))",
        "agent_gym/core/named.py:1: core imports agent_gym.cli (rule: core must not import agent_gym.cli: "
        "the core sits below its command line and below the adapters (agent_gym.cli_support is the CLI's shared part))",
        "agent_gym/core/planted.py:5: core imports agent_gym.cli.main (rule: core must not import agent_gym.cli: "
        "the core sits below its command line and below the adapters (agent_gym.cli_support is the CLI's shared part))",
        "envs/toy/agent_gym_toy/__init__.py:2: env imports agent_gym_fake (rule: env must not import agent_gym_fake: "
        "an env package depends on the core alone)",
        "trainers/fake/agent_gym_fake/command.py:2: adapter imports agent_gym.cli.main (rule: adapter must not import "
        "agent_gym.cli: an adapter builds its commands from agent_gym.cli_support, not from the core's command line)",
    ]
