"""Two GRPO training steps with the real trl on CPU, through EnvRollout: a single-turn env with TRL's own
generation, a multi-turn tool env with a policy that surely calls the tool, and the same tool env with TRL's
generation from the tool-using default model.

What TRL consumed is read back from the trainer itself (the batch _generate_and_score_completions returns,
the per-sample rewards it logged), and checked against the env: the completion is the env's context token
for token, the env mask is 0 exactly on the env's ids, the reward is the episode's return, and the
advantages are computed from it.
"""

from __future__ import annotations

import pytest
import torch
from _trl_support import CalculatorPolicy, expected_sample, grpo_args, recording_trainer, trl_advantages

from agent_gym_trl import EnvRollout, env_dataset


def unpadded(row, mask):
    return row[mask.bool()].tolist()


def check_batches(trainer, contexts, *, num_generations, budget):
    """Every generation batch TRL trained on against the episodes the env played."""
    assert trainer.records, "the trainer generated nothing"
    for record in trainer.records:
        batch, trajectories = record["batch"], record["trajectories"]
        assert batch["completion_ids"].shape[0] == len(trajectories)
        for k, t in enumerate(trajectories):
            prompt, completion, mask = expected_sample(t)
            context = contexts[t.id]
            completion, mask = completion[:budget], mask[:budget]
            # What TRL holds: prompt (left padded) and completion (right padded) ids, its tool mask.
            assert unpadded(batch["prompt_ids"][k], batch["prompt_mask"][k]) == prompt
            completion_mask = batch["completion_mask"][k]
            assert unpadded(batch["completion_ids"][k], completion_mask) == completion
            assert unpadded(batch["tool_mask"][k], completion_mask) == mask
            # Token for token the env's context (cut at the budget when the env's last reply ran past it).
            assert prompt + completion == context[: len(prompt) + len(completion)]
            assert len(prompt + completion) == min(len(context), len(prompt) + budget)
        assert record["rewards"] == [t.return_ for t in trajectories]
        torch.testing.assert_close(batch["advantages"].cpu(), trl_advantages(record["rewards"], num_generations))


def env_metrics(trainer, step):
    [entry] = [e for e in trainer.state.log_history if e.get("step") == step and "env/turns" in e]
    return entry


def run(tmp_path, tokenizer, *, model_name, env_id, env_kwargs, policy=None, n=4, **args):
    from agent_gym.models import load_causal_lm

    contexts = {}
    rollout = EnvRollout(policy=policy, on_episode=lambda t, env: contexts.setdefault(t.id, list(env.unwrapped.context.ids)))
    dataset = env_dataset(env_id, n=n, env_kwargs=env_kwargs, tokenizer=tokenizer)
    model = load_causal_lm(model_name)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = grpo_args(tmp_path, **args)
    trainer = recording_trainer(model, tokenizer=tokenizer, dataset=dataset, rollout=rollout, args=config)
    trainer.train()
    assert trainer.state.global_step == 2 and len(trainer.records) == 2
    check_batches(trainer, contexts, num_generations=config.num_generations, budget=config.max_completion_length)
    for step, record in zip((1, 2), trainer.records):
        logged = env_metrics(trainer, step)
        trajectories = record["trajectories"]
        assert logged["env/return"] == pytest.approx(sum(t.return_ for t in trajectories) / len(trajectories))
        assert logged["rewards/env_reward/mean"] == pytest.approx(logged["env/return"])
        assert logged["env/turns"] == pytest.approx(sum(len(t.steps) for t in trajectories) / len(trajectories))
        assert logged["env/tool_calls"] == pytest.approx(
            sum(t.final_info.get("tool_calls", 0) for t in trajectories) / len(trajectories)
        )
    changed = any(not torch.equal(before[name], p.detach()) for name, p in model.named_parameters())
    return trainer, changed


def test_two_steps_on_a_single_turn_env_with_trls_generation(tmp_path, tokenizer):
    trainer, _ = run(
        tmp_path, tokenizer, model_name="smollm2-135m-instruct", env_id="AgentR1/Arithmetic-v0", env_kwargs={"level": 1}
    )
    for record in trainer.records:
        for t in record["trajectories"]:
            assert len(t.steps) == 1 and t.metadata["truncated_reason"] is None
            assert t.return_ == (1.0 if t.final_info["correct"] else 0.0)
    for record in trainer.records:  # one action, no env ids
        assert bool((record["batch"]["tool_mask"] == 1).all())


