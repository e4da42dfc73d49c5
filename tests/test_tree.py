"""Tree rollouts on CPU: the shared prefix is generated once, branches continue from forked env states,
and the per-state groups give the advantages they should.

The generate function is scripted (it stands in for a sampling policy: the first answer it writes is
right, later ones alternate), so the tree's rewards are known exactly."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

from agent_gym.models import load_tokenizer
from agent_gym.rollout.policy import Generation
from agent_gym.rollout.tree import TreeStats, play_tree, tree_advantages
from agent_gym.tools import HermesParser

CALC = HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "(16 - 3 - 4) * 2"}}])


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


class Script:
    """Turn 1: the calculator call; turn 2: '#### 18' the first time, then '#### 17', '#### 18', ..."""

    def __init__(self, tok):
        self.tok = tok
        self.eot = [tok.convert_tokens_to_ids("<|im_end|>")]
        self.prompts: list[list[int]] = []
        self.answers = 0

    async def __call__(self, prompt_ids):
        self.prompts.append(list(prompt_ids))
        turns_before = self.tok.decode(prompt_ids).count("<|im_start|>assistant") - 1  # the last one is the prompt's
        if turns_before == 0:
            ids, lp = self.tok.encode(CALC, add_special_tokens=False) + self.eot, -0.1
        else:
            text = "#### 18" if self.answers % 2 == 0 else "#### 17"
            self.answers += 1
            ids, lp = self.tok.encode(text, add_special_tokens=False) + self.eot, -2.0
        return Generation(ids, [lp] * len(ids), "stop")


def _env(tok):
    return gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test")


def test_a_branch_at_the_answer_generates_the_shared_prefix_once(tok):
    script = Script(tok)
    stats = TreeStats()
    tree = asyncio.run(play_tree(_env(tok), script, width=3, branch_at={1}, task_id="test-0", stats=stats))
    root, a, b = tree
    assert [len(t.steps) for t in tree] == [2, 2, 2]
    assert [t.return_ for t in tree] == [1.0, 0.0, 1.0]
    # the first prompt (and the tool call made for it) went to the policy once, not once per leaf
    assert sum(p == script.prompts[0] for p in script.prompts) == 1
    assert len(script.prompts) == 2 + 1 + 1
    assert (stats.leaves, stats.generated_steps, stats.flat_steps) == (3, 4, 6)
    # the branches hold the shared step as the root played it, under their own id
    assert a.steps[0].response_ids == root.steps[0].response_ids and a.steps[0].trajectory_id == a.id
    assert a.steps[1].prompt_ids == root.steps[1].prompt_ids  # the same state: the tool's answer included
    assert [t.metadata["tree"] for t in tree] == [
        {"root": root.id, "parent": None, "branch_step": None, "shared_steps": 0},
        {"root": root.id, "parent": root.id, "branch_step": 1, "shared_steps": 1},
        {"root": root.id, "parent": root.id, "branch_step": 1, "shared_steps": 1},
    ]


def test_per_state_groups_give_each_continuation_its_advantage(tok):
    tree = asyncio.run(play_tree(_env(tok), Script(tok), width=2, branch_at={1}, task_id="test-0"))
    root, child = tree
    adv = tree_advantages(tree)
    # one group at step 1: returns 1.0 (root) and 0.0 (child): mean 0.5, std 0.5
    assert adv[root.id][0] == 0.0  # before any branch point: nothing to compare with
    assert adv[root.id][1] == pytest.approx(1.0, abs=1e-5)
    assert adv[child.id] == [None, pytest.approx(-1.0, abs=1e-5)]


def test_every_step_branches_recursively_up_to_max_leaves(tok):
    tree = asyncio.run(play_tree(_env(tok), Script(tok), width=2, branch_at="every", task_id="test-0", max_leaves=3))
    assert len(tree) == 3
    steps = [t.metadata["tree"]["branch_step"] for t in tree]
    assert steps == [None, 0, 1]  # the root branches at its two steps
    root, at0, at1 = tree
    adv = tree_advantages(tree)

    def z(values, v):
        mean = sum(values) / len(values)
        std = (sum((x - mean) ** 2 for x in values) / len(values)) ** 0.5
        return (v - mean) / (std + 1e-6)

    # step 1's group: the root's answer against at1's; step 0's group: the root's continuation from its
    # call (itself and at1, which shares that call) against at0's
    g1 = [root.return_, at1.return_]
    g0 = [(root.return_ + at1.return_) / 2, at0.return_]
    assert adv[root.id] == [pytest.approx(z(g0, g0[0])), pytest.approx(z(g1, g1[0]))]
    assert adv[at0.id] == [pytest.approx(z(g0, g0[1])), pytest.approx(z(g0, g0[1]))]
    assert adv[at1.id] == [None, pytest.approx(z(g1, g1[1]))]
    assert sorted(t.return_ for t in tree) == [0.0, 1.0, 1.0]  # answers 18, 17, 18 in some order


def test_entropy_branches_where_the_sampled_actions_were_least_likely(tok):
    tree = asyncio.run(play_tree(_env(tok), Script(tok), width=2, branch_at="entropy", top_k=1, task_id="test-0"))
    assert [t.metadata["tree"]["branch_step"] for t in tree] == [None, 1]  # the answer step: -log p 2.0 > 0.1


def test_entropy_without_logprobs_is_a_clear_error(tok):
    script = Script(tok)

    async def no_logprobs(prompt):
        g = await script(prompt)
        return Generation(g.ids, None, g.finish_reason)

    with pytest.raises(ValueError, match="needs log-probs"):
        asyncio.run(play_tree(_env(tok), no_logprobs, branch_at="entropy", task_id="test-0"))


def test_a_branch_function_sees_the_played_root_and_branch_envs_go_to_release_env(tok):
    seen, released = [], []

    def last_step(steps):
        seen.append([s.step for s in steps])
        return {len(steps) - 1, 7}  # a step the root does not have is ignored

    tree = asyncio.run(play_tree(_env(tok), Script(tok), width=3, branch_at=last_step, task_id="test-0",
                                 release_env=lambda env, played: released.append((env, played))))
    assert seen == [[0, 1]]  # called once, with the root's steps: a tree of depth one
    assert [t.metadata["tree"]["branch_step"] for t in tree] == [None, 1, 1]
    assert [t.return_ for t in tree] == [1.0, 0.0, 1.0]
    # each branch's env, not closed: handed over as played to the end
    assert [played for _, played in released] == [True, True] and released[0][0] is not released[1][0]
    assert all(env.unwrapped.context is not None for env, _ in released)
    for t in tree:  # recorded as play_episode records an episode the env ended
        assert t.metadata["finish_reasons"] == ["stop", "stop"] and t.metadata["truncated_reason"] is None
        assert t.tail_ids == []


def test_a_stopped_branch_keeps_the_envs_reply_and_a_failed_one_releases_its_env(tok):
    from agent_gym.rollout.episode import EndEpisode

    script = Script(tok)
    calls = []

    async def stop_branches(prompt):
        calls.append(prompt)
        if len(calls) > 2:  # the root's two turns, then the branch's first
            raise EndEpisode("budget")
        return await script(prompt)

    root, branch = asyncio.run(play_tree(_env(tok), stop_branches, width=2, branch_at={1}, task_id="test-0"))
    assert (len(branch.steps), branch.metadata["truncated_reason"], branch.metadata["finish_reasons"]) == (1, "budget", ["stop"])
    step0 = root.steps[0]
    # the tail: the calculator's reply the branch never answered (what a stopped play_episode keeps)
    assert branch.tail_ids == root.steps[1].prompt_ids[len(step0.prompt_ids) + len(step0.response_ids):] != []
    assert root.tail_ids == [] and root.metadata["truncated_reason"] is None

    released = []

    async def fail_branches(prompt):
        calls.append(prompt)
        if len(calls) > 5:
            raise RuntimeError("generation server went away")
        return await script(prompt)

    with pytest.raises(RuntimeError, match="went away"):
        asyncio.run(play_tree(_env(tok), fail_branches, width=2, branch_at={1}, task_id="test-0",
                              release_env=lambda env, played: released.append(played)))
    assert released == [False]
