"""Step mode: batch expansion, trajectory-aware advantages, the trainer hooks, and a real update.

Hand-built trajectories (two prompts, four trajectories each, 1-5 steps each) with known returns; the
expected advantages are computed by hand below. verl's ``DataProto``, ``compute_advantage``,
``core_algos`` estimators, ``_balance_batch`` and policy loss are the real ones; the last test takes
one optimizer step of the real SmolLM2 on a step-mode batch on CPU.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent_gym_verl import compat  # noqa: E402
from agent_gym_verl.agent_loop import STEPS_KEY  # noqa: E402
from agent_gym_verl.step_advantage import (  # noqa: E402
    NUM_STEPS_KEY,
    PAD_KEY,
    STEP_KEY,
    TRAJ_KEY,
    StepModeError,
    check_estimator,
    compute_step_advantage,
    estimator_support,
    expand_step_batch,
)

# Two prompts (uids), four trajectories each: (number of steps, return).
TRAJECTORIES = {
    "A": [(1, 1.0), (3, 0.0), (5, 0.0), (2, 1.0)],
    "B": [(4, 1.0), (1, 0.0), (2, 0.0), (3, 0.0)],
}
# GRPO by hand: A: mean 0.5, unbiased std sqrt(1/3) -> +-0.5*sqrt(3) = +-0.8660254
#               B: mean 0.25, unbiased std 0.5      -> 1.5 and -0.5
GRPO_EXPECTED = {"A": [math.sqrt(3) / 2, -math.sqrt(3) / 2, -math.sqrt(3) / 2, math.sqrt(3) / 2], "B": [1.5, -0.5, -0.5, -0.5]}
# RLOO by hand: return minus the mean of the other three trajectories of the prompt.
RLOO_EXPECTED = {"A": [2 / 3, -2 / 3, -2 / 3, 2 / 3], "B": [1.0, -1 / 3, -1 / 3, -1 / 3]}
# GRPO if every step counted as a sample of its group (what stock verl would do on expanded rows), A:
# returns per step 1 | 0 0 0 | 0 0 0 0 0 | 1 1 -> mean 3/11: a different, step-weighted baseline.


def _step(rng, k, n_steps, ret, prompt_len):
    resp_len = int(rng.integers(2, 6))
    return {
        "prompt_ids": np.asarray(rng.integers(10, 1000, size=prompt_len + 7 * k), dtype=np.int64),
        "response_ids": np.asarray(rng.integers(10, 1000, size=resp_len), dtype=np.int64),
        "logprobs": np.asarray(-rng.random(resp_len), dtype=np.float32),
        "reward": ret if k == n_steps - 1 else 0.0,
        "new_segment": False,
    }


def trajectory_batch(seed: int = 0):
    """Rows as the step-mode agent loop returns them (first step as the row, all steps in extra)."""
    rng = np.random.default_rng(seed)
    rows = []
    for uid, trajs in TRAJECTORIES.items():
        for n_steps, ret in trajs:
            prompt_len = int(rng.integers(4, 9))
            steps = [_step(rng, k, n_steps, ret, prompt_len) for k in range(n_steps)]
            rows.append((uid, steps, ret))
    p_width, r_width = 64, 32  # rollout.prompt_length / response_length
    n = len(rows)
    prompts = torch.zeros((n, p_width), dtype=torch.long)
    responses = torch.zeros((n, r_width), dtype=torch.long)
    attn = torch.zeros((n, p_width + r_width), dtype=torch.long)
    mask = torch.zeros((n, r_width), dtype=torch.long)
    lps = torch.zeros((n, r_width))
    rm = torch.zeros((n, r_width))
    for i, (_, steps, ret) in enumerate(rows):
        p, r = steps[0]["prompt_ids"], steps[0]["response_ids"]
        prompts[i, p_width - len(p) :] = torch.as_tensor(p)
        attn[i, p_width - len(p) : p_width] = 1
        responses[i, : len(r)] = torch.as_tensor(r)
        attn[i, p_width : p_width + len(r)] = 1
        mask[i, : len(r)] = 1
        lps[i, : len(r)] = torch.as_tensor(steps[0]["logprobs"])
        rm[i, len(r) - 1] = ret
    steps_col = np.empty(n, dtype=object)
    steps_col[:] = [s for _, s, _ in rows]
    batch = compat.DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "response_mask": mask,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attn,
            "position_ids": torch.clamp(attn.cumsum(1) - 1, min=0),
            "rollout_log_probs": lps,
            "rm_scores": rm,
        },
        non_tensors={
            "uid": np.asarray([u for u, _, _ in rows], dtype=object),
            STEPS_KEY: steps_col,
            "data_source": np.asarray(["AgentR1/GSM8KTool-v0"] * n, dtype=object),
        },
        meta_info={"temperature": 1.0},
    )
    return batch, rows


def _by_traj(expanded, values):
    """{traj: value on its policy tokens} checking each step of a trajectory has the same value."""
    out = {}
    mask = expanded.batch["response_mask"].bool()
    for row in range(len(expanded)):
        if expanded.non_tensor_batch[PAD_KEY][row]:
            assert not mask[row].any() and (values[row] == 0).all()
            continue
        t = int(expanded.non_tensor_batch[TRAJ_KEY][row])
        v = values[row][mask[row]]
        assert torch.allclose(v, v[0].expand_as(v), atol=1e-6), "one advantage for every token of a trajectory"
        assert (values[row][~mask[row]] == 0).all()
        out.setdefault(t, []).append(float(v[0]))
    for t, vals in out.items():
        assert all(abs(v - vals[0]) < 1e-6 for v in vals), f"trajectory {t}: steps disagree"
    return {t: vals[0] for t, vals in out.items()}


def _expanded(pad_to_multiple=1):
    batch, rows = trajectory_batch()
    expanded, stats = expand_step_batch(batch, pad_token_id=0, pad_to_multiple=pad_to_multiple)
    expanded.batch["token_level_rewards"] = expanded.batch["rm_scores"].clone()
    return expanded, stats, rows


def _algo_config(**kw):
    from omegaconf import OmegaConf

    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(OmegaConf.create({"_target_": "verl.trainer.config.AlgoConfig", **kw}), AlgoConfig)


def test_expansion_one_row_per_step_padded_to_the_longest_step():
    batch, rows = trajectory_batch()
    expanded, stats = expand_step_batch(batch, pad_token_id=0, pad_to_multiple=4)
    n_steps = sum(len(s) for _, s, _ in rows)
    assert n_steps == 21
    assert len(expanded) == 24 and int(expanded.non_tensor_batch[PAD_KEY].sum()) == 3  # 21 -> multiple of 4
    nt = expanded.non_tensor_batch
    p_max = max(len(st["prompt_ids"]) for _, s, _ in rows for st in s)
    r_max = max(len(st["response_ids"]) for _, s, _ in rows for st in s)
    assert expanded.batch["prompts"].shape == (24, p_max) and expanded.batch["responses"].shape == (24, r_max)
    row = 0
    for t, (uid, steps, ret) in enumerate(rows):
        for k, st in enumerate(steps):
            b = expanded.batch
            attn = b["attention_mask"][row]
            assert b["prompts"][row][attn[:p_max].bool()].tolist() == st["prompt_ids"].tolist()
            assert b["responses"][row][attn[p_max:].bool()].tolist() == st["response_ids"].tolist()
            assert b["response_mask"][row].sum() == len(st["response_ids"])
            assert torch.allclose(b["rollout_log_probs"][row][: len(st["response_ids"])], torch.as_tensor(st["logprobs"]))
            assert float(b["rm_scores"][row].sum()) == st["reward"]
            assert b["input_ids"][row].tolist() == b["prompts"][row].tolist() + b["responses"][row].tolist()
            assert nt["uid"][row] == uid and nt[TRAJ_KEY][row] == t and nt[STEP_KEY][row] == k
            assert nt[NUM_STEPS_KEY][row] == len(steps) and nt["data_source"][row] == "AgentR1/GSM8KTool-v0"
            row += 1
    assert STEPS_KEY not in nt
    real = int(expanded.batch["attention_mask"][:21].sum())
    assert stats["agent_gym/step/padding_fraction"] == pytest.approx(1 - real / (24 * (p_max + r_max)))
    assert stats["agent_gym/step/padding_fraction_if_fixed"] == pytest.approx(1 - real / (21 * (64 + 32)))
    assert stats["agent_gym/step/samples"] == 21 and stats["agent_gym/step/trajectories"] == 8


def test_grpo_normalises_each_trajectory_once_per_group():
    expanded, _, rows = _expanded(pad_to_multiple=4)
    compute_step_advantage(expanded, "grpo", config=_algo_config(adv_estimator="grpo"))
    adv = _by_traj(expanded, expanded.batch["advantages"])
    expected = GRPO_EXPECTED["A"] + GRPO_EXPECTED["B"]
    assert [adv[t] for t in range(8)] == pytest.approx(expected, abs=1e-5)
    # the step-weighted alternative (every step a group member) would differ:
    naive_mean_a = 3 / 11
    assert abs((1 - naive_mean_a) - adv[0]) > 0.1


def test_rloo_and_grpo_without_std_by_hand():
    expanded, _, _ = _expanded()
    compute_step_advantage(expanded, "rloo", config=_algo_config(adv_estimator="rloo"))
    adv = _by_traj(expanded, expanded.batch["advantages"])
    assert [adv[t] for t in range(8)] == pytest.approx(RLOO_EXPECTED["A"] + RLOO_EXPECTED["B"], abs=1e-5)

    expanded, _, _ = _expanded()
    compute_step_advantage(expanded, "grpo", norm_adv_by_std_in_grpo=False, config=_algo_config(adv_estimator="grpo"))
    adv = _by_traj(expanded, expanded.batch["advantages"])
    assert [adv[t] for t in range(8)] == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.75, -0.25, -0.25, -0.25], abs=1e-5)


def _full_inputs(expanded):
    g = torch.Generator().manual_seed(1)
    shape = expanded.batch["response_mask"].shape
    expanded.batch["values"] = torch.randn(shape, generator=g) * expanded.batch["response_mask"]
    expanded.batch["old_log_probs"] = -torch.rand(shape, generator=g)
    expanded.batch["sum_pi_squared"] = torch.rand(shape, generator=g)


def test_every_verl_estimator_works_or_is_rejected_clearly():
    table = estimator_support()
    assert set(table) == set(compat.estimator_names())  # enumerated from the installed verl
    assert {"grpo", "rloo", "reinforce_plus_plus", "gae"} <= {k for k, v in table.items() if v is None}
    for name, reason in table.items():
        expanded, _, _ = _expanded(pad_to_multiple=4)
        _full_inputs(expanded)
        cfg = _algo_config(adv_estimator=name)
        if reason is not None:
            with pytest.raises(StepModeError, match=name):
                check_estimator(name, cfg)
            with pytest.raises(StepModeError):
                compute_step_advantage(expanded, name, config=cfg)
            continue
        compute_step_advantage(expanded, name, gamma=1.0, lam=0.95, config=cfg)
        adv = expanded.batch["advantages"]
        mask = expanded.batch["response_mask"].bool()
        assert torch.isfinite(adv).all(), name
        assert (adv[~mask] == 0).all(), name
        assert adv[mask].abs().sum() > 0, f"{name}: all-zero advantages"
        assert torch.isfinite(expanded.batch["returns"]).all(), name


def test_unknown_and_future_estimators_are_rejected(monkeypatch):
    with pytest.raises(StepModeError, match="not one of verl"):
        check_estimator("my_custom_estimator")
    import agent_gym_verl.step_advantage as sa

    names = compat.estimator_names()
    monkeypatch.setattr(sa.compat, "estimator_names", lambda: [*names, "brand_new"])
    with pytest.raises(StepModeError, match="new in verl"):
        check_estimator("brand_new")


def test_reinforce_pp_counts_policy_tokens_like_concat_mode():
    """REINFORCE++ whitens over the trajectory's policy tokens: the same numbers as concat mode."""
    expanded, _, rows = _expanded()
    cfg = _algo_config(adv_estimator="reinforce_plus_plus", gamma=1.0)
    compute_step_advantage(expanded, "reinforce_plus_plus", gamma=1.0, config=cfg)
    adv = _by_traj(expanded, expanded.batch["advantages"])
    tokens = [sum(len(s["response_ids"]) for s in steps) for _, steps, _ in rows]
    returns = torch.cat([torch.full((n,), ret) for n, (_, _, ret) in zip(tokens, rows)])
    whitened = (returns - returns.mean()) / torch.sqrt(returns.var() + 1e-8)
    expected, at = [], 0
    for n in tokens:
        expected.append(float(whitened[at]))
        at += n
    assert [adv[t] for t in range(8)] == pytest.approx(expected, abs=1e-4)


