"""EnvRollout(tree=...): per-state GRPO groups. Each group of num_generations prompts of one row plays one
tree: its root episode, then branches from the env's state before one step k of the root. The samples
start at that state, the prefix is generated once, and TRL's group normalisation gives the advantages
agent_gym.rollout.tree.tree_advantages gives for the same depth-one tree.

ArithmeticTool-v0 (few-shot) with a scripted policy (_trl_support.BranchingPolicy): a calculator call, then
an answer that is right the first, third, ... time a question is answered and wrong (and longer) the
second, fourth, ...: a group of three answering from one state gets returns [1, 0, 1].
"""

from __future__ import annotations

import pytest
import torch
from _trl_support import BranchingPolicy, expected_sample, grpo_args, recording_trainer, trl_advantages

from agent_gym.rollout.tree import tree_advantages
from agent_gym_trl import EnvRollout, env_dataset

ENV_KWARGS = {"level": 1, "few_shot": True}


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tokenizer):
    from trl import GRPOTrainer

    from agent_gym.models import load_causal_lm
    from agent_gym_trl import env_reward

    ds = env_dataset("AgentR1/ArithmeticTool-v0", n=2, env_kwargs=ENV_KWARGS, tokenizer=tokenizer)
    return GRPOTrainer(
        model=load_causal_lm("smollm2-135m-instruct"),
        reward_funcs=env_reward,
        args=grpo_args(tmp_path_factory.mktemp("grpo"), num_generations=3, per_device_train_batch_size=6,
                       max_completion_length=96),
        train_dataset=ds,
        processing_class=tokenizer,
        rollout_func=EnvRollout(),
    )


def prompts_of(tokenizer, n=2, repeat=3):
    ds = env_dataset("AgentR1/ArithmeticTool-v0", n=n, env_kwargs=ENV_KWARGS, tokenizer=tokenizer)
    return [p for p in ds["prompt"] for _ in range(repeat)]  # as TRL's sampler repeats each row


def groups(items, size=3):
    return [items[i : i + size] for i in range(0, len(items), size)]


def test_entropy_branches_each_group_at_its_answer_and_generates_the_call_once(trainer, tokenizer):
    policy = BranchingPolicy(tokenizer)
    rollout = EnvRollout(policy=policy, tree="entropy")
    trainer._pending_metrics.clear()
    out = rollout(prompts_of(tokenizer), trainer)
    trajectories = rollout.last_trajectories
    assert len(trajectories) == len(out["prompt_ids"]) == 6

    for g, group in enumerate(groups(trajectories)):
        root = group[0]
        # the root, then two branches from its state before step 1 (the answer: -log p 2.0 > 0.1)
        assert [t.metadata["tree"]["branch_step"] for t in group] == [None, 1, 1]
        assert [t.metadata["tree"]["root"] for t in group] == [root.id] * 3
        assert [t.metadata["sample_step"] for t in group] == [1, 1, 1]
        for j, t in enumerate(group):
            k = 3 * g + j
            assert t.steps[0].response_ids == root.steps[0].response_ids  # the call, generated once
            assert t.steps[1].prompt_ids == root.steps[1].prompt_ids  # the same state: the tool's reply included
            # the sample: the branch state's context as prompt, the answer as completion
            assert out["prompt_ids"][k] == root.steps[1].prompt_ids
            assert out["completion_ids"][k] == t.steps[1].response_ids
            assert out["env_mask"][k] == [1] * len(t.steps[1].response_ids)
            assert out["logprobs"][k] == [-2.0] * len(t.steps[1].response_ids)
        assert out["env_return"][3 * g : 3 * g + 3] == [1.0, 0.0, 1.0]
        assert out["completion_ids"][3 * g] != out["completion_ids"][3 * g + 1]

    # each task's first prompt went to the policy once (flat: three times); 2 roots x 2 turns + 4 answers
    assert len(policy.first_turns()) == 2 and len(policy.prompts) == 8
    metrics = dict(trainer._pending_metrics)
    trainer._pending_metrics.clear()
    flat = sum(len(s.response_ids) for t in trajectories for s in t.steps)
    assert metrics["env/tree_generated_tokens"] == [pytest.approx(policy.generated / 6)]
    assert metrics["env/tree_flat_tokens"] == [pytest.approx(flat / 6)]
    assert policy.generated < flat
    assert metrics["env/tree_branch_step"] == [1.0]
    assert metrics["env/turns"] == [2.0]  # whole episodes, the shared call included

    # TRL's normalisation over each group of samples is tree_advantages' per-state group at step 1: the
    # same centred returns; TRL divides by the Bessel-corrected std + 1e-4, tree_advantages by the
    # population std + 1e-6.
    advantages = trl_advantages(out["env_return"], 3).view(-1, 3)
    for g, group in enumerate(groups(trajectories)):
        tree = tree_advantages(group)
        returns = torch.tensor([t.return_ for t in group])
        centred = returns - returns.mean()
        for j, t in enumerate(group):
            assert tree[t.id][0] == (0.0 if j == 0 else None)  # before the branch point: not in the sample
            assert advantages[g, j] * (returns.std() + 1e-4) == pytest.approx(float(centred[j]), abs=1e-5)
            assert tree[t.id][1] * (float(returns.std(unbiased=False)) + 1e-6) == pytest.approx(float(centred[j]), abs=1e-5)


