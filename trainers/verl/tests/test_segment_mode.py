"""Segment samples against per-step samples: the same advantage on every policy token, for every
estimator step mode supports, on batches of append-only and context-rewriting trajectories with
outcome and intermediate rewards.

The trajectories are hand-built ``Trajectory`` objects (the no-drift invariant holds inside each
segment; a rewrite starts a new prompt). Both layouts come from ``agent_loop.step_samples`` and go
through the real ``expand_step_batch`` and ``compute_step_advantage`` (verl's own estimators on the
trajectory view). Per-token inputs that a critic or the actor would compute (values, old log-probs,
sum of squared probabilities) are a deterministic function of the token's context: a segment row and a
step row hold the same context for every policy token, so a model would give both the same numbers.

GAE is defined here as verl computes it on the trajectory view: over the trajectory's policy tokens in
order, with each token's value (of its own context) and the rewards on each step's last token; env
tokens are not time steps. The test checks that both layouts give exactly that.
"""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent_gym.trajectory import StepRecord, Trajectory  # noqa: E402
from agent_gym_verl import compat  # noqa: E402
from agent_gym_verl.agent_loop import STEPS_KEY, step_samples  # noqa: E402
from agent_gym_verl.step_advantage import (  # noqa: E402
    PAD_KEY,
    STEP_KEY,
    TRAJ_KEY,
    compute_step_advantage,
    estimator_support,
    expand_step_batch,
)


def _trajectory(rng, tid: str, n_steps: int, rewrite_after: set[int], rewards: list[float]) -> Trajectory:
    """Steps whose prompts extend the previous prompt + action + an env reply, except after a rewrite."""
    context = list(rng.integers(10, 1000, size=int(rng.integers(4, 9))))
    steps = []
    for k in range(n_steps):
        action = list(rng.integers(10, 1000, size=int(rng.integers(2, 6))))
        steps.append(
            StepRecord(
                trajectory_id=tid,
                step=k,
                prompt_ids=[int(t) for t in context],
                response_ids=[int(t) for t in action],
                response_logprobs=[float(-x) for x in rng.random(len(action))],
                reward=rewards[k],
                terminated=k == n_steps - 1,
                truncated=False,
                new_segment=k in rewrite_after,
            )
        )
        reply = list(rng.integers(10, 1000, size=int(rng.integers(1, 5))))
        if k in rewrite_after:  # a fresh, shorter context
            context = list(rng.integers(10, 1000, size=int(rng.integers(3, 7))))
        else:
            context = context + action + reply
    return Trajectory(id=tid, env_id="E", steps=steps)


# uid -> trajectories: (steps, steps after which the env rewrites, reward per step)
SPEC = {
    "A": [(1, set(), [1.0]), (3, set(), [0.0, 0.0, 0.0]), (4, {1}, [0.0, 0.0, 0.0, 1.0]), (2, set(), [0.0, 1.0])],
    "B": [(4, {0, 2}, [0.0, 0.5, 0.0, 1.0]), (1, set(), [0.0]), (3, set(), [0.2, 0.0, 0.0]), (5, {3}, [0.0] * 5)],
}


def _trajectories(seed: int = 0) -> list[tuple[str, Trajectory]]:
    rng = np.random.default_rng(seed)
    out = []
    for uid, specs in SPEC.items():
        for j, (n, rewrites, rewards) in enumerate(specs):
            out.append((uid, _trajectory(rng, f"{uid}{j}", n, rewrites, rewards)))
    return out


def _batch(trajectories, kind: str):
    """Trajectory rows as verl's worker pads them (the first step as the row), carrying the samples."""
    n = len(trajectories)
    p_w, r_w = 64, 16
    prompts, responses = torch.zeros((n, p_w), dtype=torch.long), torch.zeros((n, r_w), dtype=torch.long)
    attn, mask = torch.zeros((n, p_w + r_w), dtype=torch.long), torch.zeros((n, r_w), dtype=torch.long)
    col = np.empty(n, dtype=object)
    for i, (_, traj) in enumerate(trajectories):
        p, r = traj.steps[0].prompt_ids, traj.steps[0].response_ids
        prompts[i, p_w - len(p) :] = torch.tensor(p)
        responses[i, : len(r)] = torch.tensor(r)
        attn[i, p_w - len(p) : p_w + len(r)] = 1
        mask[i, : len(r)] = 1
        col[i] = step_samples(traj, kind)
    batch = compat.DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "response_mask": mask,
                 "input_ids": torch.cat([prompts, responses], 1), "attention_mask": attn,
                 "position_ids": torch.clamp(attn.cumsum(1) - 1, min=0)},
        non_tensors={"uid": np.asarray([u for u, _ in trajectories], dtype=object), STEPS_KEY: col},
    )
    expanded, stats = expand_step_batch(batch, pad_token_id=0, pad_to_multiple=4)
    b = expanded.batch
    b["token_level_rewards"] = b["rm_scores"].clone()
    # What a model computes from a token's context: here a fixed function of the context's ids.
    shape = b["response_mask"].shape
    values, old, pi2 = torch.zeros(shape), torch.zeros(shape), torch.zeros(shape)
    p_len = b["prompts"].shape[1]
    for row in range(shape[0]):
        ids = b["input_ids"][row][b["attention_mask"][row].bool()].tolist()
        n_prompt = int(b["attention_mask"][row][:p_len].sum())
        for j in range(int(b["attention_mask"][row][p_len:].sum())):
            context = ids[: n_prompt + j + 1]
            h = (sum((k + 1) * t for k, t in enumerate(context)) % 9973) / 9973
            values[row, j], old[row, j], pi2[row, j] = h - 0.5, -h, 0.1 + h / 2
    b["values"] = values * b["response_mask"]
    b["old_log_probs"] = old
    b["sum_pi_squared"] = pi2
    return expanded, stats


