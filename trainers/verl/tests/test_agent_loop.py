"""The agent-gym agent loops under verl's own agent-loop machinery, on CPU.

Real: verl's ``AgentLoopWorker`` (its config file handling, agent-loop instantiation through hydra,
padding and batching into a ``DataProto``), verl's ``RLHFDataset`` and ``collate_fn`` on a parquet
written by ``agent_gym_verl.export``, the trainer's own ``_get_gen_batch``, the GSM8KTool env with its
calculator, and the SmolLM2-135M-Instruct model generating every turn but the first.

The only stand-in: no vLLM server. The server manager is ``HFServerManager`` (transformers, greedy,
CPU, at most 24 new tokens a turn, episodes of at most 3 turns). Greedy SmolLM2 does not call the calculator by itself, so the first
turn of each trajectory is scripted: a hermes ``<tool_call>`` for the task (its log-probs are still the
model's own); every later turn is the real model's output. That makes each episode multi-turn.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from _mcp_support import mcp_demo_servers  # noqa: E402
from _verl_support import (  # noqa: E402
    HFServerManager,
    dataset_batch,
    gen_batch,
    mark_step_trainer,
    verl_config,
)

from agent_gym_verl import agent_loop as al  # noqa: E402
from agent_gym_verl import compat  # noqa: E402
from agent_gym_verl.export import export_env  # noqa: E402

ENV_ID = "AgentR1/GSM8KTool-v0"
TOOL_CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "(16 - 3 - 4) * 2"}}\n</tool_call><|im_end|>'

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    return {
        # at most 3 turns: keeps the CPU time of real generation small
        mode: str(export_env(ENV_ID, "test", out / mode, mode=mode, limit=2, env_kwargs={"max_turns": 3}))
        for mode in ("concat", "step")
    }


def _unpad(out, row):
    b = out.batch
    width = b["prompts"].shape[1]
    attn = b["attention_mask"][row]
    p = b["prompts"][row][attn[:width].bool()].tolist()
    valid = attn[width:].bool()
    return {
        "prompt": p,
        "response": b["responses"][row][valid].tolist(),
        "mask": b["response_mask"][row][valid].tolist(),
        "logprobs": b["rollout_log_probs"][row][valid].tolist(),
        "rm_scores": b["rm_scores"][row][valid].tolist(),
    }


def _replay(tokenizer, env_kwargs, calls):
    """A fresh env stepped with the recorded actions: its final context, return, last info."""
    import agent_gym  # noqa: F401

    env = gym.make(ENV_ID, tokenizer=tokenizer, **env_kwargs)
    obs, _ = env.reset(options={"task_id": "test-0"})
    total, info = 0.0, {}
    for _, prompt, ids, _ in calls:
        assert obs["prompt_ids"].tolist() == prompt  # the server was asked for exactly the env's prompt
        obs, reward, terminated, truncated, info = env.step(np.asarray(ids))
        total += reward
        if terminated or truncated:
            break
    return list(env.unwrapped.context.ids), total, info


def _run(worker, batch):
    return asyncio.run(worker.generate_sequences(gen_batch(batch)))


def test_concat_mode_matches_env_token_for_token(hf_model_dir, data, smollm2_model, verl_tokenizer):
    cfg = verl_config(hf_model_dir)
    al._ENV_POOL.clear()
    script = verl_tokenizer.encode(TOOL_CALL, add_special_tokens=False)
    server = HFServerManager(smollm2_model, verl_tokenizer, scripted_first_turn=script)
    worker = compat.make_agent_loop_worker(cfg, server)
    tok = worker.tokenizer  # verl's own, loaded from model.path; the env is made with it
    batch = dataset_batch(cfg, data["concat"], tok, rows=[0])
    out = _run(worker, batch)

    assert len(out) == 1
    row = _unpad(out, 0)
    calls = [c for c in server.calls]
    assert len(calls) >= 2, "the episode must be multi-turn"
    p0 = len(row["prompt"])
    assert row["prompt"] == calls[0][1]

    # prompt + response == the env's final context, token for token (a fresh env replaying the actions).
    key = next(iter(al._ENV_POOL))
    make_kwargs = json.loads(key[1])
    final_ids, total, info = _replay(tok, make_kwargs, calls)
    assert row["prompt"] + row["response"] == final_ids
    pooled = al._ENV_POOL[key][0]
    assert list(pooled.unwrapped.context.ids) == final_ids

    # response_mask is 1 exactly on generated tokens; log-probs line up with the server's, 0.0 elsewhere.
    expected_mask = [0] * len(row["response"])
    expected_lp = [0.0] * len(row["response"])
    for _, prompt, ids, lps in calls:
        start = len(prompt) - p0
        for k, (t, lp) in enumerate(zip(ids, lps)):
            assert row["response"][start + k] == t
            expected_mask[start + k] = 1
            expected_lp[start + k] = lp
    assert row["mask"] == expected_mask
    assert row["logprobs"] == pytest.approx(expected_lp, abs=1e-5)
    assert sum(row["mask"]) == sum(len(c[2]) for c in calls)

    # reward and turns are the env's.
    assert sum(row["rm_scores"]) == pytest.approx(total)
    assert info["tool_calls"] >= 1 and info["turn"] == len(calls), (info, [(len(c[1]), c[2]) for c in calls])
    nt = out.non_tensor_batch
    assert nt["agent_gym_turns"][0] == info["turn"]
    assert nt["__num_turns__"][0] == 2 * info["turn"]  # user + T assistant + (T-1) tool replies
    assert nt["tool_calls"][0] == info["tool_calls"]
    assert nt["acc"][0] == float(bool(info["correct"]))
    assert nt["agent_gym_reward_components"][0] == info["reward_components"]


def test_step_mode_rows_expand_to_the_env_steps(hf_model_dir, data, smollm2_model, verl_tokenizer):
    from agent_gym_verl.step_advantage import STEP_KEY, TRAJ_KEY, expand_step_batch

    cfg = mark_step_trainer(verl_config(hf_model_dir), samples="step")
    al._ENV_POOL.clear()
    script = verl_tokenizer.encode(TOOL_CALL, add_special_tokens=False)
    server = HFServerManager(smollm2_model, verl_tokenizer, scripted_first_turn=script)
    worker = compat.make_agent_loop_worker(cfg, server)
    tok = worker.tokenizer
    batch = dataset_batch(cfg, data["step"], tok, rows=[0])
    out = _run(worker, batch)
    steps = out.non_tensor_batch[al.STEPS_KEY][0]
    calls = list(server.calls)
    assert len(steps) == len(calls) >= 2
    row = _unpad(out, 0)
    assert row["prompt"] == calls[0][1] and row["response"] == calls[0][2]  # the row is the first step

    expanded, stats = expand_step_batch(out, pad_token_id=tok.pad_token_id, pad_to_multiple=1)
    assert len(expanded) == len(calls)
    key = next(iter(al._ENV_POOL))
    final_ids, total, info = _replay(tok, json.loads(key[1]), calls)
    assert info["tool_calls"] >= 1 and info["turn"] == len(calls)
    for k, (_, prompt, ids, lps) in enumerate(calls):
        r = _unpad(expanded, k)
        assert expanded.non_tensor_batch[TRAJ_KEY][k] == 0 and expanded.non_tensor_batch[STEP_KEY][k] == k
        assert r["prompt"] == prompt and r["response"] == ids
        assert r["mask"] == [1] * len(ids)
        assert r["logprobs"] == pytest.approx(lps, abs=1e-5)
        # every step is a prefix of the final context (the env appended; no drift)
        assert final_ids[: len(prompt) + len(ids)] == prompt + ids
    assert sum(_unpad(expanded, len(calls) - 1)["rm_scores"]) == pytest.approx(total)
    assert expanded.batch["prompts"].shape[1] == max(len(c[1]) for c in calls)  # padded to the longest step
    assert 0.0 <= stats["agent_gym/step/padding_fraction"] < stats["agent_gym/step/padding_fraction_if_fixed"]


def test_step_loop_refuses_to_run_without_the_step_trainer(hf_model_dir):
    cfg = verl_config(hf_model_dir)
    from agent_gym.models import load_tokenizer

    with pytest.raises(RuntimeError, match="agent_gym_verl.main_ppo"):
        al.AgentGymStepAgentLoop(**compat.agent_loop_init_kwargs(cfg, None, load_tokenizer()))


def _register_rewrite_env():
    """GSM8KTool whose reply to a tool call rewrites the whole context (a new segment)."""
    from agent_gym_gsm8k.env import GSM8KToolEnv

    class RewriteEnv(GSM8KToolEnv):
        def respond(self, turn):
            reply = super().respond(turn)
            if reply.messages:
                ctx = self.context
                reply.rewrite = [*ctx.messages[:2], {"role": "user", "content": f"Calculator said: {reply.messages[0]['content']}"}]
            return reply

        async def arespond(self, turn):
            return self.respond(turn)

    if "AgentGymTest/Rewrite-v0" not in gym.registry:
        gym.register("AgentGymTest/Rewrite-v0", entry_point=RewriteEnv, disable_env_checker=True)


def test_concat_mode_rejects_rewritten_context_and_step_mode_takes_it(hf_model_dir, smollm2_model, verl_tokenizer):
    _register_rewrite_env()
    cfg = mark_step_trainer(verl_config(hf_model_dir, "data.max_response_length=64"), samples="step")
    tok = verl_tokenizer
    script = tok.encode(TOOL_CALL, add_special_tokens=False)
    row = {"extra_info": {"env_id": "AgentGymTest/Rewrite-v0", "task_id": "test-0", "env_kwargs": '{"split": "test"}'}}

    server = HFServerManager(smollm2_model, tok, max_new_tokens=8, scripted_first_turn=script)
    loop = al.AgentGymAgentLoop(**compat.agent_loop_init_kwargs(cfg, server, tok))
    with pytest.raises(al.ConcatModeError, match="step mode"):
        asyncio.run(loop.run({"temperature": 0.0, "logprobs": True}, **row))

    server = HFServerManager(smollm2_model, tok, max_new_tokens=8, scripted_first_turn=script)
    step_loop = al.AgentGymStepAgentLoop(**compat.agent_loop_init_kwargs(cfg, server, tok))
    output = asyncio.run(step_loop.run({"temperature": 0.0, "logprobs": True}, **row))
    steps = output.extra_fields[al.STEPS_KEY]
    assert len(steps) >= 2 and steps[0]["new_segment"] is True
    second = steps[1]["prompt_ids"].tolist()
    assert second[: len(output.prompt_ids)] != output.prompt_ids + output.response_ids  # really rewritten
    assert torch.tensor(second).numel() <= cfg.actor_rollout_ref.rollout.prompt_length

    # Segment samples (the default): the rewrite after the first step starts the second sample.
    mark_step_trainer(cfg, samples="segment")
    server = HFServerManager(smollm2_model, tok, max_new_tokens=8, scripted_first_turn=script)
    segment_loop = al.AgentGymStepAgentLoop(**compat.agent_loop_init_kwargs(cfg, server, tok))
    samples = asyncio.run(segment_loop.run({"temperature": 0.0, "logprobs": True}, **row)).extra_fields[al.STEPS_KEY]
    assert len(samples) >= 2 and samples[0]["steps"] == [0, 1]
    assert samples[0]["prompt_ids"].tolist() == steps[0]["prompt_ids"].tolist()
    assert samples[0]["response_ids"].tolist() == steps[0]["response_ids"].tolist()  # the rewrite ends it
    assert samples[1]["prompt_ids"].tolist() == second


class _ScriptedServer:
    """Answers every turn with the same token ids (no model): for the budget bookkeeping only."""

    def __init__(self, ids):
        self.ids = list(ids)
        self.max_tokens = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.max_tokens.append(sampling_params["max_tokens"])
        n = min(len(self.ids), sampling_params["max_tokens"])
        return TokenOutput(token_ids=self.ids[:n], log_probs=[-0.25] * n)


@pytest.mark.parametrize("response_length", [48, 90])
def test_concat_mode_cuts_at_response_length_with_mask_consistent(hf_model_dir, verl_tokenizer, response_length):
    """A policy that calls the tool every turn: each turn gets max_tokens = what is left of
    response_length, and the sample ends there with response, mask and log-probs cut alike."""
    cfg = verl_config(hf_model_dir, f"data.max_response_length={response_length}")
    script = verl_tokenizer.encode(TOOL_CALL, add_special_tokens=False)
    server = _ScriptedServer(script)
    loop = al.AgentGymAgentLoop(**compat.agent_loop_init_kwargs(cfg, server, verl_tokenizer))
    row = {"extra_info": {"env_id": ENV_ID, "task_id": "test-0", "env_kwargs": '{"split": "test"}'}}
    out = asyncio.run(loop.run({"temperature": 1.0, "logprobs": True}, **row))
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == response_length
    assert server.max_tokens[0] == response_length
    starts = [i for i, m in enumerate(out.response_mask) if m and (i == 0 or not out.response_mask[i - 1])]
    assert len(starts) == len(server.max_tokens) >= 1
    for start, budget in zip(starts, server.max_tokens):  # each turn gets what the earlier ones left
        assert budget == response_length - start
    # mask: 1 on the scripted turns (as far as they fit), 0 on tool replies; log-probs follow the mask
    for m, lp in zip(out.response_mask, out.response_logprobs):
        assert lp == (-0.25 if m else 0.0)
    assert out.response_ids[: len(script)] == script[:response_length] and all(out.response_mask[: min(len(script), response_length)])
    assert out.extra_fields["agent_gym_truncated_reason"] == "response_length"
    assert out.reward_score == 0.0


def test_segment_mode_gives_an_append_only_episode_as_its_concat_sample(hf_model_dir, data, smollm2_model, verl_tokenizer):
    """Step mode's default samples are segments: a GSM8KTool episode (the env only appends) is one
    sample, token for token, mask and log-probs included, the sample concat mode makes of it."""
    from agent_gym_verl.step_advantage import STEP_KEY, TRAJ_KEY, expand_step_batch

    script = verl_tokenizer.encode(TOOL_CALL, add_special_tokens=False)
    rows = {}
    for mode, cfg in (("concat", verl_config(hf_model_dir)), ("step", mark_step_trainer(verl_config(hf_model_dir)))):
        al._ENV_POOL.clear()
        server = HFServerManager(smollm2_model, verl_tokenizer, scripted_first_turn=script)
        worker = compat.make_agent_loop_worker(cfg, server)
        out = _run(worker, dataset_batch(cfg, data[mode], worker.tokenizer, rows=[0]))
        if mode == "step":
            assert len(server.calls) >= 2, "the episode must be multi-turn"
            out, stats = expand_step_batch(out, pad_token_id=worker.tokenizer.pad_token_id, pad_to_multiple=1)
            assert len(out) == 1 and out.non_tensor_batch[TRAJ_KEY][0] == 0 and out.non_tensor_batch[STEP_KEY][0] == 0
            assert stats["agent_gym/step/trained_tokens"] == len(_unpad(out, 0)["prompt"]) + len(_unpad(out, 0)["response"])
        rows[mode] = _unpad(out, 0)
    concat, segment = rows["concat"], rows["step"]
    assert segment["prompt"] == concat["prompt"]
    assert segment["response"] == concat["response"]
    assert segment["mask"] == concat["mask"] and 0 in segment["mask"]
    assert segment["logprobs"] == pytest.approx(concat["logprobs"], abs=1e-6)
    # The reward sits on the last policy token, as concat mode's rm_scores put it.
    assert sum(segment["rm_scores"]) == pytest.approx(sum(concat["rm_scores"]))
    last_policy = max(i for i, m in enumerate(segment["mask"]) if m)
    assert [i for i, r in enumerate(segment["rm_scores"]) if r] in ([], [last_policy])


def test_segment_mode_cuts_a_rewriting_game_at_each_rewrite(hf_model_dir, verl_tokenizer):
    """FrozenLake with context="last_k" (k=1) appends once, then rewrites its context after every step:
    one sample per segment, each with the exact ids of a replay of the same actions."""
    from agent_gym.rollout.episode import play_episode
    from agent_gym.rollout.policy import Generation
    from agent_gym_verl.step_advantage import STEP_KEY, TRAJ_KEY, expand_step_batch

    cfg = mark_step_trainer(verl_config(hf_model_dir, "data.max_prompt_length=1024"))
    script = verl_tokenizer.encode("<action>left</action><|im_end|>", add_special_tokens=False)
    server = _ScriptedServer(script)
    kwargs = {"context": "last_k", "last_k": 1, "max_turns": 5}
    row = {"extra_info": {"env_id": "AgentR1/FrozenLake-v0", "env_kwargs": json.dumps(kwargs)}, "index": 3}
    loop = al.AgentGymStepAgentLoop(**compat.agent_loop_init_kwargs(cfg, server, verl_tokenizer))
    out = asyncio.run(loop.run({"temperature": 1.0, "logprobs": True}, **row))
    samples = out.extra_fields[al.STEPS_KEY]

    import agent_gym  # noqa: F401

    env = gym.make("AgentR1/FrozenLake-v0", tokenizer=verl_tokenizer, **kwargs)

    async def generate(prompt):
        return Generation(list(script), [-0.25] * len(script), "stop")

    replay = asyncio.run(play_episode(env, generate, seed=3))
    segments = replay.segments()
    assert len(replay.steps) == 5 and len(segments) == len(samples) == 4  # steps 0-1, then one per step
    for sample, segment in zip(samples, segments):
        assert sample["prompt_ids"].tolist() == segment.prompt_ids
        assert sample["response_ids"].tolist() == segment.response_ids
        assert sample["response_mask"].tolist() == segment.response_mask

    # The row as verl's worker pads it (the first step), carrying the samples.
    p, r = torch.tensor([out.prompt_ids]), torch.tensor([out.response_ids])
    ones = torch.ones_like(torch.cat([p, r], 1))
    steps_col = np.empty(1, dtype=object)
    steps_col[0] = samples
    batch = compat.DataProto.from_dict(
        tensors={"prompts": p, "responses": r, "response_mask": torch.ones_like(r), "input_ids": torch.cat([p, r], 1),
                 "attention_mask": ones, "position_ids": ones.cumsum(1) - 1},
        non_tensors={al.STEPS_KEY: steps_col, "uid": np.asarray(["u"], dtype=object)},
    )
    expanded, stats = expand_step_batch(batch, pad_token_id=verl_tokenizer.pad_token_id)
    assert len(expanded) == 4 and expanded.non_tensor_batch[TRAJ_KEY].tolist() == [0] * 4
    assert expanded.non_tensor_batch[STEP_KEY].tolist() == [0, 1, 2, 3]
    for k, segment in enumerate(segments):
        r = _unpad(expanded, k)
        assert r["prompt"] == segment.prompt_ids and r["response"] == segment.response_ids
        assert r["mask"] == segment.response_mask
        assert r["logprobs"] == [(-0.25 if m else 0.0) for m in segment.response_mask]


class _TurnsServer:
    """Answers the k-th call with the k-th of ``turns`` (token ids, no model); ``[]`` is an empty
    generation, what a policy that stops at once returns."""

    def __init__(self, turns):
        self.turns = [list(t) for t in turns]
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        ids = self.turns[self.calls]
        self.calls += 1
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


def _play_scripted_row(cfg, parquet, actions):
    """Row 0 of ``parquet`` through verl's worker, the policy answering ``actions`` in turn: verl's output,
    its unpadded row, the pool's env and the actions played. Checks what every such row must hold: the row is the env's
    context token for token, and exactly the played actions' ids are trained (no env id)."""
    al._ENV_POOL.clear()
    server = _TurnsServer(actions)
    worker = compat.make_agent_loop_worker(cfg, server)
    out = _run(worker, dataset_batch(cfg, parquet, worker.tokenizer, rows=[0]))
    row = _unpad(out, 0)
    [key] = list(al._ENV_POOL)
    [env] = al._ENV_POOL[key]
    context = list(env.unwrapped.context.ids)
    played = actions[: server.calls]
    assert row["prompt"] + row["response"] == context[: len(row["prompt"]) + len(row["response"])]
    assert sum(row["mask"]) == sum(len(a) for a in played)
    return out, row, env, played


