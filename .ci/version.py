#!/usr/bin/env python3
"""The one version of every distribution of this repository, checked or set.

    python .ci/version.py            # print the version; exit 1 naming every place that disagrees
    python .ci/version.py 0.3.0      # set it everywhere (then commit the files it names)

The source is ``agent_gym.__version__`` (agent_gym/__init__.py); the core's pyproject reads it
(``dynamic = ["version"]``). Each of the other distributions must build from its own sdist, which
holds nothing outside its folder, so each states the same version itself: in its pyproject's
``[project] version``, or, where the package has a ``__version__`` (the three adapters), in that
line, which its pyproject reads as the core's does. Every requirement of one of these distributions
on another (``agent-r1-gym>=``, ``agent-r1-gym-gsm8k>=``, ``agent-r1-gym[hf]>=`` ...) is ``>=`` that
same version: the distributions are released together. tests/test_versions.py runs the check.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = Path("agent_gym/__init__.py")

_VERSION_LINE = re.compile(r'^(__version__\s*=\s*")([^"]+)(")', re.M)
_PROJECT_VERSION = re.compile(r'^(version\s*=\s*")([^"]+)(")', re.M)
_DYNAMIC_ATTR = re.compile(r'^version\s*=\s*\{\s*attr\s*=\s*"([\w.]+)\.__version__"\s*\}', re.M)
# A requirement on one of the project's own distributions, inside a TOML string:
# "agent-r1-gym>=V", "agent-r1-gym-gsm8k>=V", "agent-r1-gym[hf]>=V".
_OWN_PIN = re.compile(r'("agent-r1-gym(?:-[a-z0-9-]+)?(?:\[[\w,-]+\])?)([<>=!~]=?)([^",;\s]+)(")')


@dataclass(frozen=True)
class Place:
    """A file and what it says: a version (``kind`` "version") or a pin (``kind`` "pin", ``text`` the requirement)."""

    path: Path
    kind: str
    text: str
    version: str


def pyprojects(repo: Path = REPO) -> list[Path]:
    """Every pyproject.toml git tracks, relative to ``repo``."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "*pyproject.toml"], check=True, capture_output=True, text=True).stdout
    return sorted(Path(p) for p in out.split())


def _project_table(text: str) -> tuple[int, int]:
    """The [project] table's character span (to its next table header)."""
    start = text.index("[project]\n")
    nxt = re.compile(r"^\[", re.M).search(text, start + len("[project]\n"))
    return start, nxt.start() if nxt else len(text)


def version_file(pyproject: Path, repo: Path = REPO) -> Path:
    """Where ``pyproject``'s version is written: the pyproject itself, or the module its dynamic version reads."""
    text = (repo / pyproject).read_text()
    match = _DYNAMIC_ATTR.search(text)
    if match is None:
        return pyproject
    return pyproject.parent / Path(*match.group(1).split(".")) / "__init__.py"


def places(repo: Path = REPO) -> list[Place]:
    """Every version and every own-distribution pin of the repository."""
    found: list[Place] = []
    for pyproject in pyprojects(repo):
        text = (repo / pyproject).read_text()
        where = version_file(pyproject, repo)
        if where == pyproject:
            start, end = _project_table(text)
            match = _PROJECT_VERSION.search(text, start, end)
            if match is None:
                raise SystemExit(f"{pyproject}: no version in [project] and no dynamic version read from a __version__")
            found.append(Place(pyproject, "version", match.group(0), match.group(2)))
        else:
            match = _VERSION_LINE.search((repo / where).read_text())
            if match is None:
                raise SystemExit(f"{where}: no __version__ = \"...\" line (read by {pyproject})")
            found.append(Place(where, "version", match.group(0), match.group(2)))
        for pin in _OWN_PIN.finditer(text):
            found.append(Place(pyproject, "pin", pin.group(1)[1:] + pin.group(2) + pin.group(3), pin.group(2) + pin.group(3)))
    return found


def current(repo: Path = REPO) -> str:
    match = _VERSION_LINE.search((repo / SOURCE).read_text())
    if match is None:
        raise SystemExit(f"{SOURCE}: no __version__ line")
    return match.group(2)


def problems(repo: Path = REPO) -> list[str]:
    """What disagrees with the source's version, one line each (empty: all agree)."""
    version = current(repo)
    out = []
    for place in places(repo):
        want = version if place.kind == "version" else ">=" + version
        if place.version != want:
            out.append(f"{place.path}: {place.text!r}, want {want!r}")
    return out


def set_version(new: str, repo: Path = REPO) -> list[Path]:
    """Write ``new`` into every place (the source, versions, pins); returns the files changed."""
    if not re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", new):
        raise SystemExit(f"{new!r} is not a PEP 440 release version (like 0.3.0 or 0.3.0.dev0)")
    changed = []
    files = {repo / SOURCE} | {repo / p.path for p in places(repo)}
    for path in sorted(files):
        text = path.read_text()
        if path.name == "pyproject.toml":
            start, end = _project_table(text)
            head = text[:start] + _PROJECT_VERSION.sub(lambda m: m.group(1) + new + m.group(3), text[start:end], count=1)
            text = _OWN_PIN.sub(lambda m: m.group(1) + ">=" + new + m.group(4), head + text[end:])
        else:
            text = _VERSION_LINE.sub(lambda m: m.group(1) + new + m.group(3), text, count=1)
        if text != path.read_text():
            path.write_text(text)
            changed.append(path.relative_to(repo))
    return changed


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    if argv:
        for path in set_version(argv[0]):
            print(f"set {argv[0]} in {path}")
    bad = problems()
    for line in bad:
        print(line, file=sys.stderr)
    if bad:
        print(f"{len(bad)} places disagree with {SOURCE}'s {current()}; `python .ci/version.py {current()}` sets them", file=sys.stderr)
        return 1
    print(f"{current()}: {len(pyprojects())} distributions, {sum(p.kind == 'pin' for p in places())} pins on each other")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