def test_the_budget_counts_from_the_branch_state_and_a_root_that_used_it_up_branches_at_step_0(trainer, tokenizer):
    prompts = prompts_of(tokenizer, n=1)
    rollout = EnvRollout(policy=BranchingPolicy(tokenizer), tree=1)
    rollout(prompts, trainer)
    root, wrong, right = rollout.last_trajectories
    first = len(root.steps[0].prompt_ids)
    root_total = len(root.steps[1].prompt_ids) + len(root.steps[1].response_ids) - first
    wrong_total = len(wrong.steps[1].prompt_ids) + len(wrong.steps[1].response_ids) - first
    assert wrong_total > root_total  # the wrong answer is the longer one

    # A budget the root just fits: the long answer of a branch is whole, though a flat episode of the
    # same turns (call, reply, long answer) would have been cut.
    rollout = EnvRollout(policy=BranchingPolicy(tokenizer), tree=1, max_completion_tokens=root_total)
    out = rollout(prompts, trainer)
    assert [t.metadata["sample_step"] for t in rollout.last_trajectories] == [1, 1, 1]
    assert out["completion_ids"][1] == wrong.steps[1].response_ids and out["env_return"] == [1.0, 0.0, 1.0]
    assert [t.metadata["truncated_reason"] for t in rollout.last_trajectories] == [None, None, None]

    # One id less: the root's answer is cut, so its continuation from step 1 had less budget than its
    # branches would get: the group branches at step 0, every sample a whole episode within the budget.
    rollout = EnvRollout(policy=BranchingPolicy(tokenizer), tree=1, max_completion_tokens=root_total - 1)
    trainer._pending_metrics.clear()
    out = rollout(prompts, trainer)
    assert trainer._pending_metrics["env/tree_branch_step"] == [0.0]
    trainer._pending_metrics.clear()
    for k, t in enumerate(rollout.last_trajectories):
        assert t.metadata["sample_step"] == 0 and out["prompt_ids"][k] == t.steps[0].prompt_ids
        assert len(out["completion_ids"][k]) <= root_total - 1
    assert rollout.last_trajectories[0].metadata["finish_reasons"][-1] == "length"


def test_random_and_fixed_steps(trainer, tokenizer):
    prompts = prompts_of(tokenizer)

    def steps_of(tree):
        rollout = EnvRollout(policy=BranchingPolicy(tokenizer, logprobs=False), tree=tree)
        out = rollout(prompts, trainer)
        return [t.metadata["sample_step"] for t in rollout.last_trajectories], out, rollout.last_trajectories

    chosen, _, _ = steps_of("random")
    assert set(chosen) <= {0, 1} and chosen == steps_of("random")[0]  # seeded: the trainer's seed, step, group
    chosen, _, _ = steps_of(7)
    assert chosen == [1] * 6  # clipped to the root's last step
    chosen, out, trajectories = steps_of(0)
    assert chosen == [0] * 6
    for k, t in enumerate(trajectories):  # branching at step 0: whole episodes, as without tree
        prompt, completion, mask = expected_sample(t)
        assert (out["prompt_ids"][k], out["completion_ids"][k], out["env_mask"][k]) == (prompt, completion, mask)
    assert [t.metadata["tree"]["branch_step"] for t in trajectories] == [None, 0, 0] * 2


