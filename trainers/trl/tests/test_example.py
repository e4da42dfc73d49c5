"""examples/train_trl.py: its command line, and one real training step from it."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_gym.trajectory import read_trajectories

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "train_trl.py"


def run(*args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_help_and_bad_arguments():
    done = run("--help")
    assert done.returncode == 0
    for option in ("--env-kwarg", "--use-vllm", "--vllm-mode", "--max-completion-length", "--trajectories",
                   "--env-workers", "--tree entropy|random|K"):
        assert option in done.stdout
    done = run("AgentR1/Arithmetic-v0", "--batch-size", "6", "--num-generations", "4")
    assert done.returncode == 2 and "must be a multiple of --num-generations" in done.stderr
    done = run("AgentR1/Arithmetic-v0", "--env-kwarg", "level")
    assert done.returncode == 2 and "expected KEY=VALUE" in done.stderr
    done = run("AgentR1/Arithmetic-v0", "--tree", "first")
    assert done.returncode == 2 and "expected entropy, random or a step index >= 0, got 'first'" in done.stderr
    done = run("AgentR1/Arithmetic-v0", "--tree", "1", "--env-workers", "2")
    assert done.returncode == 2 and "--tree forks env states in the trainer's process" in done.stderr


def test_two_steps_train_and_write_the_episodes_and_the_metrics(tmp_path):
    trajectories, metrics, logs = tmp_path / "episodes.jsonl", tmp_path / "metrics.csv", tmp_path / "logs.jsonl"
    done = run(
        "AgentR1/ArithmeticTool-v0", "--env-kwarg", "level=1", "--env-kwarg", "few_shot=true",
        "--rows", "2", "--steps", "2", "--batch-size", "2", "--num-generations", "2", "--max-completion-length", "24",
        "--output-dir", str(tmp_path / "out"), "--trajectories", str(trajectories), "--metrics-csv", str(metrics),
        "--log-jsonl", str(logs), "--lr-scheduler", "constant",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'AgentR1/ArithmeticTool-v0 {"few_shot": true, "level": 1}: 2 rows' in done.stdout
    assert "step    1  reward " in done.stdout and "step    2  reward " in done.stdout and "done: 2 steps" in done.stdout
    # the steady-state rate leaves out step 1 (start-up); 2 episodes per optimizer step
    assert "steps 2..2: " in done.stdout and "(2 episodes per optimizer step)" in done.stdout
    episodes = list(read_trajectories(trajectories))
    assert len(episodes) == 4 and {e.env_id for e in episodes} == {"AgentR1/ArithmeticTool-v0"}
    assert episodes[0].task_id == episodes[1].task_id  # one task, its GRPO group of two
    assert json.loads(json.dumps(episodes[0].metadata["route"]))["env_kwargs"] == {"few_shot": True, "level": 1}
    rows = list(csv.DictReader(metrics.open()))
    assert [r["step"] for r in rows] == ["1", "2"]
    assert list(rows[0]) == ["step", "wall_s", "step_s", "reward", "reward_std", "correct", "turns", "tool_calls",
                             "tool_errors", "policy_ids"]
    # the CSV's reward is the mean of the step's episode returns, as the episodes file records them
    for step, row in enumerate(rows):
        returns = [e.return_ for e in episodes[2 * step:2 * step + 2]]
        assert float(row["reward"]) == pytest.approx(sum(returns) / 2, abs=1e-5)
        assert float(row["step_s"]) > 0 and float(row["wall_s"]) > 0
    # every TRL log, one JSON line each: the per-step ones carry the loss and the (constant) learning rate
    lines = [json.loads(line) for line in logs.open()]
    per_step = [line for line in lines if "loss" in line]
    assert [line["step"] for line in per_step] == [1, 2]
    assert [line["learning_rate"] for line in per_step] == [1e-5, 1e-5]
    assert [line["reward"] for line in per_step] == pytest.approx([float(r["reward"]) for r in rows], abs=1e-5)
    assert all("env/tool_calls" in line and "grad_norm" in line for line in per_step)


def test_ctrl_c_stops_cleanly_and_says_how_far_it_got(tmp_path):
    """SIGINT after the first step: exit 130, no traceback, two lines naming the steps and episodes done and
    the files written, which hold what the run did up to then. (--rows 343: level 1 draws seed 237's task
    again at seed 342, and the header line says so.)"""
    trajectories, metrics, logs = tmp_path / "episodes.jsonl", tmp_path / "metrics.csv", tmp_path / "logs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "AgentR1/ArithmeticTool-v0", "--env-kwarg", "level=1", "--env-kwarg",
         "few_shot=true", "--rows", "343", "--steps", "50", "--batch-size", "2", "--num-generations", "2",
         "--max-completion-length", "24", "--output-dir", str(tmp_path / "out"), "--save",
         "--trajectories", str(trajectories), "--metrics-csv", str(metrics), "--log-jsonl", str(logs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 540
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):  # the header and step 1
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no step in 540 s"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert ('AgentR1/ArithmeticTool-v0 {"few_shot": true, "level": 1}: 342 rows (343 seeds drew 342 distinct tasks; '
            "1 duplicate dropped), model ") in stdout
    assert "done: " not in stdout and "saved to" not in stdout
    last = stderr.strip().splitlines()[-2:]
    found = re.fullmatch(r"interrupted: (\d+) of 50 optimizer steps done, (\d+) episodes played, \d+ s", last[0])
    assert found, stderr[-3000:]
    steps, played = int(found[1]), int(found[2])
    rows = list(csv.DictReader(metrics.open()))
    assert steps >= 1 and int(rows[-1]["step"]) <= steps < 50
    # every episode played reached the trajectories file; a step's batch is 2, the next batch may be under way
    assert played == len(list(read_trajectories(trajectories))) and 2 * steps <= played <= 2 * steps + 2
    assert last[1] == (f"written as it trained: {metrics} (--metrics-csv), {logs} (--log-jsonl), {trajectories} "
                       "(--trajectories); the model is not saved (--save saves it when the run ends)")
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_steps_per_generation_must_be_positive():
    done = run("AgentR1/Arithmetic-v0", "--steps-per-generation", "0")
    assert done.returncode == 2 and "--steps-per-generation must be >= 1, got 0" in done.stderr


def test_a_row_per_generation_batch_with_steps_per_generation(tmp_path):
    """--steps-per-generation 2: TRL generates 2 x 2 episodes every other optimizer step and logs the env's
    metrics then, so rows are steps 1 and 3, each the mean return of its generation batch's 4 episodes."""
    trajectories, metrics = tmp_path / "episodes.jsonl", tmp_path / "metrics.csv"
    done = run(
        "AgentR1/Arithmetic-v0", "--env-kwarg", "level=1", "--rows", "4", "--steps", "3", "--batch-size", "2",
        "--num-generations", "2", "--steps-per-generation", "2", "--max-completion-length", "16",
        "--output-dir", str(tmp_path / "out"), "--trajectories", str(trajectories), "--metrics-csv", str(metrics),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "steps 2..3: " in done.stdout and "(2 episodes per optimizer step)" in done.stdout
    episodes = list(read_trajectories(trajectories))
    assert len(episodes) == 8  # two generation batches of 2 tasks x 2 episodes
    rows = list(csv.DictReader(metrics.open()))
    assert [r["step"] for r in rows] == ["1", "3"]
    for batch, row in enumerate(rows):
        returns = [e.return_ for e in episodes[4 * batch:4 * batch + 4]]
        assert float(row["reward"]) == pytest.approx(sum(returns) / 4, abs=1e-5)


@pytest.mark.parametrize("recipe, export", [
    ("trl_smollm2-135m_countdown.sh", "agent-gym export-model --out"),
    ("trl_gemma3-270m_countdown.sh", "agent-gym export-model --model gemma3-270m --out"),
])
def test_the_gpu_recipes_stop_before_anything_runs_without_their_model(tmp_path, recipe, export):
    missing = tmp_path / "no-model"
    done = subprocess.run(["bash", str(SCRIPT.parent / recipe)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MODEL_PATH": str(missing), "RUN_DIR": str(tmp_path / "run")})
    assert done.returncode == 1
    assert done.stderr == (f"{recipe}: {missing}/config.json is missing; make it first with:\n"
                           f"  {export} {missing}\n")
    assert not (tmp_path / "run").exists()


def test_bf16_keeps_float32_master_weights_and_saves_bfloat16(tmp_path):
    """--bf16 is mixed precision: weights held in bfloat16 would drop most AdamW updates at lr 1e-5 (one step
    leaves 91% of Gemma 3 270M's bfloat16 weights as they were). Saved in bfloat16, as the model came."""
    from safetensors import safe_open

    out = tmp_path / "out"
    done = run(
        "AgentR1/Arithmetic-v0", "--env-kwarg", "level=1", "--rows", "2", "--steps", "2", "--batch-size", "2",
        "--num-generations", "2", "--max-completion-length", "16", "--bf16", "--lr", "1e-4",
        "--output-dir", str(out), "--save",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "; weights float32, compute bfloat16" in done.stdout
    config = json.loads((out / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        dtypes = {str(f.get_slice(name).get_dtype()) for name in f.keys()}
    assert dtypes == {"BF16"}


# TRL's GRPOConfig sets transformers' gradient_checkpointing, deprecated for v6 (train_trl.py silences it too).
@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.* is deprecated:FutureWarning")
def test_the_config_carries_the_schedule_and_the_vllm_importance_sampling_choice():
    """GRPOConfig (the real one) takes what the command line sets; off turns TRL's correction off."""
    import importlib.util

    from trl import GRPOConfig

    spec = importlib.util.spec_from_file_location("train_trl", SCRIPT)
    train_trl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_trl)
    for argv, correction, mode, schedule in [
        ([], True, "sequence_mask", "linear"),  # TRL's defaults
        (["--vllm-importance-sampling", "token_truncate", "--lr-scheduler", "cosine"], True, "token_truncate", "cosine"),
        (["--vllm-importance-sampling", "off", "--lr-scheduler", "constant"], False, "sequence_mask", "constant"),
    ]:
        args = train_trl.parse_args(["AgentR1/Arithmetic-v0", "--output-dir", "/tmp/unused", *argv])
        config = GRPOConfig(**train_trl.grpo_config_kwargs(args, gpu=False))
        assert config.vllm_importance_sampling_correction is correction
        assert config.vllm_importance_sampling_mode == mode
        assert str(config.lr_scheduler_type.value if hasattr(config.lr_scheduler_type, "value") else config.lr_scheduler_type) == schedule
    done = run("AgentR1/Arithmetic-v0", "--vllm-importance-sampling", "sometimes")
    assert done.returncode == 2 and "invalid choice: 'sometimes'" in done.stderr


def test_the_rollout_gets_the_env_workers_and_the_tree_mode():
    import importlib.util

    from agent_gym_trl import EnvRollout

    spec = importlib.util.spec_from_file_location("train_trl", SCRIPT)
    train_trl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_trl)
    for argv, expected in [
        ([], {"env_workers": None, "tree": None, "tokenizer": None}),
        (["--tree", "entropy"], {"env_workers": None, "tree": "entropy", "tokenizer": None}),
        (["--tree", "2"], {"env_workers": None, "tree": 2, "tokenizer": None}),
        (["--env-workers", "4", "--model", "smollm2-135m-tool"], {"env_workers": 4, "tree": None, "tokenizer": "smollm2-135m-tool"}),
    ]:
        kwargs = train_trl.rollout_kwargs(train_trl.parse_args(["AgentR1/Arithmetic-v0", *argv]))
        assert kwargs == expected
        if not kwargs["env_workers"]:
            EnvRollout(**kwargs)  # the rollout takes them
