"""agent_gym_verl.patches: its tables are what install() applies, against the real verl.

The docstring's tables are parsed here and compared with ``PATCHES``; then every part is installed in this
process and each target in verl is checked to be the replacement the table names, with verl's own object
where the table says it is kept. verl's module attributes are restored afterwards.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest.importorskip("verl")

from agent_gym_verl import compat, patches  # noqa: E402

_RULE = re.compile(r"^=+( +=+)+$")


def docstring_tables(doc: str) -> list[list[list[str]]]:
    """The reST simple tables of ``doc``: per table, its rows (header left out), each a list of cells; a
    cell continued on the next lines (first column blank) is joined with spaces."""
    lines = doc.splitlines()
    rules = [i for i, line in enumerate(lines) if _RULE.match(line)]
    assert len(rules) % 3 == 0, "each table has a top rule, a rule under its header and a bottom rule"
    tables = []
    for top, head, bottom in zip(rules[::3], rules[1::3], rules[2::3]):
        starts = [m.start() for m in re.finditer(r"=+", lines[top])]
        rows: list[list[str]] = []
        for line in lines[head + 1 : bottom]:
            cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
            if cells[0]:
                rows.append(cells)
            else:
                rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells)]
        tables.append(rows)
    return tables


def name_of(obj) -> str:
    """Module and qualified name of a function or class (of the Python class under a Ray actor class)."""
    obj = patches.plain_class(obj)
    return f"{obj.__module__}.{obj.__qualname__}"


def test_the_docstring_tables_are_the_inventory():
    inventory, reasons = docstring_tables(patches.__doc__)
    assert inventory == [[str(p.number), p.target, p.replacement, p.part] for p in patches.PATCHES]
    assert [row[:3] for row in reasons] == [[str(p.number), "0.7.0, 0.9.1", p.kept_at] for p in patches.PATCHES]
    assert all(len(row[3]) > 40 for row in reasons)  # every row says why
    assert [p.number for p in patches.PATCHES] == list(range(1, len(patches.PATCHES) + 1))
    assert {p.part for p in patches.PATCHES} == {*patches.PARTS, "fit"}


@pytest.fixture
def verl_restored():
    """Every attribute the tables name (targets and kept objects), put back as it was after the test."""
    from verl.models.transformers import monkey_patch  # noqa: F401  (row 3 applies to a module imported already)

    missing = object()
    saved = []
    for patch in patches.PATCHES:
        for dotted in (patch.target, patch.kept_at):
            owner_name, attribute = dotted.rsplit(".", 1)
            owner = patches.resolve(owner_name)
            if isinstance(owner, type):
                continue  # rows 7-11 live in our subclass; verl's class is never written to
            saved.append((owner, attribute, vars(owner).get(attribute, missing)))
    yield
    for owner, attribute, value in reversed(saved):
        if value is missing:
            vars(owner).pop(attribute, None)
        else:
            setattr(owner, attribute, value)


def check_applied(applied: patches.Applied) -> None:
    patch = applied.patch
    assert patches.resolve(patch.target) is applied.replacement, patch.target
    assert name_of(applied.replacement) == f"agent_gym_verl.{patch.replacement}", patch.target
    assert patches.resolve(patch.kept_at) is applied.original, patch.kept_at
    assert applied.original is not applied.replacement
    assert name_of(applied.original).startswith("verl."), (patch.target, name_of(applied.original))


def test_install_applies_every_row_of_the_table_and_keeps_verls_own(verl_restored):
    applied = patches.install()
    assert [a.patch for a in applied] == [p for p in patches.PATCHES if p.part != "fit"]
    for a in applied:
        check_applied(a)
    again = patches.install("runner", "worker", "driver")  # idempotent, in table order whatever the order asked
    assert [a.patch for a in again] == [a.patch for a in applied]
    assert [a.original for a in again] == [a.original for a in applied]  # verl's own, never ours
    for a in again:
        check_applied(a)

    verls = patches.resolve("verl.trainer.ppo.ray_trainer.compute_advantage")
    with patches.fit_scope() as scoped:
        assert [a.patch.number for a in scoped] == [12]
        check_applied(scoped[0])
        assert scoped[0].original is verls
    assert patches.resolve("verl.trainer.ppo.ray_trainer.compute_advantage") is verls  # row 12 restores itself


def test_each_part_installs_only_its_rows(verl_restored):
    for part in patches.PARTS:
        assert {a.patch.part for a in patches.install(part)} == {part}
    with pytest.raises(ValueError, match=r"unknown part 'fit'.*patches.fit_scope"):
        patches.install("fit")
    with pytest.raises(ValueError, match="pick from worker, driver, runner"):
        patches.install("trainer")


def test_the_runner_part_is_what_verls_task_runner_builds(verl_restored):
    patches.install("runner")
    runner = patches.verl_task_runner()
    built = runner.run.__globals__["RayPPOTrainer"]
    assert built is patches.agent_gym_trainer_class(compat.ray_trainer_module().RayPPOTrainer)
    assert built.__mro__[1] is compat.ray_trainer_module().RayPPOTrainer


def test_no_other_module_of_the_adapter_writes_to_verl():
    """Outside patches.py, no module assigns an attribute of (or calls setattr on) a name bound to a verl
    module: an import from verl, ``compat.task_runner_module()``/``ray_trainer_module()``,
    ``importlib.import_module(...)`` or ``sys.modules``."""
    import agent_gym_verl

    folder = Path(agent_gym_verl.__file__).parent
    module_makers = {"task_runner_module", "ray_trainer_module", "import_module"}
    offences = []
    for path in sorted(folder.glob("*.py")):
        if path.name == "patches.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        verl_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                verl_names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "verl"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "verl":
                verl_names |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                func = node.value.func
                if isinstance(func, ast.Attribute) and (
                    func.attr in module_makers or (func.attr == "get" and ast.unparse(func.value) == "sys.modules")
                ):
                    verl_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
            for target in targets:
                root = target
                while isinstance(root, ast.Attribute):
                    root = root.value
                if target is not root and isinstance(root, ast.Name) and root.id in verl_names:
                    offences.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr":
                if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in verl_names:
                    offences.append(f"{path.name}:{node.lineno}")
    assert offences == []


def test_the_fence_catches_the_patch_it_is_for(tmp_path, monkeypatch):
    """The check above flags the assignment fast_logprobs used to make to verl's module."""
    import agent_gym_verl

    fake = tmp_path / "agent_gym_verl"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "hook.py").write_text("from verl.utils import torch_functional as _tf\n_tf.logprobs_from_logits_v2 = len\n")
    monkeypatch.setattr(agent_gym_verl, "__file__", str(fake / "__init__.py"))
    with pytest.raises(AssertionError, match=r"hook\.py:2"):
        test_no_other_module_of_the_adapter_writes_to_verl()


@pytest.mark.parametrize("faked", ["0.8.0", "0.10.0", "0.6.1", "1.0.0", "dev"])
def test_a_verl_outside_the_tested_series_fails_loudly(faked):
    """compat checks the installed verl's version before it imports verl; the check itself, on faked versions."""
    with pytest.raises(compat.UnsupportedVerl) as raised:
        compat.check_verl_version(faked)
    assert str(raised.value) == (
        "agent_gym_verl is tested with verl 0.7.0 and 0.9.1 and patches verl's internals (agent_gym_verl/compat.py, "
        f"patches.py), but verl {faked} is installed: pip install 'agent-r1-gym-verl[verl09]' (or [verl07])"
    )


def test_the_tested_series_pass_and_the_installed_one_is_among_them():
    assert compat.check_verl_version("0.7.0") == (0, 7)
    assert compat.check_verl_version("0.9.1.dev0") == (0, 9)
    assert compat.VERL_SERIES == compat.check_verl_version(compat.VERL_VERSION)