def _per_trajectory(expanded, key: str) -> dict[int, list[float]]:
    """A per-token tensor on each trajectory's policy tokens, in step order."""
    nt, b = expanded.non_tensor_batch, expanded.batch
    rows: dict[int, list[tuple[int, int]]] = {}
    for row in range(len(expanded)):
        if not nt[PAD_KEY][row]:
            rows.setdefault(int(nt[TRAJ_KEY][row]), []).append((int(nt[STEP_KEY][row]), row))
    out = {}
    for t, items in rows.items():
        values: list[float] = []
        for _, row in sorted(items):
            values.extend(b[key][row][b["response_mask"][row].bool()].tolist())
        out[t] = values
    return out


def _algo_config(**kw):
    from omegaconf import OmegaConf

    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(OmegaConf.create({"_target_": "verl.trainer.config.AlgoConfig", **kw}), AlgoConfig)


SUPPORTED = sorted(k for k, v in estimator_support().items() if v is None)


def test_segments_are_fewer_samples_and_fewer_tokens():
    trajectories = _trajectories()
    segment, s_stats = _batch(trajectories, "segment")
    step, p_stats = _batch(trajectories, "step")
    n_steps = sum(len(t.steps) for _, t in trajectories)
    n_segments = sum(len(t.segments()) for _, t in trajectories)
    assert (s_stats["agent_gym/step/samples"], p_stats["agent_gym/step/samples"]) == (n_segments, n_steps)
    assert n_segments == 8 + 1 + 2 + 1  # one per trajectory plus one per rewrite
    assert s_stats["agent_gym/step/trained_tokens"] < p_stats["agent_gym/step/trained_tokens"]
    # Every policy token is in both, with its sampling log-prob.
    seg_lp, step_lp = _per_trajectory(segment, "rollout_log_probs"), _per_trajectory(step, "rollout_log_probs")
    assert seg_lp.keys() == step_lp.keys()
    for t in seg_lp:
        assert seg_lp[t] == pytest.approx(step_lp[t])


def test_intermediate_rewards_sit_on_their_own_steps_last_token():
    trajectories = _trajectories()
    segment, _ = _batch(trajectories, "segment")
    rewards = _per_trajectory(segment, "token_level_rewards")
    for t, (_, traj) in enumerate(trajectories):
        expected: list[float] = []
        for record in traj.steps:
            expected.extend([0.0] * (len(record.response_ids) - 1) + [record.reward])
        assert rewards[t] == pytest.approx(expected), traj.id


@pytest.mark.parametrize("estimator", SUPPORTED)
def test_segment_and_step_samples_give_every_policy_token_the_same_advantage(estimator):
    trajectories = _trajectories()
    results = {}
    for kind in ("segment", "step"):
        expanded, _ = _batch(trajectories, kind)
        cfg = _algo_config(adv_estimator=estimator)
        compute_step_advantage(expanded, estimator, gamma=0.9, lam=0.95, config=cfg)
        adv = expanded.batch["advantages"]
        assert (adv[~expanded.batch["response_mask"].bool()] == 0).all(), f"{kind}: advantage on an env token"
        results[kind] = (_per_trajectory(expanded, "advantages"), _per_trajectory(expanded, "returns"))
    (seg_adv, seg_ret), (step_adv, step_ret) = results["segment"], results["step"]
    assert seg_adv.keys() == step_adv.keys()
    for t in seg_adv:
        assert seg_adv[t] == pytest.approx(step_adv[t], abs=1e-5), (estimator, t)
        assert seg_ret[t] == pytest.approx(step_ret[t], abs=1e-5), (estimator, t)
    assert any(abs(v) > 0 for vals in seg_adv.values() for v in vals), f"{estimator}: all-zero advantages"


