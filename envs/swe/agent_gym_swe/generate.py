"""Make SWE tasks from packaged projects, SWE-smith style: mutate, run the tests, keep what they catch.

    python -m agent_gym_swe.generate vendor SDIST.tar.gz ... --data DIR   # trim sdists into DIR/repos/
    python -m agent_gym_swe.generate tasks --repo inflection-0.5.1 --mutations 40 --out tasks.jsonl.gz

``vendor`` keeps a project's source, tests, licence and test configuration (never its docs or
build files), refuses a licence that is not permissive (MIT, BSD, Apache-2.0, ISC, PSF), and records
name, version, licence, source file and its sha256 in ``repos.json``. ``tasks`` runs the project's
tests on the pristine repository (four times: a test function with an id or outcome that is not the
same in all four, such as a parametrize over a set, is never listed), then on each mutated copy
(:mod:`agent_gym_swe.mutate`), both in the env's own sandbox through the env's own grading path. A
mutation is kept when at least one test that passes on the pristine repository fails (FAIL_TO_PASS)
and every other one still passes (PASS_TO_PASS); a run that times out is dropped. Pairs of kept mutations are combined into harder
tasks and validated again. The problem statement is written from the failing tests' error lines
(never their names). It prints the validation rate and writes the tasks as JSONL (gzipped for ``.gz``).
"""

from __future__ import annotations

import argparse
import asyncio
import email.parser
import gzip
import hashlib
import io
import json
import os
import random
import re
import sys
import tarfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from agent_gym_swe.mutate import Mutation, apply_mutation, mutation_sites
from agent_gym_swe.patches import make_patch
from agent_gym_swe.tasks import RepoSpec, SWETask, packaged_repos, tar_files, task_files

__all__ = ["difficulty_of", "generate_tasks", "main", "problem_statement", "vendor_sdist"]

PERMISSIVE = {"MIT": ("permission is hereby granted, free of charge",), "BSD": ("redistribution and use in source and binary forms",),
              "Apache-2.0": ("apache license",), "ISC": ("permission to use, copy, modify, and/or distribute",),
              "PSF": ("python software foundation",)}
_KEEP_TOP = ("LICENSE", "LICENSE.txt", "LICENSE.rst", "COPYING", "README.rst", "README.md", "pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini")


def _licence(text: str) -> str | None:
    low = " ".join(text.lower().split())
    for name, marks in PERMISSIVE.items():
        if any(mark in low for mark in marks):
            return name
    return None


def vendor_sdist(sdist: str | os.PathLike[str], data: str | os.PathLike[str]) -> RepoSpec:
    """Trim ``sdist`` (a ``.tar.gz`` from ``pip download --no-binary :all: --no-deps``) into
    ``data/repos/<name>-<version>.tar.gz`` and add it to ``data/repos.json``."""
    raw = Path(sdist).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        members = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                   if m.isfile() and "/" in m.name}
    meta = email.parser.Parser().parsestr(members.get("PKG-INFO", b"").decode("utf-8", "replace"))
    name, version = meta.get("Name") or "", meta.get("Version") or ""
    if not name or not version:
        raise ValueError(f"{sdist}: no PKG-INFO with a name and version")
    licence_file = next((k for k in ("LICENSE", "LICENSE.txt", "LICENSE.rst", "COPYING") if k in members), None)
    licence = _licence(members[licence_file].decode("utf-8", "replace")) if licence_file else None
    if licence is None:
        raise ValueError(f"{sdist}: no permissive licence found ({licence_file or 'no LICENSE file'}); only {sorted(PERMISSIVE)} are vendored")
    src = "src/" if any(k.startswith("src/") for k in members) else ""
    packages = sorted({k[len(src):].split("/")[0] for k in members if k.startswith(src) and k.endswith(".py") and "/" in k[len(src):]
                       and not k[len(src):].startswith(("tests/", "test/", "docs/"))})
    keep = {}
    for path, content in members.items():
        top = path.split("/")[0]
        if path in _KEEP_TOP or top in ("tests", "test") or (src and path.startswith("src/") and not path.endswith(".egg-info")) \
                or (not src and (top in packages or (top.endswith(".py") and top.startswith("test")))):
            if ".egg-info" not in path and not path.endswith((".pyc", ".c", ".so")):
                keep[path] = content
    globs = [f"{src}{p}/*" for p in packages] or ["*.py"]
    spec = RepoSpec(name=name, version=version, license=licence, source=Path(sdist).name, sha256=hashlib.sha256(raw).hexdigest(),
                    homepage=meta.get("Home-page") or next((v.split(",", 1)[1].strip() for v in meta.get_all("Project-URL") or []
                                                            if v.lower().startswith(("source", "homepage", "repository"))), ""),
                    test_command="python -m pytest", pythonpath=src.rstrip("/"), source_globs=tuple(globs))
    out = Path(data)
    (out / "repos").mkdir(parents=True, exist_ok=True)
    (out / "repos" / f"{spec.key}.tar.gz").write_bytes(tar_files(keep.items()))
    index = out / "repos.json"
    specs = [s for s in (json.loads(index.read_text()) if index.exists() else []) if f"{s['name']}-{s['version']}" != spec.key]
    specs.append({**spec.__dict__, "source_globs": list(spec.source_globs)})
    index.write_text(json.dumps(sorted(specs, key=lambda s: s["name"]), indent=1) + "\n")
    return spec


