#!/usr/bin/env python3
"""Median time per GSM8KTool step, without a model, at turns 1..N: incremental context vs re-rendering.

Each episode is driven by scripted tool-calling actions (token ids of a hermes calculator call plus
the end-of-turn token). For every turn we time:

- ``step``: the whole ``env.step(action)`` of agent_gym (decode, parse, run the calculator, append
  the tool turn, build the observation);
- ``incremental``: the context update inside that step: ids of the new tool turn only;
- ``re-render``: the context update Agent-R1 does each turn instead: render the chat template over
  all messages so far and tokenize the whole text again;
- ``agent-r1 step``: ``step - incremental + re-render``, the same step with re-rendering.

Target: our step stays flat as turns grow and is >= 10x cheaper than re-rendering by turn 10.

    python benchmarks/step_latency.py --turns 10 --episodes 30
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.tools import HermesParser, ToolCall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10, help="tool-calling turns per episode (default 10)")
    parser.add_argument("--episodes", type=int, default=30, help="episodes to take the median over (default 30)")
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer path/name, or a template-matrix family (smollm2, gemma3, deepseek-r1-qwen); "
        "default: the embedded SmolLM2",
    )
    args = parser.parse_args()

    from agent_gym.models.gguf import FAMILIES, family_tokenizer

    tokenizer = family_tokenizer(args.tokenizer) if args.tokenizer in FAMILIES else args.tokenizer
    env = gym.make(
        "AgentR1/GSM8KTool-v0", tokenizer=tokenizer, split="test", max_turns=args.turns + 1, max_context_tokens=32768
    ).unwrapped
    template = env.template
    hermes = HermesParser()
    steps: list[list[float]] = [[] for _ in range(args.turns)]
    incremental: list[list[float]] = [[] for _ in range(args.turns)]
    rerender: list[list[float]] = [[] for _ in range(args.turns)]
    tokens = [0] * args.turns
    for episode in range(args.episodes):
        env.reset(seed=episode)
        for turn in range(args.turns):
            text = f"Step {turn + 1}: let me compute this part.\n" + hermes.format_calls(
                [ToolCall(id="call_0", name="calculate", arguments={"expression": f"{episode} * {turn} + 1.5"}, raw="")]
            )
            action = template.encode(text) + template.end_of_turn_ids
            t0 = time.perf_counter()
            obs, *_ = env.step(action)
            steps[turn].append(time.perf_counter() - t0)
            tokens[turn] = len(obs["prompt_ids"])
            # The same context update the step just did: ids for the new tool turn only (after the
            # real history: a history-dependent template renders it, the others ignore it).
            tool_turn, history = [obs["messages"][-1]], obs["messages"][:-1]
            t0 = time.perf_counter()
            template.turn_suffix(tool_turn, action, history=history, tools=obs["tools"])
            incremental[turn].append(time.perf_counter() - t0)
            # The baseline: one fresh render + tokenization of the whole conversation so far.
            t0 = time.perf_counter()
            template.encode(template.render(obs["messages"], obs["tools"], add_generation_prompt=True))
            rerender[turn].append(time.perf_counter() - t0)

    print(
        f"GSM8KTool step latency, median over {args.episodes} episodes (ms); tokenizer: {env.tokenizer.name_or_path}; "
        f"history-dependent template: {template.history_dependent}"
    )
    print(f"{'turn':>4} {'tokens':>7} | {'incremental':>11} {'re-render':>10} {'ratio':>7} | {'step':>7} {'agent-r1 step':>14} {'ratio':>6}")
    for turn in range(args.turns):
        step = statistics.median(steps[turn]) * 1e3
        ours, theirs = statistics.median(incremental[turn]) * 1e3, statistics.median(rerender[turn]) * 1e3
        other_step = step - ours + theirs
        print(
            f"{turn + 1:>4} {tokens[turn]:>7} | {ours:>11.3f} {theirs:>10.3f} {theirs / ours:>6.1f}x"
            f" | {step:>7.3f} {other_step:>14.3f} {other_step / step:>5.1f}x"
        )


if __name__ == "__main__":
    main()
