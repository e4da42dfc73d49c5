"""Tree rollouts in step mode (``agent_gym.tree``) on CPU, against the real verl.

Real: verl's ``AgentLoopWorker`` and ``RLHFDataset`` on rows written by ``agent_gym_verl.export``, the
GSM8KTool env with its calculator, forked by ``agent_gym.rollout.tree.play_tree``, the trainer's own
expansion and balancing hook (``_balance_batch``), verl's ``compute_advantage`` (the root group) and policy
loss, and one AdamW step of SmolLM2-135M. The server is scripted (no model), so every return is known:
each trajectory's first turn is a calculator call; the root of a tree (request id = the tree's id)
then answers ``#### 18``, every branch (ids ``<tree id>-1``, ``-2``) ``#### 17``. With ``width=3`` and
``branch_at=[1]`` a tree is the root and two branches at the answer step, returns 1, 0, 0 on task
``test-0`` (answer 18) and 0, 0, 0 on ``test-1``; the two rows share one ``uid``, as ``rollout.n=2`` trees
of one prompt would.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter

import pytest

pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _verl_support import dataset_batch, gen_batch, mark_step_trainer, verl_config  # noqa: E402
from omegaconf import open_dict  # noqa: E402

from agent_gym_verl import agent_loop as al  # noqa: E402
from agent_gym_verl import compat  # noqa: E402
from agent_gym_verl import tree as tree_mode  # noqa: E402
from agent_gym_verl.export import export_env  # noqa: E402
from agent_gym_verl.step_advantage import (  # noqa: E402
    PAD_KEY,
    STEP_KEY,
    TRAJ_KEY,
    TREE_ADV_KEY,
    TREE_KEY,
    TREE_ROOT_KEY,
    StepModeError,
    check_tree_estimator,
)

ENV_ID = "AgentR1/GSM8KTool-v0"
CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "(16 - 3 - 4) * 2"}}\n</tool_call>'


class TreeServer:
    """verl's server-manager call, scripted: a trajectory's first turn is the calculator call; a later
    turn is ``#### 18`` under a tree's first request id (its root) and ``#### 17`` under any other (its
    branches). ``calls``: ``(request_id, prompt_ids, token_ids)`` of every call."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.calls: list[tuple[str, list[int], list[int]]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        answered = self.tok.decode(prompt_ids).count("<|im_start|>assistant") - 1  # the last one is the prompt's
        text = CALL if answered == 0 else "#### 17" if "-" in request_id else "#### 18"
        ids = self.tok.encode(text + "<|im_end|>", add_special_tokens=False)
        self.calls.append((request_id, [int(t) for t in prompt_ids], ids))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    return str(export_env(ENV_ID, "test", out, mode="step", limit=2, env_kwargs={"max_turns": 3}))


def tree_cfg(hf_model_dir, tree, *overrides):
    cfg = mark_step_trainer(verl_config(hf_model_dir, *overrides))
    with open_dict(cfg):
        cfg.agent_gym.tree = tree
    return cfg


def _algo_config(**kw):
    from omegaconf import OmegaConf

    from verl.trainer.config import AlgoConfig
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(OmegaConf.create({"_target_": "verl.trainer.config.AlgoConfig", **kw}), AlgoConfig)


def _trainer(cfg, tokenizer):
    """The agent-gym trainer with only its hooks live (no Ray workers on CPU), one data-parallel rank."""
    from agent_gym_verl.patches import agent_gym_trainer_class

    trainer = object.__new__(agent_gym_trainer_class(compat.ray_trainer_module().RayPPOTrainer))
    trainer.config = cfg
    trainer.tokenizer = tokenizer
    trainer._agent_gym_balance = True
    trainer.actor_rollout_wg = None
    trainer._get_dp_size = lambda wg, role: 1
    trainer.async_rollout_mode = True  # verl 0.7's _get_gen_batch reads it (agent loops: always)
    return trainer