def test_trainer_hook_expands_in_place_and_routes_advantages(verl_tokenizer, tmp_path):
    from _verl_support import hf_model_folder, verl_config

    from agent_gym_verl.patches import agent_gym_trainer_class
    from agent_gym_verl.trainer import step_aware_compute_advantage

    cls = agent_gym_trainer_class(compat.ray_trainer_module().RayPPOTrainer)
    trainer = object.__new__(cls)  # no Ray workers on CPU: only the hooks are exercised
    trainer.config = verl_config(
        hf_model_folder(str(tmp_path), verl_tokenizer), "actor_rollout_ref.actor.ppo_mini_batch_size=6", "actor_rollout_ref.rollout.n=2"
    )  # whole mini-batches of 6 prompts x 2 rollouts = 12 rows, with 4 data-parallel ranks
    trainer.tokenizer = verl_tokenizer
    trainer._agent_gym_balance = True
    trainer.actor_rollout_wg = None
    trainer._get_dp_size = lambda wg, role: 4
    batch, rows = trajectory_batch()
    batch.non_tensor_batch["turns"] = np.asarray([len(s) for _, s, _ in rows], dtype=float)
    metrics: dict = {}
    trainer._balance_batch(batch, metrics=metrics)  # verl's own balancing runs after the expansion
    assert len(batch) == 24 and TRAJ_KEY in batch.non_tensor_batch
    assert metrics["agent_gym/step/samples"] == 21 and "global_seqlen/mean" in metrics
    # balanced rows are reordered: every step still pairs with its own trajectory's data
    for row in range(len(batch)):
        if not batch.non_tensor_batch[PAD_KEY][row]:
            t, k = int(batch.non_tensor_batch[TRAJ_KEY][row]), int(batch.non_tensor_batch[STEP_KEY][row])
            st = rows[t][1][k]
            width = batch.batch["prompts"].shape[1]
            resp = batch.batch["responses"][row][batch.batch["attention_mask"][row][width:].bool()]
            assert resp.tolist() == st["response_ids"].tolist()
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    base = compat.ray_trainer_module().compute_advantage
    routed = step_aware_compute_advantage(base)
    routed(batch, adv_estimator="grpo", config=_algo_config(adv_estimator="grpo"))
    adv = _by_traj(batch, batch.batch["advantages"])
    assert [adv[t] for t in range(8)] == pytest.approx(GRPO_EXPECTED["A"] + GRPO_EXPECTED["B"], abs=1e-5)

    # fit() swaps verl's module-level compute_advantage for the routing one and restores it after.
    seen = {}

    def fake_fit(self):
        seen["fn"] = compat.ray_trainer_module().compute_advantage

    base_cls = cls.__mro__[1]
    original_fit = base_cls.fit
    try:
        base_cls.fit = fake_fit
        trainer.fit()
    finally:
        base_cls.fit = original_fit
    assert seen["fn"].__agent_gym_base__ is base
    assert compat.ray_trainer_module().compute_advantage is base