# -- tasks -------------------------------------------------------------------------------------------------

_NAME = re.compile(r"\btest\w*|\bTest\w+")


def problem_statement(spec: RepoSpec, errors: Sequence[Sequence[str]], failing: int) -> str:
    """An issue written from the failing tests' error lines (``E`` lines of pytest's report): what
    went wrong, never which test saw it."""
    blocks = []
    for lines in errors[:2]:
        cleaned = textwrap.dedent("\n".join(_NAME.sub("<check>", ln) for ln in lines if ln.strip())).splitlines()[:12]
        if cleaned:
            blocks.append("\n".join(cleaned))
    first = blocks[0].splitlines()[0] if blocks else "an error"
    kind = first.split(":", 1)[0].strip() if ":" in first else "AssertionError"
    what = "returns wrong results" if kind == "AssertionError" else f"raises {kind}"
    text = [f"{spec.name} {spec.version} {what} where it used to work.", "", "Running the project's tests shows:", ""]
    for block in blocks:
        text += ["```", block, "```", ""]
    more = failing - len(blocks)
    if more > 0:
        text.append(f"{'One more check fails' if more == 1 else f'{more} more checks fail'} in the same way or a similar one.")
    text.append("Please find the cause in the library and fix it.")
    return "\n".join(text).strip()


def difficulty_of(files: int, mutations: int, failing: int) -> str:
    """``hard``: the bug spans several files; ``medium``: one file, but several mutations or more than
    three failing tests; ``easy``: one change that one to three tests catch."""
    if files > 1:
        return "hard"
    if mutations > 1 or failing > 3:
        return "medium"
    return "easy"


#: Runs of the pristine repository whose passing tests must agree (each of a hash-ordered pair of
#: parameters comes out in the same order four times in one case of eight).
BASELINE_RUNS = 4


class _Runner:
    """Runs a repository's tests in the SWE env's sandbox through its own grading path."""

    def __init__(self, concurrency: int, test_timeout_s: float):
        from agent_gym.sandbox.tool import resolve_sandbox
        from agent_gym_swe.env import Workspace, default_sandbox

        self.sandbox = resolve_sandbox(default_sandbox(prefork=0))
        self.Workspace = Workspace
        self.test_timeout_s = test_timeout_s
        self.limit = asyncio.Semaphore(concurrency)

    async def run(self, task: SWETask) -> dict[str, Any]:
        async with self.limit:
            ws = self.Workspace(self.sandbox, command_timeout_s=30, test_timeout_s=self.test_timeout_s, output_chars=8000)
            ws.start(task)
            try:
                probe = SWETask.from_dict({**task.to_dict(), "FAIL_TO_PASS": ["-"]})  # so that the summary is asked for
                ws.task = probe
                return await ws.acall("grade", *ws.grade_args())
            finally:
                ws.close()


def _base_task(spec: RepoSpec) -> dict[str, Any]:
    return {"repo": spec.key, "test_command": spec.test_command, "pythonpath": spec.pythonpath, "source_globs": list(spec.source_globs)}