@pytest.mark.parametrize("samples", ["segment", "step"])
def test_an_empty_generation_keeps_its_reward_in_training(hf_model_dir, verl_tokenizer, tmp_path, samples):
    """FrozenLake with invalid_action_penalty=0.5: an empty generation is an invalid move (-0.5). With
    turns empty, a move, empty, the episode's return is -1.0; verl's own worker pads the row (its first
    step: an empty response), the trainer's expansion gives both rewards to the one action's tokens (the
    first on its first id: no policy id precedes it; the second on its last), and GRPO, for a group of
    one trajectory, gives every trained token the whole return as its advantage."""
    from agent_gym_verl.step_advantage import PAD_KEY, compute_step_advantage, expand_step_batch

    kwargs = {"max_turns": 3, "invalid_action_penalty": 0.5}
    parquet = str(export_env("AgentR1/FrozenLake-v0", "test", tmp_path / "data", mode="step", limit=1, env_kwargs=kwargs))
    cfg = mark_step_trainer(verl_config(hf_model_dir), samples=samples)
    move = verl_tokenizer.encode("<action>left</action><|im_end|>", add_special_tokens=False)
    al._ENV_POOL.clear()
    server = _TurnsServer([[], move, []])
    worker = compat.make_agent_loop_worker(cfg, server)
    batch = dataset_batch(cfg, parquet, worker.tokenizer, rows=[0])
    out = _run(worker, batch)
    out.non_tensor_batch["uid"] = batch.non_tensor_batch["uid"]  # the trainer's batch.union(...)
    assert server.calls == 3
    # The row (the first step, an empty action) as verl's worker pads it: one padding id, outside the loss.
    row = _unpad(out, 0)
    pad = worker.tokenizer.pad_token_id
    assert (row["response"], row["mask"], row["logprobs"], row["rm_scores"]) == ([pad], [0], [0.0], [-1.0])
    carried = out.non_tensor_batch[al.STEPS_KEY][0]
    assert len(carried) == (1 if samples == "segment" else 3)

    expanded, _ = expand_step_batch(out, pad_token_id=worker.tokenizer.pad_token_id, pad_to_multiple=1)
    b, nt = expanded.batch, expanded.non_tensor_batch
    assert not nt[PAD_KEY].any()
    policy = b["response_mask"].bool()
    assert int(policy.sum()) == len(move)
    assert b["rm_scores"][policy].tolist() == [-0.5] + [0.0] * (len(move) - 2) + [-0.5]
    assert float(b["rm_scores"].sum()) == pytest.approx(-1.0)

    b["token_level_rewards"] = b["rm_scores"].clone()
    compute_step_advantage(expanded, "grpo", config=_algo_config("grpo"))
    assert b["advantages"][policy].tolist() == pytest.approx([-1.0] * len(move), abs=1e-5)
    assert (b["advantages"][~policy] == 0).all()