@pytest.fixture(scope="module")
def tree_batch(hf_model_dir, parquet, verl_tokenizer):
    """Two trees (tasks test-0 and test-1, one uid) through verl's worker, expanded by the trainer's hook
    (ppo_mini_batch_size=2 x n=2: padded to 4 rows), with advantages from the trainer's routing."""
    from agent_gym_verl.trainer import step_aware_compute_advantage

    cfg = tree_cfg(hf_model_dir, {"width": 3, "branch_at": [1]},
                   "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2")
    al._ENV_POOL.clear()
    server = TreeServer(verl_tokenizer)
    worker = compat.make_agent_loop_worker(cfg, server)
    batch = dataset_batch(cfg, parquet, worker.tokenizer, rows=[0, 1])
    batch.non_tensor_batch["uid"] = np.asarray(["u", "u"], dtype=object)
    out = asyncio.run(worker.generate_sequences(gen_batch(batch)))
    rows = out.non_tensor_batch  # before expansion: one row per tree
    trees = {"values": list(rows[tree_mode.VALUE_KEY]), "trajectories": list(rows[tree_mode.TRAJECTORIES_KEY]),
             "samples": [len(s) for s in rows[al.STEPS_KEY]]}
    batch = batch.union(out)  # what fit does
    metrics: dict = {}
    _trainer(cfg, worker.tokenizer)._balance_batch(batch, metrics=metrics)  # expansion, then verl's balancing
    columns = {key: batch.non_tensor_batch[key].copy() for key in (TREE_ADV_KEY, TREE_ROOT_KEY)}
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"].clone()
    routed = step_aware_compute_advantage(compat.ray_trainer_module().compute_advantage)
    routed(batch, adv_estimator="grpo", config=_algo_config(adv_estimator="grpo"))
    return {"batch": batch, "server": server, "trees": trees, "metrics": metrics, "columns": columns,
            "pad_id": worker.tokenizer.pad_token_id}


def _rows(batch):
    """Per real row: its tree, trajectory and step; prompt; response; mask; advantages; returns; rewards."""
    b, nt = batch.batch, batch.non_tensor_batch
    width = b["prompts"].shape[1]
    out = []
    for row in range(len(batch)):
        if nt[PAD_KEY][row]:
            continue
        attn = b["attention_mask"][row]
        valid = attn[width:].bool()
        out.append({
            "tree": int(nt[TREE_KEY][row]), "traj": int(nt[TRAJ_KEY][row]), "step": int(nt[STEP_KEY][row]),
            "prompt": b["prompts"][row][attn[:width].bool()].tolist(),
            "response": b["responses"][row][valid].tolist(),
            "mask": b["response_mask"][row][valid].tolist(),
            "adv": b["advantages"][row][valid].tolist(),
            "returns": b["returns"][row][valid].tolist(),
            "rewards": b["rm_scores"][row][valid].tolist(),
        })
    return sorted(out, key=lambda r: (r["tree"], r["traj"], r["step"]))


