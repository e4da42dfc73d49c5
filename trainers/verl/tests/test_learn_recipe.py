"""The GSM8KTool learning recipe (examples/learn_smollm2-135m_gsm8k_tool.sh) on CPU, against real verl:

* validation metrics: three GSM8KTool episodes with known tool calls (valid, malformed, an unknown tool,
  a call on the last allowed turn) through verl's own ``AgentLoopWorker`` and the trainer's real
  ``_validate`` (verl's dataloader, reward extraction and per-data-source metrics) give the greedy
  accuracy, tool calls per episode, the tool-call validity (ratio of the sums) and the episode count;
* the held-out set: the first 512 test problems, every one kept by verl's ``RLHFDataset`` with the
  script's settings, where ``data.val_max_samples`` would draw a random subset;
* resume state: a LoRA checkpoint written by verl's own ``FSDPCheckpointManager`` (FSDP2 on CPU, gloo)
  becomes a peft adapter that peft loads as verl's ``lora_adapter_path`` does and agent-gym merges;
* the script: its config composes and verl's dataclasses accept it (verl 0.9), verl 0.7 is refused.

The one stand-in is the generation server (no vLLM on CPU): it answers each episode's turns with fixed
token ids, so the tool calls are known exactly.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from _verl_support import dataset_batch, gen_batch, mark_step_trainer, verl_config  # noqa: E402

from agent_gym_verl import agent_loop as al  # noqa: E402
from agent_gym_verl import compat  # noqa: E402
from agent_gym_verl.export import export_env  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "examples" / "learn_smollm2-135m_gsm8k_tool.sh"
ENV_ID = "AgentR1/GSM8KTool-v0"
VERL_09 = not compat.LEGACY_LAYOUT


def _call(expression: str, name: str = "calculate") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"expression": "{expression}"}}}}\n</tool_call>'


# Turns of each episode by task (max_turns=3). test-0 (answer 18): one valid call, then the answer.
# test-1 (answer 3): a valid and a malformed call in one turn, a call to an unknown tool, a wrong answer.
# test-2: calls on all three turns: two answered and valid, the third on the last allowed turn, unrun.
SCRIPTS = {
    "Janet": [_call("16 - 3 - 4"), "#### 18"],
    "robe": [_call("2 / 2") + "\n<tool_call>\nnot json\n</tool_call>", _call("2 + 1", name="search"), "#### 4"],
    "Josh": [_call("80000 + 50000"), _call("80000 * 1.5"), _call("200000 - 130000")],
}
# answered calls 1 + 3 + 2 = 6, of them valid 1 + 1 + 2 = 4: validity 4/6 (the mean of the per-episode
# ratios would be 7/9); parsed calls (info["tool_calls"]) 1 + 2 + 3; correct 1 of 3.


class ScriptedServer:
    """verl's server-manager call answered from SCRIPTS (by the question in the first prompt)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.turn: dict[str, int] = {}
        self.script: dict[str, list[str]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.script:
            text = self.tokenizer.decode(prompt_ids)
            self.script[request_id] = next(turns for key, turns in SCRIPTS.items() if key in text)
        k = self.turn.get(request_id, 0)
        self.turn[request_id] = k + 1
        ids = self.tokenizer.encode(self.script[request_id][k] + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


@pytest.fixture(scope="module")
def val_parquet(tmp_path_factory):
    out = tmp_path_factory.mktemp("val")
    return str(export_env(ENV_ID, "test", out, mode="step", limit=3, env_kwargs={"max_turns": 3}))


def _val_trainer(cfg, parquet, worker):
    """The agent-gym trainer with what its ``_validate`` uses; generation goes to ``worker``."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from agent_gym_verl.patches import agent_gym_trainer_class

    cls = agent_gym_trainer_class(compat.ray_trainer_module().RayPPOTrainer)
    trainer = object.__new__(cls)  # no Ray workers on CPU: validation's own code runs in this process
    trainer.config = cfg
    trainer.tokenizer = worker.tokenizer
    trainer.val_dataset = RLHFDataset(data_files=[parquet], tokenizer=worker.tokenizer, config=cfg.data, processor=None)
    trainer.val_dataloader = StatefulDataLoader(trainer.val_dataset, batch_size=len(trainer.val_dataset), shuffle=False,
                                                collate_fn=collate_fn)
    trainer.async_rollout_mode = True
    trainer.async_rollout_manager = SimpleNamespace(generate_sequences=lambda batch: asyncio.run(worker.generate_sequences(batch)))
    trainer.actor_rollout_wg = None
    trainer.use_rm = False
    trainer.global_steps = 0
    trainer.val_reward_fn = None  # verl 0.7: the rows carry rm_scores, which it extracts
    return trainer


def test_validation_logs_accuracy_tool_calls_and_validity_over_the_episodes(hf_model_dir, val_parquet, verl_tokenizer):
    cfg = mark_step_trainer(verl_config(
        hf_model_dir,
        "data.max_prompt_length=1024",  # the recipe's: later turns' contexts fit
        "actor_rollout_ref.rollout.val_kwargs.temperature=0",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "trainer.log_val_generations=0",
    ))
    al._ENV_POOL.clear()
    worker = compat.make_agent_loop_worker(cfg, ScriptedServer(verl_tokenizer))

    # The rows the agent loop returns carry the two counts per episode.
    out = asyncio.run(worker.generate_sequences(gen_batch(dataset_batch(cfg, val_parquet, worker.tokenizer, rows=[0, 1, 2]))))
    assert out.non_tensor_batch["tool_calls_valid"].tolist() == [1.0, 1.0, 2.0]
    assert out.non_tensor_batch["tool_calls_answered"].tolist() == [1.0, 3.0, 2.0]
    assert out.non_tensor_batch["tool_calls"].tolist() == [1.0, 2.0, 3.0]
    from agent_gym_verl.step_advantage import trajectory_metrics

    train = trajectory_metrics(out)  # the training log's agent_gym/* of the same rows
    assert train["agent_gym/tool_call_validity"] == pytest.approx(4 / 6)
    assert train["agent_gym/tool_calls_answered/mean"] == pytest.approx(2.0)

    # verl's own validation over the same three problems, with the trainer's additions.
    al._ENV_POOL.clear()
    trainer = _val_trainer(cfg, val_parquet, compat.make_agent_loop_worker(cfg, ScriptedServer(verl_tokenizer)))
    metrics = trainer._validate()
    src = ENV_ID
    assert metrics[f"val-core/{src}/acc/mean@1"] == pytest.approx(1 / 3)
    assert metrics[f"val-aux/{src}/tool_calls/mean@1"] == pytest.approx(2.0)
    assert metrics[f"val-aux/{src}/tool_calls_valid/mean@1"] == pytest.approx(4 / 3)
    assert metrics[f"val-aux/{src}/tool_calls_answered/mean@1"] == pytest.approx(2.0)
    assert metrics[f"val-aux/{src}/tool_call_validity"] == pytest.approx(4 / 6)
    assert metrics[f"val-aux/{src}/episodes"] == 3.0
    assert metrics[f"val-aux/{src}/truncated/mean@1"] == pytest.approx(1 / 3)  # test-2's unrun last call


def test_validation_metrics_skip_sources_without_answered_calls():
    from agent_gym_verl.trainer import validation_metrics

    metrics = {
        "val-aux/a/b/tool_calls_valid/mean@1": 0.0, "val-aux/a/b/tool_calls_answered/mean@1": 0.0,
        "val-aux/c/tool_calls_valid/mean@4": 3.0, "val-aux/c/tool_calls_answered/mean@4": 4.0,
        "val-aux/c/tool_calls_valid/mean@2": 1.0, "val-aux/c/tool_calls_answered/mean@2": 4.0,
    }
    assert validation_metrics(metrics, {"a/b": 7}) == {"val-aux/c/tool_call_validity": 0.75, "val-aux/a/b/episodes": 7.0}


def test_the_held_out_set_is_the_first_512_test_problems_where_val_max_samples_is_random(tmp_path, hf_model_dir):
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_model_dir)
    cfg = verl_config(hf_model_dir, "data.max_prompt_length=1024", "data.filter_overlong_prompts=True")
    val = str(export_env(ENV_ID, "test", tmp_path / "val512", mode="step", limit=512))
    data = RLHFDataset(data_files=[val], tokenizer=tok, config=cfg.data, processor=None)
    ids = [row["task_id"] for row in data.dataframe["extra_info"]]
    assert ids == [f"test-{i}" for i in range(512)]  # in order, none dropped as too long

    # What data.val_max_samples=512 on the whole test split gives: verl reads the training data's
    # shuffle (True by default) and, with no data.seed, draws a different subset on every run.
    full = str(export_env(ENV_ID, "test", tmp_path / "full", mode="step"))
    assert cfg.data.shuffle is True and cfg.data.get("seed") is None
    picks = [
        [row["task_id"] for row in RLHFDataset(data_files=[full], tokenizer=tok, config=cfg.data, processor=None,
                                               max_samples=512).dataframe["extra_info"]]
        for _ in range(2)
    ]
    assert picks[0] != picks[1] and picks[0] != ids


# -- resume state: verl's LoRA checkpoint -> peft adapter ------------------------------------------------------


def _tiny_base(folder: Path, seed: int = 0) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    return folder


def _write_verl_lora_checkpoint(base: Path, root: Path, step: int) -> dict[str, torch.Tensor]:
    """A verl actor checkpoint of a LoRA run, by verl's own FSDPCheckpointManager (LoRA-only save, as the
    recipe asks) around an FSDP2-sharded peft model, in a process of its own; returns the LoRA tensors."""
    root.mkdir(parents=True)
    code = f"""
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + os.getpid() % 300))
dist.init_process_group("gloo", rank=0, world_size=1)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM
from peft import LoraConfig, TaskType, get_peft_model
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
torch.manual_seed(1)
model = get_peft_model(AutoModelForCausalLM.from_pretrained({str(base)!r}),
                       LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, target_modules="all-linear", bias="none"))