def test_an_empty_generation_is_a_concat_row_verl_can_pad(hf_model_dir, verl_tokenizer, tmp_path):
    """Concat mode, one turn, an empty generation (FrozenLake: an invalid move, -0.5, then the turn limit):
    no response id at all. verl 0.7 cannot pad an empty response; the row holds one padding id with
    response_mask 0 and log-prob 0.0, and verl's score -0.5 on it."""
    kwargs = {"max_turns": 1, "invalid_action_penalty": 0.5}
    parquet = str(export_env("AgentR1/FrozenLake-v0", "test", tmp_path / "data", mode="concat", limit=1, env_kwargs=kwargs))
    cfg = verl_config(hf_model_dir)
    al._ENV_POOL.clear()
    worker = compat.make_agent_loop_worker(cfg, _TurnsServer([[]]))
    out = _run(worker, dataset_batch(cfg, parquet, worker.tokenizer, rows=[0]))
    row = _unpad(out, 0)
    assert (row["response"], row["mask"], row["logprobs"]) == ([worker.tokenizer.pad_token_id], [0], [0.0])
    assert row["rm_scores"] == [-0.5] and float(out.batch["rm_scores"].sum()) == -0.5


def _algo_config(estimator):
    from omegaconf import OmegaConf

    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(OmegaConf.create({"_target_": "verl.trainer.config.AlgoConfig", "adv_estimator": estimator}), AlgoConfig)


