"""An agent program written with the `openai` SDK, played and trained as AgentR1/AgentProgram-v0.

    pip install -e envs/agent_program openai            # or: pip install -e ".[openai]"
    python examples/agent_program_openai.py --episodes 4             # valid trajectories from the default model
    python examples/agent_program_openai.py --train --iterations 3   # a little REINFORCE on CPU (examples/reinforce.py)

`solve` is an ordinary tool-calling loop: the SDK's own client, a `calculate` tool in OpenAI's `tools`
format, the tool results sent back as `tool` messages, the final answer returned. It knows nothing of
RL; the env hands it a base URL and an API key whose completions come from the policy being trained,
records every request as a step with its exact token ids, and grades the returned answer against the
task (`AgentProgram-v0`'s demo tasks: "What is (23 + 58) * 4?").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
#: The program as AgentProgram-v0 takes it by name (this file and its function).
PROGRAM = f"{HERE}:solve"
SYSTEM = ("You are a helpful assistant who is good at arithmetic. Use the calculate tool for the arithmetic. "
          "Give the final answer as a number on the last line, like this: #### 42")
TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression (+ - * / ** % and parentheses) and return the result.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}]


def calculate(expression: str) -> str:
    from agent_gym.tools.calculator import CalculatorError, evaluate_arithmetic, format_number

    try:
        return format_number(evaluate_arithmetic(expression))
    except CalculatorError as exc:
        return f"error: {exc}"


def solve(base_url: str, api_key: str, task: dict) -> str:
    """The agent: ask, run the calculator calls the model makes, ask again; at most 3 rounds."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key)
    messages: list = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}]
    answer = ""
    for _ in range(3):
        message = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS).choices[0].message
        answer = message.content or ""
        messages.append(message.model_dump(exclude_none=True))  # the assistant turn as the API sent it
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(str(expression))})
    return answer


def play(episodes: int, model: str, max_new_tokens: int) -> list:
    """`episodes` greedy episodes of the default model through the episode engine; prints each."""
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers AgentR1/AgentProgram-v0)
    from agent_gym.rollout import HFPolicy, run_episodes

    policy = HFPolicy(model)
    result = run_episodes(lambda: gym.make("AgentR1/AgentProgram-v0", tokenizer=policy.tokenizer, program=PROGRAM, split="test"),
                          policy, episodes=episodes, max_new_tokens=max_new_tokens, batch_size=episodes, progress=False)
    for t in result.trajectories:
        segments = t.segments()  # raises on any token drift inside a segment
        info = t.final_info
        print(f"{t.task_id}: reward {t.reward} in {len(t.steps)} request(s), {len(segments)} segment(s), "
              f"{sum(len(s.response_ids) for s in segments)} response ids; "
              f"result {info.get('program_result', info.get('truncated_reason'))!r}")
    return result.trajectories


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=4, help="episodes to play without --train (default: %(default)s)")
    p.add_argument("--model", default="smollm2-135m-tool", help="load_causal_lm name or path (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per request at most (default: %(default)s)")
    p.add_argument("--train", action="store_true", help="train with examples/reinforce.py instead; other options go to it")
    args, rest = p.parse_known_args(argv)
    if not args.train:
        if rest:
            p.error(f"unrecognized arguments: {' '.join(rest)}")
        play(args.episodes, args.model, args.max_new_tokens)
        return
    sys.path.insert(0, str(HERE.parent))
    import reinforce

    reinforce.main(["--env-id", "AgentR1/AgentProgram-v0", "--env-kwarg", f"program={PROGRAM}", "--model", args.model,
                    "--max-new-tokens", str(args.max_new_tokens), *rest])


if __name__ == "__main__":
    main()
