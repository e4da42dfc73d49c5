"""The example run scripts compose a valid config under the installed verl (no GPU, no Ray): each is
run with AGENT_GYM_VERL_DRY_RUN=1, which makes ``agent_gym_verl.main_ppo`` compose and resolve verl's
own hydra config with the script's options and check what the agent-gym trainer needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

REPO = Path(__file__).resolve().parents[3]


def _dry_run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run an example script with AGENT_GYM_VERL_DRY_RUN=1 under this interpreter's verl."""
    full_env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "AGENT_GYM_VERL_DRY_RUN": "1",
        **env,
    }
    return subprocess.run(
        ["bash", str(REPO / "examples" / script), *args], env=full_env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "script",
    ["run_qwen2.5-3b.sh", "run_qwen3-4b_gsm8k_tool.sh", "run_smollm2-135m_gsm8k_tool.sh", "run_smollm2-135m_countdown.sh"],
)
def test_run_script_composes_with_installed_verl(script, tmp_path):
    proc = _dry_run(script, MODEL_PATH=str(tmp_path / "model"), DATA_DIR=str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "dry run" in proc.stdout and "adv_estimator=grpo" in proc.stdout
    assert str(tmp_path / "model") in proc.stdout and "agent_loops.yaml" in proc.stdout
    # _verl_common.sh turns on the vectorised token log-probs through verl's import hook.
    assert "token log-probs from agent_gym_verl.logprobs" in proc.stdout


@pytest.mark.parametrize("mode,length", [("concat", 1024), ("step", 256), ("bogus", None)])
def test_gsm8k_tool_script_modes(mode, length, tmp_path):
    proc = _dry_run("run_smollm2-135m_gsm8k_tool.sh", MODE=mode, HOME=str(tmp_path))
    if length is None:
        assert proc.returncode == 2 and "MODE must be step or concat, got 'bogus'" in proc.stderr
        return
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = "gsm8k_tool_concat" if mode == "concat" else "gsm8k_tool"
    assert f"data.train_files={tmp_path}/data/{data}/train.parquet" in proc.stderr  # set -x echoes the command
    assert f"data.max_response_length={length}" in proc.stderr
    assert f"trainer.experiment_name=smollm2_135m_{mode}_grpo" in proc.stderr
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=True" in proc.stderr  # the memory-safe default


def test_dry_run_names_verl_fused_kernels_when_they_replace_the_log_prob_function(tmp_path):
    proc = _dry_run(
        "run_smollm2-135m_countdown.sh",
        "actor_rollout_ref.model.use_fused_kernels=True",
        "actor_rollout_ref.model.fused_kernel_options.impl_backend=triton",
        HOME=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "token log-probs from verl's fused kernels (use_fused_kernels, triton backend)" in proc.stdout


def test_gsm8k_tool_script_turns_gradient_checkpointing_off_on_request(tmp_path):
    proc = _dry_run("run_smollm2-135m_gsm8k_tool.sh", GRAD_CKPT="False", HOME=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=False" in proc.stderr


@pytest.mark.parametrize("micro,ok", [("32", False), ("16", True)])
def test_gsm8k_tool_script_on_two_gpus_needs_micro_batches_that_split(micro, ok, tmp_path):
    from agent_gym_verl import compat

    proc = _dry_run("run_smollm2-135m_gsm8k_tool.sh", "trainer.n_gpus_per_node=2", MICRO=micro, HOME=str(tmp_path))
    if ok or compat.LEGACY_LAYOUT:  # verl 0.7's own workers check this when they start
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"log_prob_micro_batch_size_per_gpu={micro}" in proc.stderr
    else:
        assert proc.returncode != 0
        assert "is 80 per GPU on 2 data-parallel GPU(s), which actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32" in proc.stderr


def test_dry_run_rejects_a_step_mode_estimator_it_cannot_run():
    from agent_gym_verl.main_ppo import dry_run
    from agent_gym_verl.step_advantage import StepModeError

    with pytest.raises(StepModeError, match="remax"):
        dry_run(["algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.name=vllm"])


def test_dry_run_checks_the_tree_settings(capsys):
    from agent_gym_verl import compat
    from agent_gym_verl.main_ppo import dry_run
    from agent_gym_verl.step_advantage import StepModeError

    common = ["actor_rollout_ref.rollout.name=vllm", "+agent_gym.tree.width=3", *([] if compat.LEGACY_LAYOUT else ["trainer.use_v1=False"])]
    with pytest.raises(StepModeError, match="not 'rloo'"):
        dry_run(["algorithm.adv_estimator=rloo", *common])
    with pytest.raises(SystemExit, match="agent_gym.tree.branch_at must be 'every', 'entropy' or a non-empty list"):
        dry_run(["algorithm.adv_estimator=grpo", *common, "+agent_gym.tree.branch_at=often"])
    dry_run(["algorithm.adv_estimator=grpo", *common, "+agent_gym.tree.branch_at=[0,2]"])
    assert "tree=TreeConfig(width=3, branch_at=(0, 2), top_k=1, max_leaves=8)," in capsys.readouterr().out


@pytest.mark.parametrize("override,shown", [(None, "segment"), ("+agent_gym.samples=step", "step"), ("+agent_gym.samples=steps", None)])
def test_step_mode_samples_are_segments_unless_asked(override, shown, tmp_path):
    proc = _dry_run("run_smollm2-135m_gsm8k_tool.sh", *([override] if override else []), HOME=str(tmp_path))
    if shown is None:
        assert proc.returncode != 0 and "agent_gym.samples must be one of segment, step, got 'steps'" in proc.stderr
        return
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"step-mode samples={shown}," in proc.stdout


def test_a_project_named_like_a_package_is_refused_before_ray_starts(tmp_path):
    """verl's file logger would write ./agent_gym_countdown/...: a folder that Ray workers import instead of
    the editable-installed package (only its own finder finds it). A module on sys.path is not hidden."""
    import importlib.machinery
    import importlib.util

    if importlib.util.find_spec("agent_gym_countdown") is None:
        pytest.skip("the Countdown env package is not installed here")
    common = dict(MODEL_PATH=str(tmp_path / "m"), DATA_DIR=str(tmp_path / "d"))
    proc = _dry_run("run_smollm2-135m_countdown.sh", "trainer.project_name=agent_gym_countdown",
                    VERL_FILE_LOGGER_PATH="", **common)
    if importlib.machinery.PathFinder.find_spec("agent_gym_countdown") is None:  # an editable install
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "trainer.project_name=agent_gym_countdown is the name of an installed module" in proc.stderr
        assert "dry run" not in proc.stdout
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
    for project, logger_path in (("agent_gym_countdown", str(tmp_path / "run.jsonl")), ("json", "")):
        ok = _dry_run("run_smollm2-135m_countdown.sh", f"trainer.project_name={project}",
                      VERL_FILE_LOGGER_PATH=logger_path, **common)
        assert ok.returncode == 0 and "dry run" in ok.stdout, (project, ok.stderr[-2000:])


def test_no_example_names_its_project_like_a_module():
    """What the check above refuses, for every script as shipped (verl's file logger folder is the name)."""
    import re

    from agent_gym_verl.main_ppo import check_file_logger_folder

    names = {}
    for script in sorted((REPO / "examples").glob("*.sh")):
        for name in re.findall(r"trainer\.project_name=(\S+)", script.read_text()):
            names[script.name] = name
            assert not name.strip("'\"").isidentifier(), (script.name, name)
            check_file_logger_folder([f"trainer.project_name={name}", "trainer.logger=[console,file]"])
    assert {"run_gemma3-270m_countdown.sh", "learn_smollm2-135m_gsm8k_tool.sh"} <= set(names)
