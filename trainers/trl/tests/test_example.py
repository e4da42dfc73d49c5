"""examples/train_trl.py: its command line, and one real training step from it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent_gym.trajectory import read_trajectories

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "train_trl.py"


def run(*args, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_help_and_bad_arguments():
    done = run("--help")
    assert done.returncode == 0
    for option in ("--env-kwarg", "--use-vllm", "--vllm-mode", "--max-completion-length", "--trajectories"):
        assert option in done.stdout
    done = run("AgentR1/Arithmetic-v0", "--batch-size", "6", "--num-generations", "4")
    assert done.returncode == 2 and "must be a multiple of --num-generations" in done.stderr
    done = run("AgentR1/Arithmetic-v0", "--env-kwarg", "level")
    assert done.returncode == 2 and "expected KEY=VALUE" in done.stderr


def test_one_step_trains_and_writes_the_episodes(tmp_path):
    trajectories = tmp_path / "episodes.jsonl"
    done = run(
        "AgentR1/ArithmeticTool-v0", "--env-kwarg", "level=1", "--env-kwarg", "few_shot=true",
        "--rows", "2", "--steps", "1", "--batch-size", "2", "--num-generations", "2", "--max-completion-length", "24",
        "--output-dir", str(tmp_path / "out"), "--trajectories", str(trajectories),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'AgentR1/ArithmeticTool-v0 {"few_shot": true, "level": 1}: 2 rows' in done.stdout
    assert "step    1  reward " in done.stdout and "done: 1 steps" in done.stdout
    episodes = list(read_trajectories(trajectories))
    assert len(episodes) == 2 and {e.env_id for e in episodes} == {"AgentR1/ArithmeticTool-v0"}
    assert episodes[0].task_id == episodes[1].task_id  # one task, its GRPO group of two
    assert json.loads(json.dumps(episodes[0].metadata["route"]))["env_kwargs"] == {"few_shot": True, "level": 1}
