"""The verl export on the real GSM8K files: row counts, schema, verl's loader, and the round trip
row -> env -> the same task."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

import gymnasium as gym  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import agent_gym  # noqa: E402,F401
from agent_gym.cli.main import main as cli_main  # noqa: E402
from agent_gym_verl.export import export_env, main  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name", "env_id"]


@pytest.fixture(scope="module")
def gsm8k_tool(tmp_path_factory):
    out = tmp_path_factory.mktemp("gsm8k_tool")
    return {split: export_env("AgentR1/GSM8KTool-v0", split, out, mode="step") for split in ("train", "test")}


def test_row_counts_and_schema(gsm8k_tool):
    train, test = pq.read_table(gsm8k_tool["train"]), pq.read_table(gsm8k_tool["test"])
    assert train.num_rows == 7473 and test.num_rows == 1319
    assert train.column_names == COLUMNS
    row = test.slice(0, 1).to_pylist()[0]
    assert row["data_source"] == "AgentR1/GSM8KTool-v0" and row["agent_name"] == "agent_gym_step"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "18"}
    extra = row["extra_info"]
    assert extra["split"] == "test" and extra["index"] == 0 and extra["task_id"] == "test-0"
    assert extra["env_id"] == row["env_id"] == "AgentR1/GSM8KTool-v0"
    assert json.loads(extra["env_kwargs"]) == {"split": "test"}
    assert json.loads(extra["tools"])[0]["function"]["name"] == "calculate"
    ids = train.column("extra_info").combine_chunks().field("task_id").to_pylist()
    assert ids[:2] == ["train-0", "train-1"] and len(set(ids)) == 7473


@pytest.mark.parametrize("split,index", [("train", 0), ("train", 7472), ("test", 1318)])
def test_round_trip_row_env_same_task(gsm8k_tool, split, index, verl_tokenizer):
    row = pq.read_table(gsm8k_tool[split]).slice(index, 1).to_pylist()[0]
    extra = row["extra_info"]
    env = gym.make(extra["env_id"], tokenizer=verl_tokenizer, **json.loads(extra["env_kwargs"]))
    obs, info = env.reset(options={"task_id": extra["task_id"]})
    assert info["task_id"] == extra["task_id"]
    assert extra["question"].strip() in obs["messages"][1]["content"]
    assert extra["question"].strip()[:40] in verl_tokenizer.decode(obs["prompt_ids"])
    assert [{"role": m["role"], "content": m["content"]} for m in obs["messages"]] == row["prompt"]
    assert env.unwrapped.task.answer == row["reward_model"]["ground_truth"]


def test_verl_dataset_reads_the_export(gsm8k_tool, verl_tokenizer, tmp_path):
    """verl's own RLHFDataset loads the file and hands the agent loop the fields it needs."""
    from _verl_support import dataset_batch, hf_model_folder, verl_config

    cfg = verl_config(hf_model_folder(str(tmp_path / "hf"), verl_tokenizer))
    small = tmp_path / "small.parquet"
    pq.write_table(pq.read_table(gsm8k_tool["test"]).slice(0, 3), small)
    batch = dataset_batch(cfg, str(small), verl_tokenizer, rows=[0, 2])
    nt = batch.non_tensor_batch
    assert list(nt["agent_name"]) == ["agent_gym_step"] * 2
    assert [e["task_id"] for e in nt["extra_info"]] == ["test-0", "test-2"]
    assert nt["raw_prompt"][0][1]["role"] == "user"


def test_command_line_and_example_scripts(tmp_path, monkeypatch):
    assert main(["AgentR1/GSM8K-v0", "--split", "test", "--out", str(tmp_path / "a"), "--limit", "5"]) == 0
    assert pq.read_table(tmp_path / "a" / "test.parquet").num_rows == 5
    assert main(["AgentR1/GSM8K-v0", "--out", str(tmp_path / "b"), "--env-kwargs", "[1]"]) == 2

    for script, env_id, agent in (("gsm8k.py", "AgentR1/GSM8K-v0", "agent_gym"), ("gsm8k_tool.py", "AgentR1/GSM8KTool-v0", "agent_gym_step")):
        out = tmp_path / script
        argv = [str(REPO / "examples" / "data_preprocess" / script), "--local_save_dir", str(out), "--limit", "4"]
        with monkeypatch.context() as m:  # run the script as `python3 script ...` would, in this process
            m.setattr(sys, "argv", argv)
            m.setattr(sys, "path", list(sys.path))
            runpy.run_path(argv[0], run_name="__main__")
        for split in ("train", "test"):
            row = pq.read_table(out / f"{split}.parquet").slice(0, 1).to_pylist()[0]
            assert row["extra_info"]["env_id"] == env_id and row["agent_name"] == agent
            assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
            assert "," not in row["reward_model"]["ground_truth"]


# -- agent-gym export-verl: --env-kwarg KEY=VALUE and --env-kwargs JSON (parquet needs pyarrow, which comes with verl)

def _export_rows(folder):
    return [json.loads(r["extra_info"]["env_kwargs"]) for r in pq.read_table(folder / "test.parquet").to_pylist()]


def test_export_verl_takes_env_kwarg_as_eval_does(tmp_path, capsys):
    """--env-kwarg KEY=VALUE (repeatable, VALUE read as JSON) as eval and play take it, --env-kwargs JSON
    as before, and both together while no key gets two values."""
    common = ["export-verl", "AgentR1/Countdown-v0", "--split", "test", "--limit", "2"]
    assert cli_main([*common, "--out", str(tmp_path / "a"), "--env-kwarg", "difficulty=easy", "--env-kwarg", "max_turns=2"]) == 0
    assert cli_main([*common, "--out", str(tmp_path / "b"), "--env-kwargs", '{"difficulty": "easy", "max_turns": 2}']) == 0
    assert cli_main([*common, "--out", str(tmp_path / "c"), "--env-kwargs", '{"difficulty": "easy"}',
                     "--env-kwarg", "max_turns=2", "--env-kwarg", "difficulty=easy"]) == 0
    expected = [{"difficulty": "easy", "max_turns": 2, "split": "test"}] * 2
    assert _export_rows(tmp_path / "a") == _export_rows(tmp_path / "b") == _export_rows(tmp_path / "c") == expected
    assert capsys.readouterr().err == ""