def _runs(row):
    """The row's policy turns: (context the policy saw, the ids it generated), in order."""
    runs, start = [], None
    for i, m in enumerate([*row["mask"], 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((tuple(row["prompt"] + row["response"][:start]), tuple(row["response"][start:i])))
            start = None
    return runs


def test_a_tree_row_trains_each_generated_step_once(tree_batch):
    server, rows = tree_batch["server"], _rows(tree_batch["batch"])
    assert tree_batch["trees"] == {"values": [pytest.approx(1 / 3), 0.0], "trajectories": [3, 3], "samples": [3, 3]}
    # 2 trees x (root: call + answer; two branches: an answer each); the shared call is generated once a tree
    assert len(server.calls) == 8
    assert sum(ids == server.calls[0][2] for _, _, ids in server.calls) == 2
    bases = {rid for rid, _, _ in server.calls if "-" not in rid}
    assert len(bases) == 2 and {rid for rid, _, _ in server.calls} == {f"{b}{s}" for b in bases for s in ("", "-1", "-2")}
    # one sample per trajectory (a segment from its own first step), each policy turn exactly a server call
    assert len(rows) == 6 and len({r["traj"] for r in rows}) == 6 and [r["tree"] for r in rows] == [0, 0, 0, 1, 1, 1]
    turns = Counter(run for r in rows for run in _runs(r))
    assert turns == Counter((tuple(prompt), tuple(ids)) for _, prompt, ids in server.calls)
    for tree in (0, 1):
        root, *branches = [r for r in rows if r["tree"] == tree]
        assert len(_runs(root)) == 2  # the root's call and answer, the tool reply between them masked
        answer_context = list(_runs(root)[1][0])
        for branch in branches:  # prompt = the whole context at the branch step: no shared prefix again
            assert branch["prompt"] == answer_context and branch["mask"] == [1] * len(branch["response"])
    assert [sum(r["rewards"]) for r in rows] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    m = tree_batch["metrics"]
    assert (m["agent_gym/step/samples"], m["agent_gym/step/trajectories"], m["agent_gym/step/pad_rows"]) == (6, 6, 2)
    assert m["agent_gym/tree/trajectories/mean"] == 3 and m["agent_gym/tree/generated_steps/mean"] == 4
    assert m["agent_gym/tree/flat_steps/mean"] == 6 and m["agent_gym/tree/value/mean"] == pytest.approx(1 / 6)


def _z(values, v, *, unbiased=False, eps=1e-6):
    mean = sum(values) / len(values)
    var = sum((x - mean) ** 2 for x in values) / (len(values) - (1 if unbiased else 0))
    return (v - mean) / (math.sqrt(var) + eps)


def test_tree_advantages_are_the_per_state_groups_and_the_root_group_across_trees(tree_batch):
    """Tree 0: the answer step's group is the root's 1.0 and the branches' 0.0 (population std); the
    root's call, before any branch point, gets verl's GRPO over the two trees' values 1/3 and 0 (unbiased
    std). Tree 1: every return is 0, so its groups give 0; its root's call gets the other side of the
    root group. Env ids (the calculator's reply) get 0; returns = advantages."""
    rows = _rows(tree_batch["batch"])
    values = [1 / 3, 0.0]
    root_group = [_z(values, v, unbiased=True) for v in values]
    assert root_group == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)
    expected = {  # per trajectory: per policy turn
        (0, 0): [root_group[0], _z([1.0, 0.0, 0.0], 1.0)], (0, 1): [_z([1.0, 0.0, 0.0], 0.0)], (0, 2): [_z([1.0, 0.0, 0.0], 0.0)],
        (1, 0): [root_group[1], 0.0], (1, 1): [0.0], (1, 2): [0.0],
    }
    assert _z([1.0, 0.0, 0.0], 1.0) == pytest.approx(math.sqrt(2), abs=1e-5)
    for r in rows:
        position = sorted(t["traj"] for t in rows if t["tree"] == r["tree"]).index(r["traj"])
        want = []
        for turn, (_, ids) in enumerate(_runs(r)):
            want.append([expected[(r["tree"], position)][turn]] * len(ids))
        policy = [a for a, m in zip(r["adv"], r["mask"]) if m]
        assert policy == pytest.approx([x for turn in want for x in turn], abs=1e-5), (r["tree"], position)
        assert [a for a, m in zip(r["adv"], r["mask"]) if not m] == [0.0] * (len(r["mask"]) - sum(r["mask"]))
        assert r["returns"] == r["adv"]
    batch = tree_batch["batch"]
    assert (batch.batch["advantages"][torch.as_tensor(batch.non_tensor_batch[PAD_KEY])] == 0).all()
    assert TREE_ADV_KEY not in batch.non_tensor_batch and TREE_ROOT_KEY not in batch.non_tensor_batch  # used up
    # what the agent loop carried: the root-prefix flags on the roots' calls only
    flags = [f for f in tree_batch["columns"][TREE_ROOT_KEY] if f is not None]
    call = len(tree_batch["server"].calls[0][2])
    assert sorted(int(np.sum(f)) for f in flags) == [0, 0, 0, 0, call, call]


class Script:
    """A generate function for play_tree: turn 1 the calculator call, later turns '#### 18', '#### 17',
    '#### 18', ... in call order (tests/test_tree.py's policy); records every call."""

    def __init__(self, tok):
        self.tok = tok
        self.calls: list[tuple[list[int], list[int]]] = []
        self.answers = 0

    async def __call__(self, prompt_ids):
        from agent_gym.rollout.policy import Generation

        if self.tok.decode(prompt_ids).count("<|im_start|>assistant") == 1:
            text = CALL
        else:
            text = "#### 18" if self.answers % 2 == 0 else "#### 17"
            self.answers += 1
        ids = self.tok.encode(text + "<|im_end|>", add_special_tokens=False)
        self.calls.append((list(prompt_ids), ids))
        return Generation(ids, [-0.5] * len(ids), "stop")


@pytest.mark.parametrize("kind", ["segment", "step"])
def test_tree_samples_hold_every_generated_step_once_with_tree_advantages(verl_tokenizer, kind):
    """branch_at='every' with a branch of a branch: each generate call is one sample's policy turn, with
    the advantage tree_advantages gives its step; the root's steps before its first branch point are
    flagged for the root group (here none: the root branches at step 0)."""
    import gymnasium as gym

    from agent_gym.rollout.tree import play_tree, tree_advantages

    script = Script(verl_tokenizer)
    env = gym.make(ENV_ID, tokenizer=verl_tokenizer, split="test")
    tree = asyncio.run(play_tree(env, script, width=2, branch_at="every", max_leaves=4, task_id="test-0"))
    env.close()
    assert [t.metadata["tree"]["branch_step"] for t in tree] == [None, 0, 1, 1]  # the last: a branch of the first branch
    assert tree[3].metadata["tree"]["parent"] == tree[1].id
    samples = tree_mode.tree_samples(tree, kind)
    advantages = tree_advantages(tree)
    turns: Counter = Counter()
    for sample in samples:
        trajectory = next(t for t in tree if t.id == sample["trajectory_id"])
        shared = trajectory.metadata["tree"]["shared_steps"]
        prompt, response = sample["prompt_ids"].tolist(), sample["response_ids"].tolist()
        mask = sample.get("response_mask", np.ones(len(response), dtype=np.int64)).tolist()
        row = {"prompt": prompt, "response": response, "mask": mask}
        steps = range(*sample["steps"]) if kind == "segment" else [sample["step"]]
        assert min(steps) >= shared == sample["shared_steps"]  # nothing of the shared prefix again
        for (context, ids), k in zip(_runs(row), steps):
            turns[(context, ids)] += 1
            assert list(context) == trajectory.steps[k].prompt_ids and list(ids) == trajectory.steps[k].response_ids
        policy = [a for a, m in zip(sample[tree_mode.SAMPLE_ADVANTAGES].tolist(), mask) if m]
        want = [advantages[trajectory.id][k] for k in steps for _ in trajectory.steps[k].response_ids]
        assert policy == pytest.approx(want) and not sample[tree_mode.SAMPLE_ROOT_PREFIX].any()
    assert turns == Counter((tuple(p), tuple(i)) for p, i in script.calls)
    assert len(script.calls) == sum(len(t.steps) - t.metadata["tree"]["shared_steps"] for t in tree) == 2 + 2 + 1 + 1
    assert tree_mode.tree_fields(tree) == {tree_mode.VALUE_KEY: pytest.approx(sum(t.return_ for t in tree) / 4),
                                           tree_mode.TRAJECTORIES_KEY: 4, tree_mode.GENERATED_STEPS_KEY: 6,
                                           tree_mode.FLAT_STEPS_KEY: 8}


def _hand_tree(rng, name: str, answers: list[float]) -> list:
    """A tree as play_tree returns it, of short random ids (cheap to train on): a root of three steps,
    a branch at its step 1 and one at its step 2, each step appending an action and an env reply to the
    context; ``answers``: the last step's reward of the root and the two branches."""
    from agent_gym.trajectory import StepRecord, Trajectory

    def ids(n):
        return [int(t) for t in rng.integers(10, 1000, size=n)]

    context = ids(6)
    prompts, actions = [], []
    for _ in range(3):
        prompts.append(list(context))
        actions.append(ids(3))
        context = context + actions[-1] + ids(2)

    def trajectory(tid, shared, reward, parent, branch_step):
        steps = []
        for k in range(3):
            own = k >= shared and parent is not None
            action = ids(3) if own else actions[k]
            prompt = prompts[k] if k <= shared else steps[-1].prompt_ids + steps[-1].response_ids + ids(2)
            steps.append(StepRecord(trajectory_id=tid, step=k, prompt_ids=prompt, response_ids=action,
                                    response_logprobs=[-0.5] * 3, reward=reward if k == 2 else 0.0,
                                    terminated=k == 2, truncated=False, new_segment=False))
        meta = {"root": f"{name}-0", "parent": parent, "branch_step": branch_step, "shared_steps": shared}
        return Trajectory(id=tid, env_id="E", steps=steps, metadata={"tree": meta})

    return [trajectory(f"{name}-0", 0, answers[0], None, None), trajectory(f"{name}-1", 1, answers[1], f"{name}-0", 1),
            trajectory(f"{name}-2", 2, answers[2], f"{name}-0", 2)]


def _tree_rows(trees):
    """Tree rows as the step loop returns them through verl's worker (the root's first step as the row)."""
    n = len(trees)
    p_w, r_w = 32, 8
    prompts, responses = torch.zeros((n, p_w), dtype=torch.long), torch.zeros((n, r_w), dtype=torch.long)
    attn, mask = torch.zeros((n, p_w + r_w), dtype=torch.long), torch.zeros((n, r_w), dtype=torch.long)
    col = np.empty(n, dtype=object)
    for i, tree in enumerate(trees):
        p, r = tree[0].steps[0].prompt_ids, tree[0].steps[0].response_ids
        prompts[i, p_w - len(p):], responses[i, : len(r)] = torch.tensor(p), torch.tensor(r)
        attn[i, p_w - len(p): p_w + len(r)] = 1
        mask[i, : len(r)] = 1
        col[i] = tree_mode.tree_samples(tree)
    return compat.DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "response_mask": mask, "input_ids": torch.cat([prompts, responses], 1),
                 "attention_mask": attn, "position_ids": torch.clamp(attn.cumsum(1) - 1, min=0)},
        non_tensors={"uid": np.asarray(["u"] * n, dtype=object), al.STEPS_KEY: col,
                     tree_mode.VALUE_KEY: np.asarray([tree_mode.tree_value(t) for t in trees], dtype=object)},
    )


