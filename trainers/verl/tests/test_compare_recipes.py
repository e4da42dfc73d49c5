"""The two comparison drivers (examples/compare_step_vs_concat_gsm8k_tool.sh, compare_tree_vs_flat_gsm8k_tool.sh,
both through compare_arms_gsm8k_tool.sh) and what they rest on, on CPU against real verl:

* each arm's part composes verl's config (AGENT_GYM_VERL_DRY_RUN=1): the mode's data and lengths, tree
  options in the tree arm only, a run folder per arm, the same seeds and batch in both arms;
* the rows each mode's data command writes name that mode's agent loop;
* ``agent_gym/generated_tokens``: the policy tokens of concat rows, segments and tree rows;
* ``plot_heldout_accuracy.py --x tokens`` / ``--run`` / ``--print-tokens``: the cost axis the budget uses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl")

import torch  # noqa: E402

from agent_gym_verl import compat  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
VERL_09 = not compat.LEGACY_LAYOUT
pytestmark = pytest.mark.skipif(not VERL_09, reason="the learn recipe runs on verl 0.9 only")


def _run(script: str, *args: str, dry: bool = True, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    if dry:
        full_env["AGENT_GYM_VERL_DRY_RUN"] = "1"
    else:
        full_env.pop("AGENT_GYM_VERL_DRY_RUN", None)
    return subprocess.run(["bash", str(REPO / "examples" / script), *args], env=full_env, capture_output=True, text=True,
                          timeout=300)


def _arms(proc: subprocess.CompletedProcess) -> list[dict[str, str]]:
    """The hydra options of every part the driver composed, in order (set -x echoes each command)."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("+ python3 -m agent_gym_verl.main_ppo ")]
    return [dict(a.split("=", 1) for a in shlex.split(line[2:])[3:]) for line in lines]


SHARED = ("data.seed", "data.train_batch_size", "actor_rollout_ref.rollout.temperature", "actor_rollout_ref.actor.optim.lr",
          "actor_rollout_ref.model.lora_rank", "data.max_prompt_length", "trainer.test_freq", "trainer.total_training_steps",
          "actor_rollout_ref.rollout.val_kwargs.temperature", "algorithm.adv_estimator")


