"""Helpers of the TRL adapter's tests (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import re
from collections import Counter

from agent_gym.chat.template import ChatTemplate
from agent_gym.rollout.policy import Generation
from agent_gym.tools import HermesParser
from agent_gym.tools.calculator import evaluate_arithmetic, format_number
from agent_gym_trl import env_reward


class CalculatorPolicy:
    """A scripted policy for ArithmeticTool-v0 that always calls the tool, then answers with its result.

    Turn 1 calls ``calculate`` on the question's expression; every second episode (in the order the
    episodes start) asks for the expression plus one instead, so that a GRPO group of two holds one right
    and one wrong answer. Turn 2 answers ``#### <value of the expression it sent>``. It reads the prompt
    ids as text only to find the question; its replies go through the chat template like a model's.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.template = ChatTemplate(tokenizer)
        self.stop_ids = list(self.template.end_of_turn_ids)
        self.parser = HermesParser()
        self.episodes = 0
        self.calls = 0

    def generate(self, prompts, *, max_new_tokens):
        self.calls += 1
        out = []
        for prompt in prompts:
            text = self.tokenizer.decode(prompt)
            tail = text[text.rfind("What is ") :]  # the real question, after the few-shot example
            if "<tool_call>" not in tail:
                expression = re.match(r"What is (.+?)\?", tail).group(1)
                if self.episodes % 2:
                    expression += " + 1"
                self.episodes += 1
                reply = self.parser.format_calls([{"name": "calculate", "arguments": {"expression": expression}}])
            else:
                expression = re.findall(r'"expression": "(.+?)"', tail)[-1]
                value = format_number(evaluate_arithmetic(expression))
                reply = f"{expression} = {value}\n#### {value}"
            ids = self.template.encode(reply) + self.stop_ids
            finish = "stop" if len(ids) <= max_new_tokens else "length"
            out.append(Generation(ids=ids[:max_new_tokens], logprobs=None, finish_reason=finish))
        return out


class BranchingPolicy:
    """A scripted policy for ArithmeticTool-v0 (few-shot) whose answers to one question alternate, for trees.

    Turn 1 calls ``calculate`` on the question's expression (log-prob -0.1 per id); a later turn answers.
    The first, third, ... answer to a question is the tool's result; the second, fourth, ... a longer
    wrong one (result + 1, with a sentence before it). Answers have log-prob -2.0 per id, so they are the
    least likely turns; ``logprobs=False`` reports none. It records every prompt it generated for and
    counts the ids it generated.
    """

    WRONG = "Let me add one to be safe, since the question may count both ends: {value}.\n#### {value}"

    def __init__(self, tokenizer, *, logprobs=True):
        self.tokenizer = tokenizer
        self.template = ChatTemplate(tokenizer)
        self.stop_ids = list(self.template.end_of_turn_ids)
        self.parser = HermesParser()
        self.logprobs = logprobs
        self.answers: Counter = Counter()
        self.prompts: list[list[int]] = []
        self.generated = 0

    def generate(self, prompts, *, max_new_tokens):
        out = []
        for prompt in prompts:
            self.prompts.append(list(prompt))
            tail = self.question(prompt)
            expression = re.match(r"What is (.+?)\?", tail).group(1)
            if "<tool_call>" not in tail:
                reply, lp = self.parser.format_calls([{"name": "calculate", "arguments": {"expression": expression}}]), -0.1
            else:
                value = evaluate_arithmetic(expression)
                wrong = self.answers[expression] % 2 == 1
                self.answers[expression] += 1
                reply = self.WRONG.format(value=format_number(value + 1)) if wrong else f"#### {format_number(value)}"
                lp = -2.0
            ids = (self.template.encode(reply) + self.stop_ids)[:max_new_tokens]
            self.generated += len(ids)
            out.append(Generation(ids=ids, logprobs=[lp] * len(ids) if self.logprobs else None, finish_reason="stop"))
        return out

    def question(self, prompt):
        """The prompt's text from the real question on (after the few-shot example)."""
        text = self.tokenizer.decode(prompt)
        return text[text.rfind("What is ") :]

    def first_turns(self):
        """The prompts it generated a first turn for (no tool call yet)."""
        return [p for p in self.prompts if "<tool_call>" not in self.question(p)]


def recording_trainer(model, *, tokenizer, dataset, rollout, args):
    """A GRPOTrainer that keeps each generation batch as TRL built it, with the rollout's trajectories and
    the per-sample rewards TRL logged (nothing else changed)."""
    from trl import GRPOTrainer

    class RecordingTrainer(GRPOTrainer):
        records: list = []

        def _generate_and_score_completions(self, inputs):
            batch = super()._generate_and_score_completions(inputs)
            trajectories = list(self.rollout_func.last_trajectories)
            rewards = list(self._logs["rewards"]["env_reward"])[-len(trajectories) :]
            self.records.append({"batch": batch, "trajectories": trajectories, "rewards": rewards})
            return batch

    RecordingTrainer.records = []
    return RecordingTrainer(
        model=model, reward_funcs=env_reward, args=args, train_dataset=dataset, processing_class=tokenizer, rollout_func=rollout
    )


def trl_advantages(rewards, num_generations):
    """TRL's group normalisation of per-sample rewards (GRPOConfig's scale_rewards="group" default)."""
    import torch

    groups = torch.tensor(rewards, dtype=torch.float32).view(-1, num_generations)
    return ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)).flatten()


def grpo_args(tmp_path, **overrides):
    """A small CPU GRPOConfig: no checkpoints, no reports, no gradient checkpointing, seeded."""
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=32,
        max_steps=2,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        gradient_checkpointing=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def expected_sample(trajectory):
    """(prompt ids, completion ids, env mask) of a trajectory, rebuilt from its step records alone.

    The completion is every id after the first prompt up to the end of the last action; a position is a
    policy id (1) exactly where some step's action lies, an env id (0) elsewhere.
    """
    steps = trajectory.steps
    prompt = list(steps[0].prompt_ids)
    last = steps[-1]
    completion = list(last.prompt_ids[len(prompt) :]) + list(last.response_ids)
    mask = [0] * len(completion)
    for step in steps:
        start = len(step.prompt_ids) - len(prompt)
        assert completion[start : start + len(step.response_ids)] == list(step.response_ids)
        for k in range(len(step.response_ids)):
            mask[start + k] = 1
    return prompt, completion, mask