def test_a_concat_episode_that_ends_on_empty_actions_keeps_its_reward_on_a_trained_token(hf_model_dir, verl_tokenizer, tmp_path):
    """Concat mode, FrozenLake with invalid_action_penalty=0.5, turns: a move, empty, empty (return -1.0).
    verl puts a row's score on its last response id, and its GAE and REINFORCE++ skip every reward on an
    id outside response_mask. So the sample ends at its last policy id (the env replies the policy answered
    with nothing carry no loss and condition no trained id): the score lands on the move's last id, and
    verl's own estimators give each of the move's ids the whole return."""
    kwargs = {"max_turns": 3, "invalid_action_penalty": 0.5}
    parquet = str(export_env("AgentR1/FrozenLake-v0", "test", tmp_path / "data", mode="concat", limit=1, env_kwargs=kwargs))
    cfg = verl_config(hf_model_dir)
    move = verl_tokenizer.encode("<action>left</action><|im_end|>", add_special_tokens=False)
    al._ENV_POOL.clear()
    server = _TurnsServer([move, [], []])
    worker = compat.make_agent_loop_worker(cfg, server)
    out = _run(worker, dataset_batch(cfg, parquet, worker.tokenizer, rows=[0]))
    assert server.calls == 3 and float(out.batch["rm_scores"].sum()) == pytest.approx(-1.0)
    row = _unpad(out, 0)
    assert (row["response"], row["mask"], row["logprobs"]) == (move, [1] * len(move), [-0.25] * len(move))
    assert row["rm_scores"] == [0.0] * (len(move) - 1) + [-1.0]

    base = compat.ray_trainer_module().compute_advantage
    policy = out.batch["response_mask"].bool()
    for estimator in ("gae", "reinforce_plus_plus", "grpo"):
        data = out.select(batch_keys=["responses", "response_mask", "attention_mask", "rm_scores"], deepcopy=True)
        data.non_tensor_batch["uid"] = np.asarray(["u"], dtype=object)
        data.batch["token_level_rewards"] = data.batch["rm_scores"].clone()
        data.batch["values"] = torch.zeros_like(data.batch["token_level_rewards"])
        data = base(data, adv_estimator=estimator, gamma=1.0, lam=1.0, config=_algo_config(estimator))
        # GRPO sums a row's rewards wherever they sit (a group of one: the advantage is the return);
        # GAE and REINFORCE++ carry only rewards on policy ids back to the earlier ids.
        key = "advantages" if estimator == "grpo" else "returns"
        assert data.batch[key][policy].tolist() == pytest.approx([-1.0] * len(move), abs=1e-5), estimator