def test_two_steps_on_a_multi_turn_tool_env_with_a_scripted_tool_user(tmp_path, tokenizer):
    policy = CalculatorPolicy(tokenizer)
    trainer, changed = run(
        tmp_path,
        tokenizer,
        model_name="smollm2-135m-instruct",
        env_id="AgentR1/ArithmeticTool-v0",
        env_kwargs={"level": 1, "few_shot": True},
        policy=policy,
        max_completion_length=96,
    )
    for record in trainer.records:
        trajectories = record["trajectories"]
        assert [len(t.steps) for t in trajectories] == [2] * 4  # a tool call, then the answer
        assert [t.final_info["tool_calls"] for t in trajectories] == [1] * 4
        assert record["rewards"] == [1.0, 0.0, 1.0, 0.0]  # each group: one right, one wrong
        env_ids = (record["batch"]["tool_mask"] == 0) & (record["batch"]["completion_mask"] == 1)
        assert int(env_ids.sum(1).min()) > 0  # every sample holds the calculator's reply, masked
        assert env_metrics(trainer, 1)["env/correct"] == 0.5
    assert policy.calls == 4  # two rounds (call, answer) per step, every episode in each
    assert changed  # the advantages were not all zero: the weights moved


def test_two_steps_on_a_multi_turn_tool_env_with_trls_generation(tmp_path, tokenizer):
    # The default model (the project's tool-use warm start) calls the calculator in most episodes.
    trainer, _ = run(
        tmp_path,
        tokenizer,
        model_name=None,
        env_id="AgentR1/ArithmeticTool-v0",
        env_kwargs={"level": 1, "few_shot": True},
        n=2,
        per_device_train_batch_size=2,
        max_completion_length=64,
    )
    trajectories = [t for record in trainer.records for t in record["trajectories"]]
    assert any(t.final_info.get("tool_calls") for t in trajectories), "no episode called the tool"


class _ToolThenAnswer:
    """A scripted policy for the tool envs of the catalogue: its first turn calls the env's tool, every
    later one answers (the answers alternate between episodes, so a GRPO group can differ). It tells a
    first turn by the prompt's one assistant header (SmolLM2's ChatML)."""

    def __init__(self, tokenizer, call, answers):
        from agent_gym.chat.template import ChatTemplate
        from agent_gym.tools import HermesParser

        self.tokenizer, self.call, self.answers = tokenizer, HermesParser().format_calls([call]), list(answers)
        self.template = ChatTemplate(tokenizer)
        self.stop_ids = list(self.template.end_of_turn_ids)
        self.answered = 0

    def generate(self, prompts, *, max_new_tokens):
        from agent_gym.rollout.policy import Generation

        out = []
        for prompt in prompts:
            first = self.tokenizer.decode(prompt).count("<|im_start|>assistant") == 1
            if first:
                reply = self.call
            else:
                reply = self.answers[self.answered % len(self.answers)]
                self.answered += 1
            ids = (self.template.encode(reply) + self.stop_ids)[:max_new_tokens]
            out.append(Generation(ids=ids, logprobs=None, finish_reason="stop"))
        return out


NEW_ENVS = {
    "AgentR1/SearchQA-v0": ({"difficulty": "easy", "max_turns": 3, "top_k": 1, "snippet_chars": 60},
                            {"name": "search", "arguments": {"query": "founded"}},
                            ["<answer>nobody</answer>", "<answer>Velmont Press</answer>"]),
    "AgentR1/CustomerService-v0": ({"difficulty": "easy", "max_turns": 3},
                                   {"name": "get_product", "arguments": {"product_id": "P0"}},
                                   ["Could you give me your email address?", "Thank you."]),
    "AgentR1/MCPTask-v0": ({"max_turns": 3}, {"name": "stock", "arguments": {"item": "bolts"}}, ["#### 1", "#### 2"]),
    # an answer without a tool call ends the episode: the project's hidden tests grade the unfixed copy
    "AgentR1/SWE-v0": ({"difficulty": "easy", "max_turns": 3}, {"name": "bash", "arguments": {"command": "ls"}},
                       ["I could not find the bug.", "Done."]),
    # the demo agent program: TRL's prompt column is the task's question, the episode is the program's (its
    # system prompt, its calculator); its answer is graded on the program's result
    "AgentR1/AgentProgram-v0": ({"max_turns": 3}, {"name": "calculate", "arguments": {"expression": "2 + 2"}},
                                ["#### 4", "#### 5"]),
}