def test_main_ppo_runs_verl_task_runner_with_the_agent_gym_trainer_in_a_ray_actor():
    """verl's main starts the agent-gym TaskRunner; inside a real Ray actor (another process, the
    class shipped by Ray's cloudpickle) verl's TaskRunner.run then builds the agent-gym trainer."""
    import pickle

    import cloudpickle
    import ray

    from agent_gym_verl import patches

    module = compat.task_runner_module()
    before = module.TaskRunner
    try:
        patches.install("driver")
        installed = module.TaskRunner
        assert patches.plain_class(installed) is patches.AgentGymTaskRunner
        blob = cloudpickle.dumps(patches.AgentGymTaskRunner)
        assert len(blob) < 300 and pickle.loads(blob) is patches.AgentGymTaskRunner  # by reference

        actor_cls = installed if hasattr(installed, "remote") else ray.remote(num_cpus=1)(installed)
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            actor = actor_cls.remote()
            names = ray.get(
                actor.__ray_call__.remote(lambda self: [c.__name__ for c in self._agent_gym_patch()]), timeout=240
            )
        finally:
            ray.shutdown()
        assert names == ["TaskRunner", "AgentGymRayPPOTrainer"]
    finally:
        module.TaskRunner = before


def test_trainer_init_checks_settings_and_marks_the_config(verl_tokenizer, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from _verl_support import hf_model_folder, verl_config

    from agent_gym_verl.patches import agent_gym_trainer_class
    from agent_gym_verl.trainer import STEP_TRAINER_FLAG

    base = compat.ray_trainer_module().RayPPOTrainer
    cls = agent_gym_trainer_class(base)
    step_data = SimpleNamespace(dataframe={"agent_name": ["agent_gym_step"]})
    step_data.dataframe = type("F", (dict,), {"column_names": ["agent_name"]})(agent_name=["agent_gym_step"])

    def fake_init(self, config, train_dataset=None, **kwargs):
        self.config, self.train_dataset = config, train_dataset

    monkeypatch.setattr(base, "__init__", fake_init)
    model = hf_model_folder(str(tmp_path), verl_tokenizer)
    trainer = cls(verl_config(model, "trainer.balance_batch=False"), train_dataset=step_data)
    assert trainer.config[STEP_TRAINER_FLAG]["step_trainer"] is True
    assert trainer.config.trainer.balance_batch is True and trainer._agent_gym_balance is False
    with pytest.raises(StepModeError, match="remax"):
        cls(verl_config(model, "algorithm.adv_estimator=remax"), train_dataset=step_data)
    concat_data = SimpleNamespace(dataframe=type("F", (dict,), {"column_names": ["agent_name"]})(agent_name=["agent_gym"]))
    cls(verl_config(model, "algorithm.adv_estimator=remax"), train_dataset=concat_data)  # concat: verl decides
    two_gpus = _sized_config(tmp_path, verl_tokenizer, "trainer.n_gpus_per_node=2")
    if compat.LEGACY_LAYOUT:  # verl 0.7's workers check the update's split themselves when they start
        cls(two_gpus, train_dataset=step_data)
    else:
        with pytest.raises(ValueError, match=r"is 80 per GPU on 2 data-parallel GPU\(s\), which actor_rollout_ref.actor"):
            cls(two_gpus, train_dataset=concat_data)


@pytest.mark.slow
def test_one_optimizer_step_of_smollm2_on_a_step_batch(smollm2_model, verl_tokenizer, tmp_path):
    """verl's policy loss (core_algos, vanilla PPO clip, token-mean) on a step-mode batch, then one
    AdamW step of the real model on CPU: the loss is finite and the parameters move."""
    import copy

    from _verl_support import one_policy_update

    model = copy.deepcopy(smollm2_model).train()
    expanded, stats, _ = _expanded(pad_to_multiple=2)
    compute_step_advantage(expanded, "grpo", config=_algo_config(adv_estimator="grpo"))
    pg_loss, moved = one_policy_update(model, expanded, tmp_path, verl_tokenizer)
    assert torch.isfinite(pg_loss)
    assert moved, "no parameter changed"
    assert stats["agent_gym/step/pad_rows"] in (0.0, 1.0)


def _sized_config(tmp_path, verl_tokenizer, *overrides):
    from _verl_support import hf_model_folder, verl_config

    return verl_config(
        hf_model_folder(str(tmp_path), verl_tokenizer),
        "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
        *overrides,
        *([] if any(o.startswith("trainer.n_gpus_per_node=") for o in overrides) else ["trainer.n_gpus_per_node=1"]),
    )


def test_step_batches_are_padded_to_whole_mini_batches_only(verl_tokenizer, tmp_path):
    from agent_gym_verl.trainer import step_pad_multiple

    cfg = _sized_config(tmp_path, verl_tokenizer)
    assert step_pad_multiple(cfg, 1) == 160  # 32 x 5: padding stays below one mini-batch
    assert step_pad_multiple(cfg, 2) == 160
    assert step_pad_multiple(cfg, 3) == 480  # lcm with the data-parallel size


def _check_error(cfg, step_mode=True) -> str:
    from agent_gym_verl.trainer import check_micro_batches

    with pytest.raises(ValueError) as err:
        check_micro_batches(cfg, step_mode=step_mode)
    return str(err.value)


def test_batch_sizes_no_gpu_share_can_split_are_refused_at_start(verl_tokenizer, tmp_path):
    """On 2 GPUs, 160-row mini-batches are 80 rows per GPU, which micro-batches of 32 do not divide: verl
    0.9's engine would fail only at the first log-prob pass, after start-up and a whole rollout."""
    from agent_gym_verl.trainer import check_micro_batches

    check_micro_batches(_sized_config(tmp_path, verl_tokenizer), step_mode=True)  # one GPU: 160 rows, micro 32
    two = "trainer.n_gpus_per_node=2"
    assert _check_error(_sized_config(tmp_path, verl_tokenizer, two)) == (
        "actor_rollout_ref.actor.ppo_mini_batch_size=32 x rollout.n=5 = 160 rows per mini-batch is 80 per GPU on 2 "
        "data-parallel GPU(s), which actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 does not divide; pick "
        "sizes so that ppo_mini_batch_size * n / GPUs is a multiple of it"
    )
    actor16 = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"
    assert "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 does not divide" in _check_error(
        _sized_config(tmp_path, verl_tokenizer, two, actor16)
    )
    # Concat mode's batch is the whole train batch, which verl itself checks: only the update's split is ours.
    check_micro_batches(_sized_config(tmp_path, verl_tokenizer, two, actor16), step_mode=False)
    all16 = (actor16, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
             "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16")
    check_micro_batches(_sized_config(tmp_path, verl_tokenizer, two, *all16), step_mode=True)
    # Sequence parallelism (verl 0.9's key) halves the data-parallel size: 160 rows on 1 rank again.
    sp = "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2"
    check_micro_batches(_sized_config(tmp_path, verl_tokenizer, two, sp, "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=2"),
                        step_mode=True)
    # Token-budget micro-batches have no row constraint, but the mini-batch must still split over the GPUs.
    dynamic = ("actor_rollout_ref.actor.use_dynamic_bsz=True", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
               "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True")
    check_micro_batches(_sized_config(tmp_path, verl_tokenizer, two, *dynamic), step_mode=True)
    odd = ("trainer.n_gpus_per_node=3", *dynamic)
    assert _check_error(_sized_config(tmp_path, verl_tokenizer, *odd)) == (
        "actor_rollout_ref.actor.ppo_mini_batch_size=32 x rollout.n=5 = 160 rows per mini-batch do not split over 3 "
        "data-parallel GPU(s)"
    )


def test_each_gpu_share_of_a_padded_step_batch_splits_in_verls_own_micro_batcher(verl_tokenizer, tmp_path):
    """verl's real ``prepare_micro_batches`` on each GPU's share of a step batch padded to
    ``step_pad_multiple``, with sizes ``check_micro_batches`` accepts; and the failure it prevents."""
    engine_utils = pytest.importorskip("verl.workers.engine.utils")
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    from agent_gym_verl.trainer import check_micro_batches, step_pad_multiple

    def split(rows: int, micro: int) -> int:
        td = TensorDict({"input_ids": torch.zeros(rows, 4, dtype=torch.long)}, batch_size=[rows])
        tu.assign_non_tensor(td, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro)
        micro_batches, _ = engine_utils.prepare_micro_batches(td)
        return len(micro_batches)

    sizes = ("trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16")
    cfg = _sized_config(tmp_path, verl_tokenizer, *sizes)
    check_micro_batches(cfg, step_mode=True)
    for real_samples, shares in ((150, 5), (290, 10), (450, 15)):  # odd numbers of mini-batches included
        multiple = step_pad_multiple(cfg, 2)
        padded = -(-real_samples // multiple) * multiple
        assert split(padded // 2, 16) == shares
    if not compat.LEGACY_LAYOUT:  # what the refused sizes did on verl 0.9: 150 rows -> 160 -> 80 per GPU
        with pytest.raises(AssertionError, match="divisible by force_group_size"):
            split(80, 32)