for name, p in model.named_parameters():
    if "lora_B" in name:
        torch.nn.init.normal_(p, std=0.5)  # a trained adapter: B is no longer zero
torch.save({{n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}}, {str(root / "expected.pt")!r})
mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
for layer in model.base_model.model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
manager = FSDPCheckpointManager(model, optim, None, None, checkpoint_config={{
    "save_contents": ["model", "optimizer", "extra"], "load_contents": ["model"], "save_lora_only": True}})
manager.save_checkpoint({str(root / f"global_step_{step}" / "actor")!r}, global_step={step})
open({str(root / "latest_checkpointed_iteration.txt")!r}, "w").write("{step}")
dist.destroy_process_group()
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(root / "expected.pt")


def test_a_verl_lora_checkpoint_becomes_an_adapter_peft_and_agent_gym_load(tmp_path, monkeypatch):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = _tiny_base(tmp_path / "base")
    expected = _write_verl_lora_checkpoint(base, tmp_path / "ckpt", step=7)
    out = tmp_path / "adapter"
    command = [sys.executable, "-m", "agent_gym_verl.lora", str(tmp_path / "ckpt"), "--out", str(out), "--base", str(base),
               "--dtype", "float32"]
    # a fresh process without torch.distributed, as after the run
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if not VERL_09:  # verl 0.7 writes no lora_train_meta.json (nor LoRA-only shards): alpha must be given
        assert proc.returncode == 1 and "no lora_train_meta.json with lora_alpha; pass lora_alpha= (--lora-alpha)" in proc.stderr
        proc = subprocess.run([*command, "--lora-alpha", "8"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"adapter of step 7: {out} (r=4, lora_alpha=8, ")
    state = json.loads((out / "agent_gym_lora_state.json").read_text())
    assert state["step"] == 7 and state["r"] == 4 and state["base_model_name_or_path"] == str(base)
    assert len(state["base_fingerprint"]) == 2 * 7 + 5 + 1  # every tensor of the base (lm_head is tied)
    assert state["target_modules"] == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]

    # As verl's lora_adapter_path loads it: the adapter's tensors are the trained ones, exactly.
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(out), is_trainable=True)
    loaded = {n: p.detach() for n, p in model.named_parameters() if "lora_" in n}
    assert sorted(loaded) == sorted(expected)
    assert all(torch.equal(loaded[n], expected[n]) for n in expected)
    assert sum(p.requires_grad for p in model.parameters()) == len(expected)

    # The next part's script refuses a base other than the one the adapter was trained on.
    check = [sys.executable, "-m", "agent_gym_verl.lora", "--check-base", str(out), "--base"]
    proc = subprocess.run([*check, str(base)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == f"{out}: trained on {base}'s weights\n", proc.stderr[-2000:]
    other = _tiny_base(tmp_path / "other", seed=1)
    proc = subprocess.run([*check, str(other)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and f"was trained on other base weights than {other} holds" in proc.stderr
    # the same weights after a last-bit difference in every tensor (another machine's merge) still match
    from safetensors.torch import load_file, save_file

    from agent_gym_verl.lora import _same_weights, weights_fingerprint

    tensors = load_file(str(base / "model.safetensors"))
    nudged = {k: torch.nextafter(v, torch.full_like(v, float("inf"))) if i % 2 == 0 else v for i, (k, v) in enumerate(tensors.items())}
    (tmp_path / "nudged").mkdir()
    save_file(nudged, str(tmp_path / "nudged" / "model.safetensors"))
    assert _same_weights(weights_fingerprint(base), weights_fingerprint(tmp_path / "nudged")) == []
    differ = _same_weights(weights_fingerprint(base), weights_fingerprint(other))
    assert differ == sorted(k for k in tensors if "norm" not in k)  # both inits set the norms to 1

    # agent-gym merges a folder with adapter_config.json into the base it names.
    from agent_gym.models import load_causal_lm

    monkeypatch.setenv("AGENT_GYM_CACHE", str(tmp_path / "cache"))
    merged = load_causal_lm(str(out), dtype=torch.float32)
    x = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        assert torch.allclose(merged(x).logits, model(x).logits, atol=1e-5)


def test_exporting_a_checkpoint_without_lora_says_so(tmp_path):
    from agent_gym_verl.lora import CheckpointError, export_adapter

    actor = tmp_path / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    torch.save({"model.embed_tokens.weight": torch.zeros(2, 2)}, actor / "model_world_size_1_rank_0.pt")
    with pytest.raises(CheckpointError, match="holds no LoRA tensors"):
        export_adapter(tmp_path / "global_step_2", tmp_path / "out")
    with pytest.raises(CheckpointError, match="no such checkpoint folder"):
        export_adapter(tmp_path / "nowhere", tmp_path / "out")
    with pytest.raises(CheckpointError, match=r"no model_world_size_\*_rank_\*.pt here"):
        export_adapter(tmp_path, tmp_path / "out")


# -- the script ----------------------------------------------------------------------------------------------


def _dry_run(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "AGENT_GYM_VERL_DRY_RUN": "1", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], env=full_env, capture_output=True, text=True, timeout=300)


def _verl_args(stderr: str) -> list[str]:
    """The hydra options the script passed to agent_gym_verl.main_ppo (set -x echoes the command)."""
    line = next(line for line in stderr.splitlines() if line.startswith("+ python3 -m agent_gym_verl.main_ppo "))
    return shlex.split(line[2:])[3:]


@pytest.mark.skipif(not VERL_09, reason="the recipe's LoRA options are verl 0.9's")
@pytest.mark.parametrize("resume", [False, True])
def test_learn_script_config_is_one_verls_workers_accept(resume, tmp_path, hf_model_dir):
    from verl.utils.config import omega_conf_to_dataclass

    from agent_gym_verl.main_ppo import dry_run

    env = {"HOME": str(tmp_path), "MODEL_PATH": hf_model_dir}
    if resume:
        adapter = tmp_path / "runs" / "gsm8k_tool_learn" / "part1" / "adapter"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text("{}")
        env.update(PART="2", ADAPTER=str(adapter))
    proc = _dry_run(**env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "step-mode samples=segment," in proc.stdout and "token log-probs from agent_gym_verl.logprobs" in proc.stdout
    args = _verl_args(proc.stderr)
    opts = dict(a.split("=", 1) for a in args)
    assert opts["data.val_files"] == f"{tmp_path}/data/gsm8k_tool_val512/test.parquet"
    assert opts["data.train_files"] == f"{tmp_path}/data/gsm8k_tool/train.parquet"
    assert "data.val_max_samples" not in opts  # the held-out file is the set (see the test above)
    assert opts["actor_rollout_ref.rollout.val_kwargs.temperature"] == "0"
    assert (opts["data.train_batch_size"], opts["actor_rollout_ref.rollout.n"], opts["actor_rollout_ref.rollout.temperature"]) == ("64", "8", "0.8")
    assert opts["actor_rollout_ref.actor.optim.lr"] == "1e-4" and opts["actor_rollout_ref.model.lora_rank"] == "16"
    assert opts["data.seed"] == ("2" if resume else "1") and opts["trainer.experiment_name"].endswith("part" + ("2" if resume else "1"))
    assert opts["trainer.default_local_dir"] == f"{tmp_path}/runs/gsm8k_tool_learn/part{2 if resume else 1}/ckpt"
    assert ("actor_rollout_ref.model.lora_adapter_path" in opts) == resume
    cfg = dry_run(args)
    # What verl's engine workers build from the config (their dataclasses validate every field).
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    assert (model.lora_rank, model.lora_alpha, model.target_modules, model.lora.get("merge")) == (16, 32, "all-linear", True)
    assert model.lora_adapter_path == (str(adapter) if resume else None)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.checkpoint.save_lora_only is True and actor.ppo_mini_batch_size == 32  # of 64 prompts: 2 updates a step
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.val_kwargs.temperature == 0 and rollout.val_kwargs.n == 1 and rollout.n == 8


@pytest.mark.skipif(not VERL_09, reason="the recipe's LoRA options are verl 0.9's")
def test_learn_script_full_weights_variant_saves_the_hf_model(tmp_path, hf_model_dir):
    proc = _dry_run(HOME=str(tmp_path), MODEL_PATH=hf_model_dir, LORA_RANK="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    opts = dict(a.split("=", 1) for a in _verl_args(proc.stderr))
    assert opts["actor_rollout_ref.actor.optim.lr"] == "1e-5" and "actor_rollout_ref.model.lora_rank" not in opts
    assert opts["actor_rollout_ref.actor.checkpoint.save_contents"] == "[model,optimizer,extra,hf_model]"
    proc = _dry_run(HOME=str(tmp_path), MODEL_PATH=hf_model_dir, LORA_RANK="0", ADAPTER=str(tmp_path))
    assert proc.returncode == 2 and "ADAPTER needs LORA_RANK > 0" in proc.stderr


@pytest.mark.skipif(VERL_09, reason="verl 0.7 only")
def test_learn_script_refuses_verl_07(tmp_path):
    proc = _dry_run(HOME=str(tmp_path))
    assert proc.returncode == 1
    assert "learn_smollm2-135m_gsm8k_tool.sh needs verl >= 0.9 (found 0.7" in proc.stderr
