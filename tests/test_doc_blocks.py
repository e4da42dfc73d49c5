"""Every code block of README.md and docs/*.md that claims to run (```python doctest, ```bash doctest,
```python doctest-with-serve: tests/doc_blocks.py) runs as written, each in a fresh temporary folder with
this virtualenv's python and agent-gym on PATH, a server block's command really serving beside it; so a
documented example cannot drift from the command or API it documents.

Blocks that need an optional package (``needs=``) are skipped here, with the package in the reason, and
run where it is installed: .ci/openenv.sh runs this file filtered to docs/openenv.md after installing
trainers/openenv (``python -m pytest tests/test_doc_blocks.py -k docs/openenv.md``), with
AGENT_GYM_DOC_BLOCKS_NO_SKIP=1 so that a block it cannot run fails there instead of skipping.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("doc_blocks", Path(__file__).with_name("doc_blocks.py"))
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules["doc_blocks"] = doc_blocks  # dataclasses look their module up by name
_spec.loader.exec_module(doc_blocks)

BLOCKS = doc_blocks.all_blocks()
RUNNABLE = [b for b in BLOCKS if b.runs]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in RUNNABLE])
def test_doc_block_runs(block, tmp_path):
    reason = doc_blocks.skip_reason(block)
    if reason and os.environ.get("AGENT_GYM_DOC_BLOCKS_NO_SKIP"):
        pytest.fail(f"{block.id}: {reason}; AGENT_GYM_DOC_BLOCKS_NO_SKIP is set, where it must run")
    if reason:
        pytest.skip(f"{block.id}: {reason}")
    doc_blocks.run_block(block, tmp_path)


def test_every_marker_parses():
    """A misspelt marker would silently make a block claim nothing: every info string must parse."""
    errors = [b.error for b in BLOCKS if b.error]
    assert not errors, "\n".join(errors)


#: Blocks written before this check whose pages' authors have yet to mark them. The check fails for an
#: id here once it is marked or gone, so the set only shrinks: mark the block, then delete its id.
NOT_YET_MARKED: set[str] = set()


def test_python_blocks_using_agent_gym_claim_to_run_or_say_why_not():
    """A python block that imports agent_gym (or an adapter) is either run (a doctest marker) or says
    why it cannot be (```python no-run: REASON): a new example cannot go unchecked by accident."""
    unmarked = {b.id for b in BLOCKS if b.imports_agent_gym() and b.marker is None}
    new = sorted(unmarked - NOT_YET_MARKED)
    assert not new, (
        "python blocks importing agent_gym with neither a doctest marker nor `no-run: REASON` "
        "(tests/doc_blocks.py explains both): " + ", ".join(new))
    stale = sorted(NOT_YET_MARKED - unmarked)
    assert not stale, f"marked or moved, so delete from NOT_YET_MARKED in {__file__}: " + ", ".join(stale)


def test_the_readme_example_and_the_openenv_server_pairs_are_found():
    """The extractor finds what these tests exist for: the README's env example and each OpenEnv
    client block linked to the serve command the page gives."""
    ids = {b.id: b for b in RUNNABLE}
    readme = [b for b in RUNNABLE if b.page == "README.md" and b.language == "python"]
    assert readme and "gym.make(" in readme[0].code
    served = [b for b in RUNNABLE if b.page == "docs/openenv.md" and b.marker == "doctest-with-serve"]
    assert len(served) >= 2
    for block in served:
        assert block.server is not None and block.server.page == "docs/openenv.md"
        assert block.server.code.lstrip().startswith("agent-gym serve ")
        assert block.id in ids


def test_markers_and_port_substitution(tmp_path):
    """The extractor's rules on a page of its own: markers, options, the serve link, bad info strings,
    claimed prints, and the port rewrite applied to a command and a client alike."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash doctest-serve\nagent-gym serve X --split test --port 8000   # the test split\n```\n"
        "```python doctest-with-serve needs=no_such_module_xyz timeout=30\nurl = 'http://127.0.0.1:8000'\n"
        "print(1 + 1)   # 2\n```\n"
        "```python no-run\nimport agent_gym\n```\n"
        "```python doctset\nx = 1\n```\n"
        "```python no-run: a sketch of your own engine\nimport agent_gym\n```\n"
        "```json\n{}\n```\n", encoding="utf-8")
    serve, client, bare, typo, sketch, data = doc_blocks.extract_blocks(page, tmp_path)
    assert (serve.marker, serve.line, client.marker, client.line) == ("doctest-serve", 1, "doctest-with-serve", 4)
    assert client.server is serve and client.needs == ("no_such_module_xyz",) and client.timeout_s == 30
    assert doc_blocks.serve_port(serve) == 8000
    assert doc_blocks.skip_reason(client) == "needs no_such_module_xyz (not importable here)"
    assert "no-run` needs a reason" in bare.error and "unknown marker 'doctset'" in typo.error
    assert (sketch.marker, sketch.reason, data.marker, data.error) == ("no-run", "a sketch of your own engine", None, "")
    assert doc_blocks.expected_prints(client.code) == ["2"]
    assert doc_blocks.check_prints(client.code, "noise\n2\n") is None
    assert "claims the output line '2'" in doc_blocks.check_prints(client.code, "22\n")
    assert doc_blocks.with_port(serve.code, 8000, 41234) == (
        "agent-gym serve X --split test --port 41234   # the test split\n")
    assert doc_blocks.with_port(client.code, 8000, 41234).startswith("url = 'http://127.0.0.1:41234'")