@pytest.mark.slow
def test_one_optimizer_step_of_smollm2_on_a_tree_batch(smollm2_model, verl_tokenizer, tmp_path):
    """Two hand-built trees of one prompt (a root, branches at its steps 1 and 2): expanded, given tree
    advantages (checked against tree_advantages and the root group by hand), then verl's policy loss and
    one AdamW step of the real model on CPU."""
    import copy

    from _verl_support import one_policy_update

    from agent_gym.rollout.tree import tree_advantages
    from agent_gym_verl.step_advantage import compute_step_advantage, expand_step_batch

    rng = np.random.default_rng(0)
    trees = [_hand_tree(rng, "a", [1.0, 0.0, 1.0]), _hand_tree(rng, "b", [0.0, 0.0, 1.0])]
    expanded, stats = expand_step_batch(_tree_rows(trees), pad_token_id=0, pad_to_multiple=4)
    assert (stats["agent_gym/step/samples"], stats["agent_gym/step/pad_rows"]) == (6, 2)
    expanded.batch["token_level_rewards"] = expanded.batch["rm_scores"].clone()
    compute_step_advantage(expanded, "grpo", config=_algo_config(adv_estimator="grpo"))
    root_group = [_z([2 / 3, 1 / 3], v, unbiased=True) for v in (2 / 3, 1 / 3)]
    b, nt = expanded.batch, expanded.non_tensor_batch
    for row in range(6):
        tree = trees[int(nt[TREE_KEY][row])]
        trajectory = tree[int(nt[TRAJ_KEY][row]) - 3 * int(nt[TREE_KEY][row])]
        shared = trajectory.metadata["tree"]["shared_steps"]
        want = [root_group[int(nt[TREE_KEY][row])] if trajectory is tree[0] and k == 0 else tree_advantages(tree)[trajectory.id][k]
                for k in range(shared, 3) for _ in range(3)]
        assert b["advantages"][row][b["response_mask"][row].bool()].tolist() == pytest.approx(want, abs=1e-5)
    model = copy.deepcopy(smollm2_model).train()
    pg_loss, moved = one_policy_update(model, expanded, tmp_path, verl_tokenizer)
    assert torch.isfinite(pg_loss) and moved


