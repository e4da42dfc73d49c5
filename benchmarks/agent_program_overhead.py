"""What the OpenAI-compatible endpoint costs per request: AgentR1/AgentProgram-v0 against the engine alone.

    python benchmarks/agent_program_overhead.py [--episodes 40] [--concurrency 1 64]

The demo program (a calculator agent over urllib: two requests an episode, a tool call then the answer)
is played by the async runner with a scripted policy, so the engine costs next to nothing and what is
measured is the path of a request: the program's HTTP request, the server thread, parsing, rendering
the prompt ids, the env's wait and step, the completion back, the program's next request. Beside it:

- `engine`: the same policy called directly on the same prompts (what a request costs without the
  endpoint), one call per request at concurrency 1 and one batched call per round of `concurrency`
  prompts otherwise;
- `native env`: AgentR1/ArithmeticTool-v0 played with the same two turns (the env runs the calculator
  itself; no program, no HTTP): what a step of an ordinary tool env costs.

`overhead ms/request` = (program env wall - engine wall) / requests. Envs are made before the clock
starts; each concurrency plays `--episodes` x concurrency episodes (at least `--episodes`).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the envs)
from agent_gym.models import load_tokenizer
from agent_gym.rollout import ScriptedPolicy
from agent_gym.rollout.async_runner import run_episodes_concurrent

CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "7 * 48"}}\n</tool_call>'
TASK = {"id": "q", "prompt": "What is 7 * 48?", "answer": "336"}


def script(conversation: int, turn: int) -> str:
    return CALL if turn == 1 else "#### 336"


def play(make_env, tok, episodes: int, concurrency: int):
    envs = [make_env() for _ in range(concurrency)]
    policy = ScriptedPolicy(tok, script)
    started = time.perf_counter()
    result = run_episodes_concurrent(envs, policy, episodes=episodes, concurrency=concurrency, max_new_tokens=64,
                                generate_in_thread=False, max_wait_s=0.0005)
    wall = time.perf_counter() - started
    for env in envs:
        env.close()
    return result, wall


def engine_alone(tok, prompts: list[list[int]], concurrency: int) -> float:
    """Seconds for the scripted policy to answer ``prompts`` in calls of ``concurrency`` prompts."""
    policy = ScriptedPolicy(tok, script)
    started = time.perf_counter()
    for i in range(0, len(prompts), concurrency):
        policy.generate(prompts[i: i + concurrency], max_new_tokens=64)
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=40, help="episodes per concurrency level, at least (default: %(default)s)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64], help="programs in flight (default: 1 64)")
    args = p.parse_args()
    tok = load_tokenizer()
    print(f"{'programs':>8} {'episodes':>8} {'requests':>8} {'env ms/req':>10} {'engine ms/req':>13} {'overhead ms/req':>15} "
          f"{'step p50 ms':>11} {'native env ms/step':>18} {'reward':>6}")
    for concurrency in args.concurrency:
        episodes = max(args.episodes, concurrency)
        result, wall = play(lambda: gym.make("AgentR1/AgentProgram-v0", tokenizer=tok, tasks=[TASK]), tok, episodes, concurrency)
        requests = sum(len(t.steps) for t in result.trajectories)
        prompts = [s.prompt_ids for t in result.trajectories for s in t.steps]
        engine = engine_alone(tok, prompts, concurrency)
        native, native_wall = play(lambda: gym.make("AgentR1/ArithmeticTool-v0", tokenizer=tok, level=3), tok, episodes, concurrency)
        native_steps = sum(len(t.steps) for t in native.trajectories)
        reward = sum(t.reward for t in result.trajectories) / len(result.trajectories)
        print(f"{concurrency:>8} {episodes:>8} {requests:>8} {1000 * wall / requests:>10.2f} {1000 * engine / requests:>13.3f} "
              f"{1000 * (wall - engine) / requests:>15.2f} {1000 * result.stats['step_latency_p50_s']:>11.2f} "
              f"{1000 * native_wall / native_steps:>18.2f} {reward:>6.2f}")


if __name__ == "__main__":
    main()
