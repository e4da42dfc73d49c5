"""What a snapshot and a restore cost, per env, at turn 1 and turn 10 (median over repeats, microseconds),
and what a tree rollout saves against flat rollouts of as many leaves.

    python benchmarks/snapshot_cost.py                 # prints a Markdown table for docs/performance.md
    python benchmarks/snapshot_cost.py --repeats 50

An episode is driven to the turn by repeating one scripted action (a calculator call, a move, a tool
read); an env whose episode ends before turn 10 shows "-". The restore is ``env.unwrapped.restore``
into one fresh env, the same each repeat (an env is made once: its cost is gym.make's, not the
restore's). The tree part plays GSM8KTool trees of width 4 branching at every step (max 16 leaves)
with a scripted generate and counts generated tokens against 16 whole episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.models import load_tokenizer
from agent_gym.rollout import Generation
from agent_gym.rollout.tree import TreeStats, play_tree
from agent_gym.tools import HermesParser

CALC = HermesParser().format_calls([{"name": "calculate", "arguments": {"expression": "2 + 3"}}])

#: (env id, constructor arguments, the repeated action text)
CASES = [
    ("AgentR1/GSM8KTool-v0", {"split": "test", "max_turns": 12}, CALC),
    ("AgentR1/ArithmeticTool-v0", {"max_turns": 12}, CALC),
    ("AgentR1/CountdownTool-v0", {"max_turns": 12}, CALC),
    ("AgentR1/Sokoban-v0", {"difficulty": "hard"}, "<action>Up</action>"),
    ("AgentR1/FrozenLake-v0", {"difficulty": "hard"}, "nonsense"),
    ("AgentR1/Wordle-v0", {}, "<guess>crane</guess>"),
    ("AgentR1/SearchQA-v0", {"max_turns": 12}, HermesParser().format_calls([{"name": "search", "arguments": {"query": "founder"}}])),
    ("AgentR1/CustomerService-v0", {}, HermesParser().format_calls([{"name": "get_product", "arguments": {"product_id": "P0"}}])),
]


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(tok, env_id: str, kwargs: dict, text: str, repeats: int) -> dict[int, tuple[float, float] | None]:
    env = gym.make(env_id, tokenizer=tok, **kwargs)
    fresh = gym.make(env_id, tokenizer=tok, **kwargs)
    fresh.reset(seed=0)
    eot = list(env.unwrapped.template.end_of_turn_ids)[:1]
    action = tok.encode(text, add_special_tokens=False) + eot
    out: dict[int, tuple[float, float] | None] = {}
    env.reset(seed=0)
    turn, done = 0, False
    for target in (1, 10):
        while turn < target and not done:
            _, _, terminated, truncated, _ = env.step(action)
            turn += 1
            done = terminated or truncated
        if turn < target or done:
            out[target] = None
            continue
        snap = env.unwrapped.snapshot()
        out[target] = (_median_us(env.unwrapped.snapshot, repeats), _median_us(lambda: fresh.unwrapped.restore(snap), repeats))
    env.close()
    fresh.close()
    return out


def tree_saving(tok) -> TreeStats:
    eot = [tok.convert_tokens_to_ids("<|im_end|>")]
    calls = [0]

    async def generate(prompt_ids):
        calls[0] += 1
        turns = tok.decode(prompt_ids).count("<|im_start|>assistant") - 1
        text = CALC if turns < 3 else f"#### {calls[0] % 7}"
        return Generation(tok.encode(text, add_special_tokens=False) + eot, None, "stop")

    stats = TreeStats()
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test")
    asyncio.run(play_tree(env, generate, width=4, branch_at="every", max_leaves=16, task_id="test-0", stats=stats))
    return stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=200, help="timed calls per figure (default: %(default)s)")
    args = p.parse_args()
    tok = load_tokenizer()
    print("| env | snapshot, turn 1 | restore, turn 1 | snapshot, turn 10 | restore, turn 10 |")
    print("|---|---|---|---|---|")
    for env_id, kwargs, text in CASES:
        try:
            gym.spec(env_id)
        except gym.error.Error:
            continue  # its package is not installed
        got = measure(tok, env_id, kwargs, text, args.repeats)
        cells = []
        for turn in (1, 10):
            cells += ["-", "-"] if got[turn] is None else [f"{got[turn][0]:.0f} us", f"{got[turn][1]:.0f} us"]
        print(f"| `{env_id}` | " + " | ".join(cells) + " |")
    s = tree_saving(tok)
    print()
    print(f"tree (width 4, every step, {s.leaves} leaves): {s.generated_steps} generated steps / {s.generated_tokens} tokens; "
          f"flat ({s.leaves} whole episodes): {s.flat_steps} steps / {s.flat_tokens} tokens; "
          f"saved {1 - s.generated_tokens / s.flat_tokens:.0%} of the tokens")


if __name__ == "__main__":
    main()