@pytest.mark.slow
def test_one_optimizer_step_of_smollm2_on_a_segment_batch(smollm2_model, verl_tokenizer, tmp_path):
    """verl's policy loss (core_algos, vanilla PPO clip, token-mean) on a segment batch with GRPO
    advantages, then one AdamW step of the real model on CPU: finite loss, the parameters move, and env
    tokens carry no gradient signal (their advantage is 0 and they are outside the loss mask)."""
    import copy

    from _verl_support import one_policy_update

    model = copy.deepcopy(smollm2_model).train()
    expanded, _ = _batch(_trajectories(), "segment")
    compute_step_advantage(expanded, "grpo", config=_algo_config(adv_estimator="grpo"))
    b = expanded.batch
    env_tokens = b["attention_mask"][:, -b["responses"].shape[1] :].bool() & ~b["response_mask"].bool()
    assert env_tokens.any() and (b["advantages"][env_tokens] == 0).all()
    pg_loss, moved = one_policy_update(model, expanded, tmp_path, verl_tokenizer)
    assert torch.isfinite(pg_loss)
    assert moved, "no parameter changed"


# -- empty actions ---------------------------------------------------------------------------------------

# One prompt (uid "E"), five trajectories: per step (action length, reward), and the steps after which
# the env rewrites its context. An action of length 0 is an empty generation (the policy stopped at once).
EMPTY_SPEC = [
    ([(2, 0.0), (0, -0.5), (1, 1.0)], set()),  # an empty step in the middle
    ([(0, -0.5), (2, 0.0)], set()),  # an empty first step
    ([(0, -0.5)], set()),  # no policy token at all
    ([(1, 0.0), (0, 0.3)], {0}),  # an empty step that starts a new segment
    ([(2, 1.0)], set()),
]
# Each trajectory's token rewards on its policy tokens, in order: an empty step's reward sits on the
# last policy token before it, else the first one after it.
EMPTY_TOKEN_REWARDS = [[0.0, -0.5, 1.0], [-0.5, 0.0], [], [0.3], [0.0, 1.0]]


def _empty_action_trajectories(seed: int = 1) -> list[tuple[str, Trajectory]]:
    rng = np.random.default_rng(seed)
    out = []
    for j, (steps_spec, rewrites) in enumerate(EMPTY_SPEC):
        context = [int(t) for t in rng.integers(10, 1000, size=5)]
        steps = []
        for k, (n, reward) in enumerate(steps_spec):
            action = [int(t) for t in rng.integers(10, 1000, size=n)]
            steps.append(
                StepRecord(
                    trajectory_id=f"E{j}", step=k, prompt_ids=list(context), response_ids=action,
                    response_logprobs=[-0.5] * n, reward=reward, terminated=k == len(steps_spec) - 1,
                    truncated=False, new_segment=k in rewrites,
                )
            )
            reply = [int(t) for t in rng.integers(10, 1000, size=3)]
            context = [int(t) for t in rng.integers(10, 1000, size=4)] if k in rewrites else context + action + reply
        out.append(("E", Trajectory(id=f"E{j}", env_id="E", steps=steps)))
    return out


@pytest.mark.parametrize("kind", ["segment", "step"])
def test_an_empty_actions_reward_reaches_training(kind):
    """A step whose action is empty still has its reward in the trajectory's token rewards and return:
    on the previous policy token (in the same sample or an earlier one), else the next one; a trajectory
    with no policy token at all keeps its return on a slot no token trains, as verl does for an empty
    response. GRPO then normalises the five returns 0.5, -0.5, -0.5, 0.3, 1.0."""
    trajectories = _empty_action_trajectories()
    expanded, _ = _batch(trajectories, kind)
    rewards = _per_trajectory(expanded, "token_level_rewards")
    assert [rewards.get(t, []) for t in range(len(trajectories))] == [pytest.approx(r) for r in EMPTY_TOKEN_REWARDS]
    nt, b = expanded.non_tensor_batch, expanded.batch
    returns = [float(b["rm_scores"][(nt[TRAJ_KEY] == t) & ~nt[PAD_KEY]].sum()) for t in range(len(trajectories))]
    assert returns == pytest.approx([0.5, -0.5, -0.5, 0.3, 1.0])

    compute_step_advantage(expanded, "grpo", config=_algo_config(adv_estimator="grpo"))
    scores = torch.tensor([0.5, -0.5, -0.5, 0.3, 1.0])
    expected = (scores - scores.mean()) / (scores.std() + 1e-6)
    advantages = _per_trajectory(expanded, "advantages")
    for t, tokens in enumerate(EMPTY_TOKEN_REWARDS):
        assert advantages.get(t, []) == pytest.approx([float(expected[t])] * len(tokens), abs=1e-5), t


@pytest.mark.parametrize("estimator", SUPPORTED)
def test_segment_and_step_samples_agree_with_empty_actions(estimator):
    results = {}
    for kind in ("segment", "step"):
        expanded, _ = _batch(_empty_action_trajectories(), kind)
        compute_step_advantage(expanded, estimator, gamma=0.9, lam=0.95, config=_algo_config(adv_estimator=estimator))
        assert (expanded.batch["advantages"][~expanded.batch["response_mask"].bool()] == 0).all()
        results[kind] = (_per_trajectory(expanded, "advantages"), _per_trajectory(expanded, "returns"))
    for which in range(2):
        seg, step = results["segment"][which], results["step"][which]
        assert seg.keys() == step.keys()
        for t in seg:
            assert seg[t] == pytest.approx(step[t], abs=1e-5), (estimator, t)