def test_refusals(trainer, tokenizer, monkeypatch):
    prompts = prompts_of(tokenizer)
    with pytest.raises(ValueError, match="needs the sampling log-probs.*use_vllm=True, or use tree='random'"):
        EnvRollout(policy=BranchingPolicy(tokenizer, logprobs=False), tree="entropy")(prompts, trainer)
    other = prompts_of(tokenizer, n=3, repeat=1)
    with pytest.raises(ValueError, match=r"prompts 0\.\.2 of this call's 6 are not one row repeated 3 times"):
        EnvRollout(policy=BranchingPolicy(tokenizer), tree=1)(other + other, trainer)
    with pytest.raises(ValueError, match="tree must be 'entropy', 'random' or a step index"):
        EnvRollout(tree="first")
    with pytest.raises(ValueError, match="cannot live in Ray workers: drop env_workers= or tree="):
        EnvRollout(tree=1, env_workers=2)

    from agent_gym.core.env import AgentEnv
    from agent_gym.core.snapshot import SnapshotError

    monkeypatch.setattr(AgentEnv, "fork_blocker", lambda self: "its calculator is a live session")
    policy = BranchingPolicy(tokenizer)
    with pytest.raises(SnapshotError, match=r"EnvRollout\(tree=1\) branches each group from a copy of the env's state, "
                       r"and AgentR1/ArithmeticTool-v0 cannot be snapshot: its calculator is a live session; train "):
        EnvRollout(policy=policy, tree=1)(prompts, trainer)
    assert policy.prompts == []  # refused before anything was generated


def test_one_grpo_step_in_tree_mode(tmp_path, tokenizer):
    """A real GRPOTrainer step: what TRL trained on is the tree's samples, and its advantages are the
    per-state groups'."""
    from agent_gym.models import load_causal_lm

    model = load_causal_lm("smollm2-135m-instruct")
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    rollout = EnvRollout(policy=BranchingPolicy(tokenizer, logprobs=False), tree="random")
    dataset = env_dataset("AgentR1/ArithmeticTool-v0", n=2, env_kwargs=ENV_KWARGS, tokenizer=tokenizer)
    trainer = recording_trainer(model, tokenizer=tokenizer, dataset=dataset, rollout=rollout,
                                args=grpo_args(tmp_path, max_steps=1, max_completion_length=96))
    trainer.train()
    [record] = trainer.records
    batch, trajectories = record["batch"], record["trajectories"]
    assert record["rewards"] == [t.return_ for t in trajectories] == [1.0, 0.0, 1.0, 0.0]
    for k, t in enumerate(trajectories):
        start = t.metadata["sample_step"]
        prompt = batch["prompt_ids"][k][batch["prompt_mask"][k].bool()].tolist()
        assert prompt == t.steps[start].prompt_ids == trajectories[k - k % 2].steps[start].prompt_ids
        completion = batch["completion_ids"][k][batch["completion_mask"][k].bool()].tolist()
        assert prompt + completion == t.steps[-1].prompt_ids + t.steps[-1].response_ids
    torch.testing.assert_close(batch["advantages"].cpu(), trl_advantages(record["rewards"], 2))
    for pair in groups(trajectories, 2):
        tree = tree_advantages(pair)
        k = pair[0].metadata["sample_step"]
        assert [tree[t.id][k] for t in pair] == [pytest.approx(1.0, abs=1e-5), pytest.approx(-1.0, abs=1e-5)]
    [logged] = [e for e in trainer.state.log_history if "env/tree_branch_step" in e]
    assert logged["env/tree_generated_tokens"] == pytest.approx(rollout.policy.generated / 4)
    assert logged["env/tree_flat_tokens"] == pytest.approx(sum(len(s.response_ids) for t in trajectories for s in t.steps) / 4)
    assert logged["env/tree_branch_step"] == pytest.approx(sum(p[0].metadata["sample_step"] for p in groups(trajectories, 2)) / 2)
    assert any(not torch.equal(before[name], p.detach()) for name, p in model.named_parameters())