async def _generate(spec: RepoSpec, mutations: int, combos: int, seed: int, concurrency: int, test_timeout_s: float,
                    log: Any) -> tuple[list[SWETask], Counter[str]]:
    runner = _Runner(concurrency, test_timeout_s)
    base = _base_task(spec)
    pristine = task_files(SWETask.from_dict({**base, "instance_id": "pristine", "problem_statement": "-"}))
    probe = SWETask.from_dict({**base, "instance_id": "pristine", "problem_statement": "-"})
    # Several runs of the pristine code: a test whose id or outcome differs between them would be listed
    # as failing (or passing) by chance, and no fix could resolve a task that lists it. pytest numbers
    # the parameters it cannot print by position, and a parametrize over a set is in hash order: with
    # Python's random string hashing and ASLR (hash(None) is an address before 3.12) isodate's
    # `test_format[4-1985-expected12-%Y]` is `...expected13...` in the next run. Such tests are left out.
    runs = await asyncio.gather(*(runner.run(probe) for _ in range(BASELINE_RUNS)))
    passed = [{t for t, o in run["outcomes"].items() if o == "passed"} for run in runs]
    # by test function: of ids that move, a few land on the same name in every run by chance
    unstable = {_function(t) for t in set.union(*passed) - set.intersection(*passed)}
    passing = sorted(t for t in set.intersection(*passed) if _function(t) not in unstable)
    if not passing:
        raise RuntimeError(f"{spec.key}: no test passes on the pristine repository: {runs[0].get('tail', '')[-800:]}")
    rng = random.Random(f"{seed}:{spec.key}")
    sources = sorted(p for p in pristine if p.endswith(".py") and any(_glob(p, g) for g in spec.source_globs)
                     and not os.path.basename(p).startswith("test") and os.path.basename(p) != "conftest.py")
    sites = [(path, m) for path in sources for m in mutation_sites(pristine[path].decode("utf-8"))]
    rng.shuffle(sites)
    counts: Counter[str] = Counter()
    if unstable:
        counts["unstable_tests"] = max(sum(_function(t) in unstable for t in p) for p in passed)  # tests, not runs
    # by attempt, not by completion: the pairs drawn from the kept singles, and the task file, are
    # then the same on every run
    kept: dict[int, tuple[dict[str, bytes], list[tuple[str, Mutation]], dict[str, Any]]] = {}

    async def attempt(index: int, changes: list[tuple[str, Mutation]]) -> None:
        files = dict(pristine)
        for path, m in changes:
            try:
                files[path] = apply_mutation(files[path].decode("utf-8"), m).encode("utf-8")
            except ValueError:
                counts["not_applicable"] += 1
                return
        counts["run"] += 1
        task = SWETask.from_dict({**base, "instance_id": "probe", "problem_statement": "-", "bug_patch": make_patch(pristine, files)})
        result = await runner.run(task)
        outcomes = result["outcomes"]
        failing = [t for t in passing if outcomes.get(t) != "passed"]
        if result["status"] is None:
            counts["timeout"] += 1
        elif not failing:
            counts["no_test_fails"] += 1
        elif not outcomes:
            counts["no_report"] += 1
        else:
            counts["valid"] += 1
            kept[index] = (files, changes, {"failing": failing, "errors": result.get("errors") or []})
        log(f"{spec.key}: {counts['run']} run, {counts['valid']} valid")

    singles = sites[:mutations]
    await asyncio.gather(*(attempt(n, [s]) for n, s in enumerate(singles)))
    single_kept = [kept[n] for n in sorted(kept)]
    pairs: list[list[tuple[str, Mutation]]] = []
    for _ in range(combos * 4):
        if len(single_kept) < 2 or len(pairs) >= combos:
            break
        a, b = rng.sample(single_kept, 2)
        (pa, ma), (pb, mb) = a[1][0], b[1][0]
        if (pa, ma.lineno) != (pb, mb.lineno) and abs(ma.lineno - mb.lineno) > 3 or pa != pb:
            pairs.append([a[1][0], b[1][0]] if (pa, ma.lineno) > (pb, mb.lineno) else [b[1][0], a[1][0]])
    await asyncio.gather(*(attempt(len(singles) + n, p) for n, p in enumerate(pairs)))
    tasks = []
    for files, changes, found in (kept[n] for n in sorted(kept)):
        failing = found["failing"]
        touched = sorted({p for p, _ in changes})
        instance_id = f"{spec.key}__{hashlib.sha256(json.dumps([(p, m.__dict__) for p, m in changes], sort_keys=True).encode()).hexdigest()[:10]}"
        tasks.append(SWETask.from_dict({
            **base,
            "instance_id": instance_id,
            "problem_statement": problem_statement(spec, found["errors"], len(failing)),
            "bug_patch": make_patch(pristine, files),
            "patch": make_patch(files, pristine),
            "FAIL_TO_PASS": failing,
            "PASS_TO_PASS": [t for t in passing if t not in failing],
            "difficulty": difficulty_of(len(touched), len(changes), len(failing)),
            "meta": {"mutations": [{"file": p, **m.__dict__} for p, m in changes], "license": spec.license, "source": spec.source},
        }))
    runner.sandbox.close()
    return tasks, counts


