"""Helpers of the TRL adapter's tests (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import re

from agent_gym.chat.template import ChatTemplate
from agent_gym.rollout.policy import Generation
from agent_gym.tools import HermesParser
from agent_gym.tools.calculator import evaluate_arithmetic, format_number


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
