"""Env steps per second of ``AgentR1/CustomerService-v0``: the scripted customer and the scripted expert.

    python benchmarks/customer_service_steps.py [--episodes 30] [--difficulty medium|easy|hard|all] [--json]

No model: the actions are the expert's turns (``agent_gym_customer_service.expert``) encoded once per
episode before the clock starts, so the figure is the env's own cost per step (parsing the action,
SQLite tools or the customer's reply, rendering the appended turns) plus reset (task generation, the
episode's database). Printed per difficulty: episodes, steps, steps/s, resets/s and the mean reward
(1.0: every expert episode solves its task). No assertion: a figure to watch, not a test.
"""

from __future__ import annotations

import argparse
import json
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=30, help="episodes per difficulty (seeds 0..N-1; default 30)")
    p.add_argument("--difficulty", default="all", choices=("easy", "medium", "hard", "all"))
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return p.parse_args(argv)


def run(difficulty: str, episodes: int, tokenizer) -> dict[str, float]:
    import gymnasium as gym

    from agent_gym.tools import HermesParser
    from agent_gym_customer_service.expert import expert_texts
    import numpy as np

    env = gym.make("AgentR1/CustomerService-v0", tokenizer=tokenizer, difficulty=difficulty)
    template = env.unwrapped.template
    eot = list(template.end_of_turn_ids)
    parser = HermesParser()
    # the actions of each seed's task, encoded before timing (a policy hands the env ids)
    plans = []
    for seed in range(episodes):
        env.reset(seed=seed)
        plans.append([np.asarray(template.encode(t) + eot) for t in expert_texts(env.unwrapped.task, parser)])
    steps = 0
    rewards = []
    reset_s = step_s = 0.0
    for seed, actions in enumerate(plans):
        t0 = time.perf_counter()
        env.reset(seed=seed)
        t1 = time.perf_counter()
        for action in actions:
            _, reward, terminated, truncated, _ = env.step(action)
            steps += 1
            if terminated or truncated:
                break
        t2 = time.perf_counter()
        reset_s += t1 - t0
        step_s += t2 - t1
        rewards.append(reward)
    env.close()
    return {
        "episodes": episodes, "steps": steps, "steps_per_s": steps / step_s, "resets_per_s": episodes / reset_s,
        "episode_steps_per_s": steps / (step_s + reset_s), "mean_reward": sum(rewards) / len(rewards),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.models import load_tokenizer

    tokenizer = load_tokenizer()
    levels = ("easy", "medium", "hard") if args.difficulty == "all" else (args.difficulty,)
    results = {level: run(level, args.episodes, tokenizer) for level in levels}
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"{'difficulty':<10} {'episodes':>8} {'steps':>6} {'steps/s':>9} {'resets/s':>9} {'with resets':>12} {'reward':>7}")
    for level, r in results.items():
        print(f"{level:<10} {r['episodes']:>8} {r['steps']:>6} {r['steps_per_s']:>9.0f} {r['resets_per_s']:>9.0f} "
              f"{r['episode_steps_per_s']:>12.0f} {r['mean_reward']:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