def _function(test_id: str) -> str:
    """``path::Class::test`` of a test id, without its parameters."""
    return test_id.split("[", 1)[0]


def _glob(path: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatch(path, pattern)


def generate_tasks(repos: Iterable[str], *, mutations: int = 40, combos: int = 10, seed: int = 0, concurrency: int = 2,
                   test_timeout_s: float = 120.0, log: Any = None) -> tuple[list[SWETask], Counter[str]]:
    """Validated tasks of the packaged ``repos`` (keys of :func:`packaged_repos`) and the counts of
    every outcome (``run``, ``valid``, ``no_test_fails``, ``timeout``, ...)."""
    specs = packaged_repos()
    total: Counter[str] = Counter()
    tasks: list[SWETask] = []
    for key in repos:
        if key not in specs:
            raise KeyError(f"no packaged repository {key!r}; packaged: {sorted(specs)}")
        found, counts = asyncio.run(_generate(specs[key], mutations, combos, seed, concurrency, test_timeout_s, log or (lambda s: None)))
        tasks += found
        total.update(counts)
    return tasks, total


def write_tasks(tasks: Sequence[SWETask], out: str | os.PathLike[str]) -> None:
    text = "".join(json.dumps(t.to_dict(), sort_keys=True) + "\n" for t in tasks)
    if str(out).endswith(".gz"):
        with gzip.GzipFile(out, "wb", mtime=0) as f:
            f.write(text.encode("utf-8"))
    else:
        Path(out).write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent_gym_swe.generate", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("vendor", help="trim sdists into a data folder (repos/*.tar.gz, repos.json)")
    v.add_argument("sdists", nargs="+", help="sdist files (.tar.gz)")
    v.add_argument("--data", required=True, help="the data folder to write")
    t = sub.add_parser("tasks", help="mutate packaged repositories and keep the mutations the tests catch")
    t.add_argument("--repo", action="append", default=None, help="a packaged repository (repeatable; default all)")
    t.add_argument("--mutations", type=int, default=40, help="single mutations tried per repository (default 40)")
    t.add_argument("--combos", type=int, default=10, help="pairs of kept mutations tried per repository (default 10)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--concurrency", type=int, default=2, help="test runs at once (default 2)")
    t.add_argument("--out", required=True, help="the task file (.jsonl or .jsonl.gz)")
    args = parser.parse_args(argv)
    if args.command == "vendor":
        for sdist in args.sdists:
            try:
                spec = vendor_sdist(sdist, args.data)
            except (OSError, ValueError) as exc:
                parser.error(str(exc))
            print(f"{spec.key}: {spec.license}, sources {', '.join(spec.source_globs)}, pythonpath {spec.pythonpath or '.'}")
        return 0
    if args.mutations < 1 or args.combos < 0 or args.concurrency < 1:
        parser.error("--mutations and --concurrency must be >= 1, --combos >= 0")
    repos = args.repo or sorted(packaged_repos())
    t0 = time.monotonic()
    try:
        tasks, counts = generate_tasks(repos, mutations=args.mutations, combos=args.combos, seed=args.seed, concurrency=args.concurrency,
                                       log=lambda s: print(s, file=sys.stderr) if os.environ.get("AGENT_GYM_SWE_VERBOSE") else None)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    write_tasks(tasks, args.out)
    rate = counts["valid"] / max(1, counts["run"])
    by = Counter(t.difficulty for t in tasks)
    print(f"validated {counts['valid']} of {counts['run']} mutations ({rate:.1%}) in {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in ("run", "valid")))
    print(f"wrote {len(tasks)} tasks to {args.out}: " + ", ".join(f"{d} {by.get(d, 0)}" for d in ("easy", "medium", "hard")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