def test_step_vs_concat_arms_differ_in_the_agent_loop_only(tmp_path):
    proc = _run("compare_step_vs_concat_gsm8k_tool.sh", HOME=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    step, concat = _arms(proc)
    for key in SHARED:
        assert step[key] == concat[key], key
    assert step["data.seed"] == "1" and step["trainer.total_training_steps"] == "10"  # part 1 of 10 steps
    data = f"{tmp_path}/data"
    assert (step["data.train_files"], step["data.val_files"]) == (f"{data}/gsm8k_tool/train.parquet", f"{data}/gsm8k_tool_val512/test.parquet")
    assert (concat["data.train_files"], concat["data.val_files"]) == (
        f"{data}/gsm8k_tool_concat/train.parquet", f"{data}/gsm8k_tool_concat_val512/test.parquet")
    # a step-mode response is one turn; a concat one is every turn and tool reply after the first prompt
    assert step["data.max_response_length"] == step["actor_rollout_ref.rollout.response_length"] == "256"
    assert concat["data.max_response_length"] == concat["actor_rollout_ref.rollout.response_length"] == "1024"
    root = f"{tmp_path}/runs/compare_step_vs_concat"
    assert step["trainer.default_local_dir"] == f"{root}/step/part1/ckpt"
    assert concat["trainer.default_local_dir"] == f"{root}/concat/part1/ckpt"
    assert step["trainer.experiment_name"] != concat["trainer.experiment_name"]
    assert not any(k.startswith("+agent_gym.tree") for arm in (step, concat) for k in arm)
    assert proc.stdout.count("tree=off,") == 2


def test_tree_vs_flat_arms_differ_in_the_groups_only(tmp_path):
    proc = _run("compare_tree_vs_flat_gsm8k_tool.sh", HOME=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    flat, tree = _arms(proc)
    for key in SHARED + ("data.train_files", "data.val_files", "data.max_response_length"):
        assert flat[key] == tree[key], key
    assert not any(k.startswith("+agent_gym.tree") for k in flat)
    assert {k: v for k, v in tree.items() if k.startswith("+agent_gym.tree")} == {
        "+agent_gym.tree.width": "2", "+agent_gym.tree.branch_at": "[1]", "+agent_gym.tree.max_leaves": "2",
        "+agent_gym.tree.top_k": "1"}
    assert "tree=off," in proc.stdout and "tree=TreeConfig(width=2, branch_at=(1,), top_k=1, max_leaves=2)," in proc.stdout
    # 8 trajectories per prompt and 256 sampled rows per optimizer step in both arms
    rows = {name: int(a["actor_rollout_ref.actor.ppo_mini_batch_size"]) * int(a["actor_rollout_ref.rollout.n"])
            for name, a in (("flat", flat), ("tree", tree))}
    assert rows == {"flat": 256, "tree": 256} and tree["actor_rollout_ref.rollout.n"] == "4"
    root = f"{tmp_path}/runs/compare_tree_vs_flat"
    assert (flat["trainer.default_local_dir"], tree["trainer.default_local_dir"]) == (f"{root}/flat/part1/ckpt", f"{root}/tree/part1/ckpt")
    # the tree settings are the driver's environment
    proc = _run("compare_tree_vs_flat_gsm8k_tool.sh", HOME=str(tmp_path), TREE_N="2", TREE_BRANCH_AT="every", TREE_MAX_LEAVES="4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = _arms(proc)[1]
    assert (tree["+agent_gym.tree.branch_at"], tree["+agent_gym.tree.max_leaves"], tree["actor_rollout_ref.rollout.n"],
            tree["actor_rollout_ref.actor.ppo_mini_batch_size"]) == ("every", "4", "2", "64")  # capped at the batch


def test_the_learn_recipe_defaults_a_run_folder_per_arm_and_refuses_concat_trees(tmp_path):
    # (the folder as set -x echoes it, before the missing model stops the run: no verl start needed; the
    # drivers' tests above see the same folders reach verl's trainer.default_local_dir)
    dirs = {}
    for name, env in (("step", {}), ("concat", {"MODE": "concat"}), ("tree", {"TREE_WIDTH": "3"})):
        proc = _run("learn_smollm2-135m_gsm8k_tool.sh", dry=False, HOME=str(tmp_path), **env)
        assert proc.returncode == 1 and "smollm2-135m-tool/config.json is missing" in proc.stderr, proc.stderr[-3000:]
        dirs[name] = next(line.split("=", 1)[1] for line in proc.stderr.splitlines() if line.startswith("+ RUN_DIR="))
    runs = f"{tmp_path}/runs"
    assert dirs == {"step": f"{runs}/gsm8k_tool_learn", "concat": f"{runs}/gsm8k_tool_learn_concat", "tree": f"{runs}/gsm8k_tool_learn_tree"}
    proc = _run("learn_smollm2-135m_gsm8k_tool.sh", HOME=str(tmp_path), MODE="concat", TREE_WIDTH="2")
    assert proc.returncode == 2 and "TREE_WIDTH needs MODE=step" in proc.stderr
    proc = _run("learn_smollm2-135m_gsm8k_tool.sh", HOME=str(tmp_path), MODE="steps")
    assert proc.returncode == 2 and "MODE must be step or concat, got 'steps'" in proc.stderr


@pytest.mark.parametrize("mode,agent", [("concat", "agent_gym"), ("step", "agent_gym_step")])
def test_missing_data_names_the_command_whose_rows_pick_the_modes_loop(mode, agent, tmp_path, hf_model_dir):
    proc = _run("learn_smollm2-135m_gsm8k_tool.sh", dry=False, HOME=str(tmp_path), MODE=mode, MODEL_PATH=hf_model_dir)
    suffix = "_concat" if mode == "concat" else ""
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert (f"python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {tmp_path}/data/gsm8k_tool{suffix} --mode {mode}"
            in proc.stderr)
    from agent_gym_verl.export import export_env

    # the val command's rows (export-verl --mode, what gsm8k_tool.py --mode writes too) name the mode's loop
    import pandas as pd

    path = export_env("AgentR1/GSM8KTool-v0", "test", tmp_path / "val", mode=mode, limit=2)
    assert set(pd.read_parquet(path)["agent_name"]) == {agent}


def test_the_searchqa_recipe_is_the_learn_recipe_with_searchqas_rows(tmp_path, hf_model_dir):
    proc = _run("learn_smollm2-135m_searchqa.sh", HOME=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (opts,) = _arms(proc)
    assert (opts["data.train_files"], opts["data.val_files"], opts["actor_rollout_ref.model.path"]) == (
        f"{tmp_path}/data/searchqa_medium/train.parquet", f"{tmp_path}/data/searchqa_medium_val512/test.parquet",
        f"{tmp_path}/models/smollm2-135m-searchqa")
    assert (opts["data.max_prompt_length"], opts["actor_rollout_ref.rollout.prompt_length"]) == ("2048", "2048")
    assert (opts["trainer.project_name"], opts["trainer.experiment_name"]) == ("agent-gym-searchqa", "smollm2_135m_searchqa_medium_part1")
    assert opts["trainer.default_local_dir"] == f"{tmp_path}/runs/searchqa_learn/part1/ckpt"
    # a missing input names SearchQA's commands, not GSM8K's
    proc = _run("learn_smollm2-135m_searchqa.sh", dry=False, HOME=str(tmp_path), DIFFICULTY="hard", MODEL_PATH=hf_model_dir)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert (f"agent-gym export-verl AgentR1/SearchQA-v0 --split train --limit 8192 --env-kwarg difficulty=hard "
            f"--out {tmp_path}/data/searchqa_hard --mode step") in proc.stderr
    assert "gsm8k" not in proc.stderr.split("is missing", 1)[1]
    proc = _run("learn_smollm2-135m_searchqa.sh", HOME=str(tmp_path), DIFFICULTY="medum")
    assert proc.returncode == 2 and "DIFFICULTY must be easy, medium or hard, got 'medum'" in proc.stderr


def test_the_driver_lists_every_missing_input_before_training(tmp_path):
    proc = _run("compare_step_vs_concat_gsm8k_tool.sh", dry=False, HOME=str(tmp_path))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = f"{tmp_path}/data"
    for command in (
        f"agent-gym export-model --model smollm2-135m-tool --out {tmp_path}/models/smollm2-135m-tool",
        f"python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {data}/gsm8k_tool --mode step",
        f"python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {data}/gsm8k_tool_concat --mode concat",
        f"agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out {data}/gsm8k_tool_val512 --mode step",
        f"agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out {data}/gsm8k_tool_concat_val512 --mode concat",
    ):
        assert f"  {command}\n" in proc.stderr, command
    assert not (tmp_path / "runs").exists()


# -- the token count and the cost axis ------------------------------------------------------------------------


def test_generated_tokens_count_policy_ids_once(tmp_path):
    from verl import DataProto

    from agent_gym_verl.agent_loop import STEPS_KEY
    from agent_gym_verl.step_advantage import generated_tokens, trajectory_metrics

    # concat rows: the response mask (1 on the policy's ids, 0 on tool replies and padding)
    concat = DataProto.from_dict(tensors={"response_mask": torch.tensor([[1, 1, 0, 0, 1, 0], [1, 1, 1, 0, 0, 0]])})
    assert generated_tokens(concat) == 6
    # step rows: the carried samples (a segment's mask; a single step is all policy ids), not the row itself
    segment = {"response_ids": np.arange(5), "response_mask": np.array([1, 1, 0, 0, 1])}
    single = {"response_ids": np.arange(4)}
    steps = np.empty(2, dtype=object)
    steps[0], steps[1] = [segment, single], [segment]
    rows = DataProto.from_dict(tensors={"response_mask": torch.ones(2, 6, dtype=torch.long)}, non_tensors={STEPS_KEY: steps})
    assert generated_tokens(rows) == 3 + 4 + 3
    assert trajectory_metrics(rows)["agent_gym/generated_tokens"] == 10.0


def _load_plotter():
    spec = importlib.util.spec_from_file_location("plot_heldout_accuracy", REPO / "examples" / "plot_heldout_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _part(path: Path, accs: dict[int, float], tokens: dict[int, float], start: int = 0) -> Path:
    src = "AgentR1/GSM8KTool-v0"
    lines = []
    for step in sorted(set(accs) | set(tokens)):
        data = {}
        if step in accs:
            data.update({f"val-core/{src}/acc/mean@1": accs[step], f"val-aux/{src}/episodes": 512})
        if step in tokens:
            data.update({"agent_gym/generated_tokens": tokens[step], "critic/score/mean": 0.1})
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_heldout_accuracy_against_generated_tokens(tmp_path, capsys):
    pha = _load_plotter()
    flat1 = _part(tmp_path / "f1.jsonl", {0: 0.06, 2: 0.08}, {1: 1000, 2: 1000})
    flat2 = _part(tmp_path / "f2.jsonl", {0: 0.08, 1: 0.09}, {1: 1000})
    tree1 = _part(tmp_path / "t1.jsonl", {0: 0.06, 2: 0.07}, {1: 600, 2: 700})
    out = tmp_path / "c.csv"
    assert pha.main([str(flat1), str(flat2), "--x", "tokens", "--csv", str(out)]) == 0
    assert [line.split(",")[-1] for line in out.read_text().splitlines()] == ["generated_tokens", "0", "2000", "2000", "3000"]
    assert "generated tokens: 3,000 in 3 training steps" in capsys.readouterr().out
    assert pha.main(["--run", f"flat={flat1},{flat2}", "--run", f"tree={tree1}", "--x", "tokens", "--csv", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("run,step,") and lines[-1].startswith("tree,2,1,2,0.07,") and lines[-1].endswith(",1300")
    text = capsys.readouterr().out
    assert "== flat" in text and "== tree" in text and "generated tokens: 1,300 in 2 training steps (650 per step)" in text
    assert "last validation, tree - flat: -0.0200" in text and "at 0.433x the generated tokens" in text
    assert pha.main(["--run", f"flat={flat1},{flat2}", "--run", f"tree={tree1}", "--print-tokens"]) == 0
    assert capsys.readouterr().out == "flat\t3000\t3\ntree\t1300\t2\n"
    # a run logged before the count existed plots against steps only
    old = _part(tmp_path / "old.jsonl", {0: 0.06, 2: 0.08}, {})
    old.write_text(old.read_text() + json.dumps({"step": 1, "data": {"critic/score/mean": 0.1}}) + "\n")
    assert pha.main([str(old), "--x", "tokens"]) == 1
    assert "part 1 step 1 logs no agent_gym/generated_tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pha.main([str(flat1), "--run", f"tree={tree1}"])
    if importlib.util.find_spec("matplotlib") is not None:
        png = tmp_path / "c.png"
        assert pha.main(["--run", f"flat={flat1},{flat2}", "--run", f"tree={tree1}", "--x", "tokens", "--png", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