def test_validation_rows_play_one_episode_each(hf_model_dir, parquet, verl_tokenizer):
    """A batch the trainer marked as validation (``agent_gym_validate``): one episode per row, no tree."""
    cfg = tree_cfg(hf_model_dir, {"width": 3, "branch_at": [1]})
    al._ENV_POOL.clear()
    server = TreeServer(verl_tokenizer)
    worker = compat.make_agent_loop_worker(cfg, server)
    batch = dataset_batch(cfg, parquet, worker.tokenizer, rows=[0])
    batch.non_tensor_batch[tree_mode.VALIDATE_KEY] = np.ones(1, dtype=bool)
    out = asyncio.run(worker.generate_sequences(gen_batch(batch)))
    assert len(server.calls) == 2 and len({rid for rid, _, _ in server.calls}) == 1
    assert tree_mode.VALUE_KEY not in out.non_tensor_batch
    [samples] = out.non_tensor_batch[al.STEPS_KEY]
    assert len(samples) == 1 and tree_mode.SAMPLE_ADVANTAGES not in samples[0]
    assert float(out.batch["rm_scores"].sum()) == 1.0


def test_the_trainer_marks_only_the_batches_validate_builds_in_tree_mode(hf_model_dir, verl_tokenizer, monkeypatch):
    cfg = tree_cfg(hf_model_dir, {"width": 2})
    trainer = _trainer(cfg, verl_tokenizer)
    trainer._agent_gym_validating = False
    base = type(trainer).__mro__[1]
    seen = {}

    def fake_validate(self, *args, **kwargs):
        seen["validate"] = self._get_gen_batch(_batch())
        return {}

    def _batch():
        return compat.DataProto.from_dict(tensors={"input_ids": torch.zeros(2, 3, dtype=torch.long)},
                                          non_tensors={"uid": np.asarray(["a", "b"], dtype=object)})

    monkeypatch.setattr(base, "_validate", fake_validate)
    for tree_on in (True, False):
        trainer._agent_gym_tree = tree_on
        trainer._validate()
        assert (tree_mode.VALIDATE_KEY in seen["validate"].non_tensor_batch) is tree_on
        assert tree_mode.VALIDATE_KEY not in trainer._get_gen_batch(_batch()).non_tensor_batch  # training
    assert seen["validate"].non_tensor_batch["uid"].tolist() == ["a", "b"]
    assert trainer._agent_gym_validating is False