@pytest.mark.parametrize(
    "env_id, env_kwargs, turns",
    [
        ("AgentR1/CustomerService-v0", {"difficulty": "easy", "max_turns": 3},
         ['<tool_call>\n{"name": "get_product", "arguments": {"product_id": "P0"}}\n</tool_call>',
          "Could you give me your email address?", "Thank you, anything else?"]),
        ("AgentR1/SearchQA-v0", {"difficulty": "easy", "max_turns": 3, "top_k": 1},
         # the exported task asks who wrote The Cartographer of Leheith: Selka Gebov; one of two words is token F1 2/3
         ['<tool_call>\n{"name": "search", "arguments": {"query": "founded"}}\n</tool_call>', "<answer>Selka</answer>"]),
        # the demo: test-0 asks what 6 flanges cost; the warehouse MCP server (a stdio process) prices one at 17
        ("AgentR1/MCPTask-v0", {"max_turns": 3},
         ['<tool_call>\n{"name": "price", "arguments": {"item": "flanges"}}\n</tool_call>', "6 * 17 = 102\n#### 102"]),
        # a shell in the task's sandboxed copy of the project; the answer without a call ends the episode and
        # the project's hidden tests grade the unfixed copy
        ("AgentR1/SWE-v0", {"difficulty": "easy", "max_turns": 3},
         ['<tool_call>\n{"name": "bash", "arguments": {"command": "ls LICENSE README.rst"}}\n</tool_call>',
          "I could not find the bug."]),
    ],
)
def test_concat_mode_plays_the_catalogue_envs_token_for_token(hf_model_dir, verl_tokenizer, tmp_path, env_id, env_kwargs, turns):
    """The tool envs of the catalogue under verl's worker: the row is the env's context (tool results, the
    simulated customer's turns, the MCP server's answers and SWE-v0's shell output as env ids, outside
    response_mask), the score its return. MCPTask-v0's server process lives while an env of the pool uses it
    and is gone once the pool is closed."""
    if env_id == "AgentR1/SearchQA-v0":
        pytest.importorskip("bm25s")
    if env_id == "AgentR1/MCPTask-v0":
        pytest.importorskip("mcp", reason="the MCP SDK (pip install mcp; .ci/verl.sh installs it)")
        pytest.importorskip("agent_gym_mcp", reason="the MCPTask-v0 env package (pip install -e envs/mcp)")
        assert mcp_demo_servers() == []
    parquet = str(export_env(env_id, "test", tmp_path / "data", mode="concat", limit=1, env_kwargs=env_kwargs))
    cfg = verl_config(hf_model_dir, "data.max_prompt_length=2048", "data.max_response_length=1024")  # the shop's policy prompt
    actions = [verl_tokenizer.encode(t + "<|im_end|>", add_special_tokens=False) for t in turns]
    out, row, _, played = _play_scripted_row(cfg, parquet, actions)
    assert len(row["response"]) > sum(len(a) for a in played)  # the env's replies are in the row, masked
    assert out.non_tensor_batch["tool_calls"][0] == 1.0
    # answer_f1: SearchQA's graded token F1; the 0/1 correctness where an env grades none
    expected_f1 = 2 / 3 if env_id == "AgentR1/SearchQA-v0" else out.non_tensor_batch["acc"][0]
    assert out.non_tensor_batch["answer_f1"][0] == pytest.approx(expected_f1)
    if env_id == "AgentR1/SWE-v0":
        reply = verl_tokenizer.decode(row["response"][len(actions[0]) : len(row["response"]) - len(actions[1])])
        assert "<|im_start|>tool\nLICENSE\nREADME.rst<|im_end|>" in reply  # `ls` in the episode's copy, as env ids
        assert sum(row["rm_scores"]) == 0.0 and out.non_tensor_batch["acc"][0] == 0.0  # the bug is still there
        al._ENV_POOL.clear()  # closes the pooled env: its sandbox session ends
    if env_id == "AgentR1/MCPTask-v0":
        from agent_gym.tools import mcp as agent_mcp

        reply = verl_tokenizer.decode(row["response"][len(actions[0]) : len(row["response"]) - len(actions[1])])
        assert "\n17<|im_end|>" in reply  # the server's answer, as a tool turn of env ids
        assert sum(row["rm_scores"]) == 1.0 and out.non_tensor_batch["acc"][0] == 1.0
        assert len(mcp_demo_servers()) == 1  # the read-only demo server, shared by the pool's env
        al._ENV_POOL.clear()  # closes the pooled env: the last user of the server
        assert agent_mcp.live_server_count() == 0
        assert _still_running(mcp_demo_servers()) == []


