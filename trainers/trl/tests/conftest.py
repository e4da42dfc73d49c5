"""Fixtures of the TRL adapter's tests: real trl, real envs, the embedded SmolLM2 on CPU."""

from __future__ import annotations

import os
import re

# TRL warns on every GRPOTrainer built with rollout_func that the hook is experimental.
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest

from agent_gym.chat.template import ChatTemplate
from agent_gym.rollout.policy import Generation
from agent_gym.tools import HermesParser
from agent_gym.tools.calculator import evaluate_arithmetic, format_number


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer (the default model and SmolLM2-135M-Instruct share it)."""
    from agent_gym.models import load_tokenizer

    return load_tokenizer()


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


@pytest.fixture
def calculator_policy(tokenizer):
    return CalculatorPolicy(tokenizer)