@pytest.mark.parametrize(
    "tree, message",
    [
        ({"width": 1}, "agent_gym.tree.width must be an integer >= 2"),
        ({"branch_at": "sometimes"}, "agent_gym.tree.branch_at must be 'every', 'entropy' or a non-empty list"),
        ({"branch_at": [-1]}, "agent_gym.tree.branch_at must be an integer >= 0"),
        ({"max_leaves": 0}, "agent_gym.tree.max_leaves must be an integer >= 1"),
        ({"widht": 3}, "agent_gym.tree takes width, branch_at, top_k, max_leaves; unknown key(s): widht"),
    ],
)
def test_bad_tree_settings_name_the_key(tree, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tree_mode.tree_config({"tree": tree})


def test_tree_settings_parse_from_hydra(hf_model_dir):
    cfg = tree_cfg(hf_model_dir, {"width": 3, "branch_at": [2, 0], "max_leaves": 5})
    assert tree_mode.tree_config(cfg.agent_gym) == tree_mode.TreeConfig(width=3, branch_at=(0, 2), top_k=1, max_leaves=5)
    assert tree_mode.tree_config({"tree": {"branch_at": "entropy", "top_k": 2}}).play_kwargs() == {
        "width": 2, "branch_at": "entropy", "top_k": 2, "max_leaves": 8}
    assert tree_mode.tree_config({"samples": "step"}) is None and tree_mode.tree_config({"tree": {}}) is None


def test_tree_mode_runs_grpo_only_and_says_so_at_start(hf_model_dir, verl_tokenizer, monkeypatch):
    from types import SimpleNamespace

    from agent_gym_verl.patches import agent_gym_trainer_class

    assert check_tree_estimator("grpo", _algo_config(adv_estimator="grpo")) == "grpo"
    assert check_tree_estimator("grpo_vectorized") == "grpo_vectorized"
    for name in ("rloo", "gae", "reinforce_plus_plus"):
        with pytest.raises(StepModeError, match=f"algorithm.adv_estimator=grpo or grpo_vectorized, not '{name}'"):
            check_tree_estimator(name)
    with pytest.raises(StepModeError, match="norm_adv_by_std_in_grpo=False is not supported"):
        check_tree_estimator("grpo", norm_adv_by_std_in_grpo=False)
    with pytest.raises(StepModeError, match="use_kl_in_reward=True would be ignored"):
        check_tree_estimator("grpo", _algo_config(adv_estimator="grpo", use_kl_in_reward=True))

    base = compat.ray_trainer_module().RayPPOTrainer
    monkeypatch.setattr(base, "__init__", lambda self, config, train_dataset=None, **kw: setattr(self, "config", config)
                        or setattr(self, "train_dataset", train_dataset))
    step_data = SimpleNamespace(dataframe=type("F", (dict,), {"column_names": ["agent_name"]})(agent_name=["agent_gym_step"]))
    cls = agent_gym_trainer_class(base)
    with pytest.raises(StepModeError, match="not 'rloo'"):
        cls(tree_cfg(hf_model_dir, {"width": 2}, "algorithm.adv_estimator=rloo"), train_dataset=step_data)
    with pytest.raises(ValueError, match="agent_gym.tree.width"):
        cls(tree_cfg(hf_model_dir, {"width": 0}, "algorithm.adv_estimator=grpo"), train_dataset=step_data)
    trainer = cls(tree_cfg(hf_model_dir, {"width": 2}, "algorithm.adv_estimator=grpo"), train_dataset=step_data)
    assert trainer._agent_gym_tree is True and trainer.config.agent_gym.tree.width == 2  # kept for the workers