def _still_running(processes):
    """Those of ``processes`` alive after up to 10 s: ``close()`` returns once the SDK saw each server exit;
    the reaping is the event loop's, a moment later."""
    import psutil

    return psutil.wait_procs(processes, timeout=10)[1]


@pytest.mark.parametrize("mode", ["concat", "step"])
def test_agent_program_rows_play_the_program_through_verls_worker(hf_model_dir, verl_tokenizer, tmp_path, mode):
    """AgentProgram-v0 (the demo: a calculator agent program behind the env's OpenAI-compatible endpoint)
    under verl's own worker. The row's prompt column is the task's question only; the episode is the
    program's: its first request (system prompt and tools) is the prompt the worker trains from, the
    calculator's answer comes back as env ids outside response_mask, and the program's result is graded:
    seed 0 draws task test-85062, 4 * 41 = 164."""
    parquet = str(export_env("AgentR1/AgentProgram-v0", "test", tmp_path / "data", mode=mode, limit=1, env_kwargs={"max_turns": 3}))
    import pandas as pd

    [prompt] = pd.read_parquet(parquet)["prompt"].tolist()
    assert [dict(m) for m in prompt] == [{"role": "user", "content": "What is 4 * 41?"}]
    turns = ['<tool_call>\n{"name": "calculate", "arguments": {"expression": "4 * 41"}}\n</tool_call>',
             "4 * 41 = 164\n#### 164"]
    actions = [verl_tokenizer.encode(t + "<|im_end|>", add_special_tokens=False) for t in turns]
    cfg = verl_config(hf_model_dir)
    if mode == "step":
        cfg = mark_step_trainer(cfg, samples="step")
    al._ENV_POOL.clear()
    server = _TurnsServer(actions)
    worker = compat.make_agent_loop_worker(cfg, server)
    out = _run(worker, dataset_batch(cfg, parquet, worker.tokenizer, rows=[0]))
    assert server.calls == 2
    [key] = list(al._ENV_POOL)
    [env] = al._ENV_POOL[key]
    context = list(env.unwrapped.context.ids)
    opening = verl_tokenizer.decode(context).split("What is 4 * 41?")[0]  # the program's system prompt and tools
    assert opening.startswith("<|im_start|>system\nYou are a helpful assistant who is good at arithmetic.")
    assert '"name": "calculate"' in opening
    assert out.non_tensor_batch["acc"].tolist() == [1.0] * len(out)
    if mode == "concat":
        row = _unpad(out, 0)
        assert row["prompt"] + row["response"] == context[: len(row["prompt"]) + len(row["response"])]
        assert sum(row["mask"]) == sum(len(a) for a in actions)  # both actions trained, no env id
        reply = verl_tokenizer.decode(row["response"][len(actions[0]) : len(row["response"]) - len(actions[1])])
        assert "<|im_start|>tool\n164<|im_end|>" in reply  # the program's calculator, as env ids
        assert sum(row["rm_scores"]) == 1.0
    else:  # one sample per request of the program: each sample's prompt is that request's rendering
        from agent_gym_verl.step_advantage import expand_step_batch

        assert len(out.non_tensor_batch[al.STEPS_KEY][0]) == 2
        expanded, _ = expand_step_batch(out, pad_token_id=worker.tokenizer.pad_token_id, pad_to_multiple=1)
        rows = [_unpad(expanded, k) for k in range(2)]
        assert [r["response"] for r in rows] == actions and [r["mask"] for r in rows] == [[1] * len(a) for a in actions]
        for r in rows:  # every request is a prefix of the episode's context (the program appended; no drift)
            assert context[: len(r["prompt"]) + len(r["response"])] == r["prompt"] + r["response"]
        assert verl_tokenizer.decode(rows[1]["prompt"][len(rows[0]["prompt"]) + len(actions[0]):]) == "\n<|im_start|>tool\n164<|im_end|>\n<|im_start|>assistant\n"
        assert [sum(r["rm_scores"]) for r in rows] == [0.0, 1.0]
    al._ENV_POOL.clear()