@pytest.mark.parametrize("env_id", sorted(NEW_ENVS))
def test_two_steps_on_the_catalogue_envs_with_a_scripted_tool_user(tmp_path, tokenizer, env_id):
    import trl

    from agent_gym_trl.private import TESTED_RELEASES

    if trl.__version__ != TESTED_RELEASES[-1]:
        # These check the envs through the adapter; the adapter's trl versions are checked by the tests
        # above, so the envs are played under the newest tested release only (CI time).
        pytest.skip(f"the catalogue envs are checked under trl {TESTED_RELEASES[-1]}, this is {trl.__version__}")
    env_kwargs, call, answers = NEW_ENVS[env_id]
    policy = _ToolThenAnswer(tokenizer, call, answers)
    # one prompt's group of two per step: CustomerService's prompt is about 1,500 tokens, and the check is
    # the env's turns through the adapter, not the batch size
    trainer, _ = run(tmp_path, tokenizer, model_name="smollm2-135m-instruct", env_id=env_id, env_kwargs=env_kwargs,
                     policy=policy, max_completion_length=160, per_device_train_batch_size=2)
    for record in trainer.records:
        for t in record["trajectories"]:
            assert len(t.steps) >= 2 and t.steps[0].info["tool_calls"] == 1  # the call, then the answer
            assert t.metadata["truncated_reason"] != "max_completion_tokens"  # the samples hold whole episodes
        env_ids = (record["batch"]["tool_mask"] == 0) & (record["batch"]["completion_mask"] == 1)
        assert int(env_ids.sum(1).min()) > 0  # every sample holds the tool's reply, masked out
        if env_id == "AgentR1/AgentProgram-v0":
            for t in record["trajectories"]:
                tool_turn = tokenizer.decode(t.steps[1].prompt_ids[len(t.steps[0].prompt_ids) + len(t.steps[0].response_ids):])
                assert tool_turn == "\n<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n"  # the program ran the call
                answer = tokenizer.decode(t.steps[1].response_ids)
                expected = t.final_info["expected"]
                assert t.return_ == float(answer.startswith(f"#### {expected}<"))
        if env_id == "AgentR1/SWE-v0":  # graded by the hidden tests in the sandbox, not by the answer's text
            for t in record["trajectories"]:
                info = t.final_info
                assert (t.return_, info["answer_check"], info["submitted"]) == (0.0, "unresolved", False)
                assert info["tests"]["fail_to_pass"][0] == 0 < info["tests"]["pass_to_pass"][0]


def test_two_steps_on_a_two_player_game_against_a_scripted_opponent(tmp_path, tokenizer):
    """KuhnPoker-v0, the single-agent view of a two-player game, with TRL's own generation: the opponent's
    moves come back as env ids (check_batches: each sample is its episode's context), and the return is the
    game's outcome in chips, as the env graded it."""
    trainer, _ = run(tmp_path, tokenizer, model_name="smollm2-135m-instruct", env_id="AgentR1/KuhnPoker-v0", env_kwargs={},
                     max_completion_length=96)
    outcomes = set()
    for record in trainer.records:
        for t in record["trajectories"]:
            info = t.final_info
            assert info["role"] in ("player_0", "player_1") and info["opponent"] == "random"
            assert t.return_ == info["reward_components"]["outcome"]  # no shaping unless asked for
            assert (info["outcome"] == "win") == (t.return_ > 0)
            outcomes.add(info["outcome"])
    assert outcomes <= {"win", "loss", "illegal_move", "truncated"} and outcomes
