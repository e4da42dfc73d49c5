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
_FOLLOWED = {id(b.previous) for b in BLOCKS if b.continues and b.previous is not None}
#: One test per runnable block, but a block that a `continues` block follows runs in that one's test.
RUNNABLE = [b for b in BLOCKS if b.runs and id(b) not in _FOLLOWED]
RUN_OR_FOLLOWED = [b for b in BLOCKS if b.runs]


def _chain(block):
    return (_chain(block.previous) if block.continues and block.previous is not None else []) + [block]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.test_id) for b in RUNNABLE])
def test_doc_block_runs(block, tmp_path):
    chain = _chain(block)
    reason = "; ".join(r for r in map(doc_blocks.skip_reason, chain) if r)
    if reason and os.environ.get("AGENT_GYM_DOC_BLOCKS_NO_SKIP"):
        pytest.fail(f"{block.id}: {reason}; AGENT_GYM_DOC_BLOCKS_NO_SKIP is set, where it must run")
    if reason:
        pytest.skip(f"{block.id}: {reason}")
    for each in chain:
        doc_blocks.run_block(each, tmp_path)


def test_every_python_and_bash_block_says_how_it_is_checked():
    """Every python and bash block runs (doctest), runs to its arguments (doctest-args: REASON), is run by a
    CI stage (doctest-ci: STAGE) or, a python sketch only, is compiled (no-run: REASON): none goes
    unchecked by accident (tests/doc_blocks.py explains the markers)."""
    unmarked = sorted(b.id for b in BLOCKS if b.language in doc_blocks.LANGUAGES and b.marker is None and not b.error)
    assert not unmarked, ("python and bash blocks without a marker (tests/doc_blocks.py and docs/architecture.md "
                          "explain them): " + ", ".join(unmarked))


def test_python_sketches_compile():
    """A no-run python block is at least valid Python: a sketch with a typo is caught."""
    bad = []
    for b in BLOCKS:
        if b.marker == doc_blocks.NO_RUN:
            try:
                compile(b.code, b.id, "exec")
            except SyntaxError as exc:
                bad.append(f"{b.id}: {exc}")
    assert not bad, "\n".join(bad)


def test_blocks_that_ci_runs_are_the_ones_its_stages_read():
    """A doctest-ci block of the README is the first bash block under its heading, which .ci/run reads by
    that heading (readme_block) and runs as written; any other names a CI script that exists."""
    ci_run = (doc_blocks.REPO_ROOT / ".ci" / "run").read_text()
    in_ci = [b for b in BLOCKS if b.marker == doc_blocks.IN_CI]
    assert in_ci
    for b in in_ci:
        if b.page != "README.md":
            continue
        lines = (doc_blocks.REPO_ROOT / b.page).read_text().splitlines()[: b.line - 1]
        heading = next(line for line in reversed(lines) if line.startswith("## "))
        assert f'readme_block "{heading}"' in ci_run, f"{b.id}: .ci/run does not read the block under {heading!r}"
        under = [o for o in BLOCKS if o.page == b.page and o.language == "bash"
                 and next(line for line in reversed((doc_blocks.REPO_ROOT / o.page).read_text().splitlines()[: o.line - 1])
                          if line.startswith("## ")) == heading]
        assert under[0] is b, f"{b.id}: .ci/run reads the first bash block under {heading!r}, {under[0].id}"


def test_every_marker_parses():
    """A misspelt marker would silently make a block claim nothing: every info string must parse."""
    errors = [b.error for b in BLOCKS if b.error]
    assert not errors, "\n".join(errors)


def test_the_readme_example_and_the_openenv_server_pairs_are_found():
    """The extractor finds what these tests exist for: the README's env example and each OpenEnv
    client block linked to the serve command the page gives."""
    ids = {b.id: b for b in RUN_OR_FOLLOWED}
    readme = [b for b in RUN_OR_FOLLOWED if b.page == "README.md" and b.language == "python"]
    assert readme and "gym.make(" in readme[0].code
    served = [b for b in RUN_OR_FOLLOWED if b.page == "docs/openenv.md" and b.marker == "doctest-with-serve"]
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


def test_args_only_blocks_stop_after_the_arguments_and_fail_on_bad_ones(tmp_path):
    """doctest-args: a command whose options parse stops there (status 0, nothing run); a misspelt
    option, a pip folder that is no project, a malformed requirement fail the block. The new markers
    and options parse, and a bash block cannot be no-run."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash doctest-args: a GPU\nagent-gym eval AgentR1/Countdown-v0 --episodes 3 --json\n"
        "pip install -e envs/gsm8k 'trl[vllm]>=1.14,!=1.15.0'\n```\n"
        "```bash doctest-args: a GPU\nagent-gym eval AgentR1/Countdown-v0 --episodez 3\n```\n"
        "```bash doctest-args: a GPU\npip install -e envs/no-such-env\n```\n"
        "```bash doctest-args: a GPU\npip install 'trl[vllm>=1'\n```\n"
        "```bash doctest cache=fresh max-steps=2 args-only=twine,build continues\nenv | grep ^AGENT_GYM_\n```\n"
        "```bash no-run: a sketch\nexit 1\n```\n"
        "```bash doctest-ci: .ci/no-such-stage\ntrue\n```\n", encoding="utf-8")
    ok, option, folder, requirement, options, bash_no_run, ci = doc_blocks.extract_blocks(page, tmp_path)
    assert (ok.marker, ok.reason, ok.args_only, ok.cwd_repo) == ("doctest-args", "a GPU", ("*",), True)
    result = doc_blocks.run_block(ok, tmp_path / "w")
    assert result.stderr.count("arguments only") == 2 and "nothing installed" in result.stderr
    with pytest.raises(doc_blocks.BlockFailed, match="unrecognized arguments: --episodez 3"):
        doc_blocks.run_block(option, tmp_path / "w")
    with pytest.raises(doc_blocks.BlockFailed, match="envs/no-such-env is no folder of a Python project"):
        doc_blocks.run_block(folder, tmp_path / "w")
    with pytest.raises(doc_blocks.BlockFailed, match="is no valid requirement"):
        doc_blocks.run_block(requirement, tmp_path / "w")
    assert (options.fresh_cache, options.max_steps, options.args_only, options.continues) == (True, 2, ("twine", "build"), True)
    assert options.previous is requirement
    env = doc_blocks.block_env(options, tmp_path / "w")
    assert env["AGENT_GYM_CACHE"] == str(tmp_path / "w" / "fresh-agent-gym-cache")
    assert (env["AGENT_GYM_MAX_STEPS"], env["AGENT_GYM_DOC_ARGS_ONLY"]) == ("2", "pip,twine,build")
    assert "no-run is for python sketches" in bash_no_run.error
    assert "doctest-ci names the CI stage" in ci.error