def test_a_two_player_game_view_plays_through_verls_worker(hf_model_dir, verl_tokenizer, tmp_path):
    """KuhnPoker-v0 (a two-player game against its scripted random opponent) under verl's worker: the row is
    the env's context token for token, the opponent's reply is env ids outside response_mask, and the score
    is what the same moves give a fresh env of the row's task."""
    pytest.importorskip("pyspiel", reason="KuhnPoker-v0 plays by OpenSpiel's rules: pip install open_spiel (.ci/verl.sh: verl 0.9.1's venv)")
    kwargs = {"role": "player_0"}
    parquet = str(export_env("AgentR1/KuhnPoker-v0", "test", tmp_path / "data", mode="concat", limit=1, env_kwargs=kwargs))
    import pandas as pd

    [extra] = pd.read_parquet(parquet)["extra_info"].tolist()
    moves = ["<move>pass</move>", "<move>bet</move>"]  # a pass; if the opponent bets, a call
    actions = [verl_tokenizer.encode(m + "<|im_end|>", add_special_tokens=False) for m in moves]
    cfg = verl_config(hf_model_dir)
    out, row, env, played = _play_scripted_row(cfg, parquet, actions)  # the policy's moves trained, the opponent's not

    fresh = gym.make("AgentR1/KuhnPoker-v0", tokenizer=verl_tokenizer, **json.loads(extra["env_kwargs"]))
    fresh.reset(options={"task_id": extra["task_id"]})
    total = 0.0
    for ids in played:
        _, reward, terminated, truncated, info = fresh.step(np.asarray(ids))
        total += reward
        if terminated or truncated:
            break
    assert terminated and info["outcome"] in ("win", "loss")
    assert sum(row["rm_scores"]) == pytest.approx(total) and out.non_tensor_batch["acc"][0] == float(info["outcome"] == "win")
    al._ENV_POOL.clear()
