"""The demo agent program: arithmetic with a calculator tool, over the OpenAI chat API (standard library only).

:func:`calculator_program` is what ``AgentR1/AgentProgram-v0`` runs when no ``program`` is given: it
asks the model its task's question, offers a ``calculate`` tool in OpenAI's ``tools`` format, runs the
calls the model makes and sends back the results, and returns the model's final answer. It talks to
the endpoint with ``urllib`` (no client package), as any program would; ``python -m
agent_gym_agent_program.demo`` runs the same program as a command (it reads ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and ``AGENT_GYM_TASK`` and prints the answer).

The demo tasks (:func:`demo_task`) are generated, seeded: ``"What is 7 * 48?"``, ``"What is (23 + 58) * 4?"``,
ids ``"<split>-<n>"``.
"""

from __future__ import annotations

import json
import os
import urllib.request
import zlib
from fractions import Fraction
from typing import Any, Mapping

import numpy as np

from agent_gym.core.grading import final_number

__all__ = ["CALCULATE_TOOL", "DEMO_SPLITS", "SYSTEM_PROMPT", "answer_match", "calculator_program", "demo_task", "final_number"]

DEMO_SPLITS = ("train", "test")
SYSTEM_PROMPT = ("You are a helpful assistant who is good at arithmetic. Use the calculate tool for the arithmetic. "
                 "Give the final answer as a number on the last line, like this: #### 42")
#: The calculator, offered in OpenAI's tools format.
CALCULATE_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression (+ - * / ** % and parentheses) and return the result.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. \"(1.5 + 2.5) / 2\""}},
            "required": ["expression"],
        },
    },
}
MAX_ROUNDS = 3


def demo_task(split: str, n: int) -> dict[str, Any]:
    """Task ``n`` of a demo split, the same in every process: ``{"id", "prompt", "answer"}``."""
    if split not in DEMO_SPLITS:
        raise ValueError(f"unknown split {split!r} for the AgentProgram-v0 demo; known: {', '.join(DEMO_SPLITS)}")
    rng = np.random.default_rng([zlib.crc32(split.encode()), n])
    a, b, c = (int(rng.integers(lo, hi + 1)) for lo, hi in ((2, 9), (10, 99), (10, 99)))
    if rng.integers(0, 2):
        expression, answer = f"{a} * {b}", a * b
    else:
        expression, answer = f"({b} + {c}) * {a}", (b + c) * a
    return {"id": f"{split}-{n}", "prompt": f"What is {expression}?", "answer": str(answer)}


def calculator_program(base_url: str, api_key: str, task: Mapping[str, Any]) -> str:
    """Ask the model ``task["prompt"]`` with the calculator offered; run its calls; return its final answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": task["prompt"]}]
    content = ""
    for _ in range(MAX_ROUNDS):
        message = _chat(base_url, api_key, {"model": "policy", "messages": messages, "tools": [CALCULATE_TOOL]})
        content = message.get("content") or ""
        calls = message.get("tool_calls") or []
        messages.append({"role": "assistant", "content": message.get("content"), **({"tool_calls": calls} if calls else {})})
        if not calls:
            break
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": _calculate(call["function"]["arguments"])})
    return content


def _calculate(arguments: str) -> str:
    from agent_gym.tools.calculator import CalculatorError, evaluate_arithmetic, format_number

    try:
        expression = json.loads(arguments)["expression"]
        return format_number(evaluate_arithmetic(str(expression)))
    except (CalculatorError, ValueError, KeyError, TypeError) as exc:
        return f"error: {exc}"


def _chat(base_url: str, api_key: str, body: Mapping[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())["choices"][0]["message"]


def answer_match(result: Any, task: Mapping[str, Any]) -> Any:
    """The default grader: 1.0 when the result's final number (:func:`final_number`) equals ``task["answer"]``."""
    from agent_gym.core.env import Grade

    given = final_number(str(result if result is not None else ""))
    expected = str(task["answer"])
    if given is None:
        return Grade.from_check(False, "no_number", expected=expected)
    try:
        correct = Fraction(given) == Fraction(expected)
    except (ValueError, ZeroDivisionError):
        correct = given == expected.strip()
    return Grade.from_check(correct, "correct" if correct else "wrong_answer", predicted=given, expected=expected)


def main() -> None:
    """The demo as a command: the task from ``AGENT_GYM_TASK``, the endpoint from ``OPENAI_*``; prints the answer."""
    print(calculator_program(os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"], json.loads(os.environ["AGENT_GYM_TASK"])))


if __name__ == "__main__":
    main()
