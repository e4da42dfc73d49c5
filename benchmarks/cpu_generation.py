"""Local generation speed: ``HFPolicy`` against a bare ``model.generate`` loop on the same prompts.

    python benchmarks/cpu_generation.py [--model NAME_OR_PATH] [--batch 8] [--max-new-tokens 128]
                                        [--turns 2] [--repeats 3] [--threads N] [--json]

Both sides run in this process on the same model object, the same real GSM8KTool prompts (the env's
first observation for seeds 0..batch-1) and the same limits, greedily, so they generate the same ids
(checked). The bare loop is what a user would write: left-padded prompts, one ``model.generate``
call, the turn's stop ids. ``HFPolicy`` adds what the env loop needs (log-probs of every chosen token,
per-prompt stop handling) and reuses key/value states between calls (the episodes' common system
prompt, and each episode's earlier turns).

With ``--turns 2`` each prompt is then extended the way an episode goes on (its generated ids plus a
calculator reply rendered by the env's template) and both sides generate again: the bare loop reads
every prompt from its first token, ``HFPolicy`` only the new tokens. Printed per turn: generated
tokens, tokens/s of each side, and the ratio HFPolicy / bare (target: >= 0.9 on the first turn).
Each figure is the median of ``--repeats`` runs; ``HFPolicy``'s cache is cleared before each run, so
every repeat starts cold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model name or path (default: the embedded default model)")
    p.add_argument("--batch", type=int, default=8, help="prompts generated together (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="limit of each generation (default 128)")
    p.add_argument("--turns", type=int, default=2, choices=(1, 2), help="1: first prompts only; 2: also the next turn (default 2)")
    p.add_argument("--repeats", type=int, default=3, help="runs per side; medians are printed (default 3)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: one per physical core, or OMP_NUM_THREADS)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from agent_gym.cpu import configure_cpu_threads

    configure_cpu_threads()
    import gymnasium as gym
    import torch
    from transformers.utils import logging as hf_logging

    import agent_gym  # noqa: F401
    from agent_gym.rollout import HFPolicy

    hf_logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = HFPolicy(args.model, device="cpu", batch_size=args.batch)
    model, tok = policy.model, policy.tokenizer
    env = gym.make("AgentR1/GSM8KTool-v0", tokenizer=tok, split="test")
    prompts = [env.reset(seed=s)[0]["prompt_ids"].tolist() for s in range(args.batch)]

    def bare(batch: list[list[int]]) -> list[list[int]]:
        input_ids, attention_mask = policy._padded(batch)
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=args.max_new_tokens,
                                 do_sample=False, eos_token_id=policy.stop_ids, pad_token_id=policy.pad_id)
        stop = set(policy.stop_ids)
        rows = []
        for row in out[:, input_ids.shape[1]:].tolist():
            end = next((k + 1 for k, t in enumerate(row) if t in stop), len(row))
            rows.append(row[:end])
        return rows

    def timed(fn, *a):
        t = time.perf_counter()
        value = fn(*a)
        return value, time.perf_counter() - t

    tool_turn = _tool_turn_ids(env.unwrapped, tok)
    report = {"model": policy.model_name, "threads": torch.get_num_threads(), "batch": args.batch,
              "max_new_tokens": args.max_new_tokens, "prompt_tokens": [len(p) for p in prompts], "turns": []}
    turn_prompts = prompts
    bare_s: list[list[float]] = [[] for _ in range(args.turns)]
    ours_s: list[list[float]] = [[] for _ in range(args.turns)]
    tokens = [0] * args.turns
    bare(prompts[:1])  # warm-up: first-call allocations and kernel selection
    for _ in range(args.repeats):
        assert policy.prefix_cache is None or policy.prefix_cache.clear() is None
        turn_prompts = prompts
        for turn in range(args.turns):
            expected, s_bare = timed(bare, turn_prompts)
            got, s_ours = timed(lambda b: policy.generate(b, max_new_tokens=args.max_new_tokens), turn_prompts)
            if [g.ids for g in got] != expected:
                print("warning: HFPolicy and the bare loop generated different ids", file=sys.stderr)
            bare_s[turn].append(s_bare)
            ours_s[turn].append(s_ours)
            tokens[turn] = sum(len(g.ids) for g in got)
            turn_prompts = [p + g.ids + tool_turn for p, g in zip(turn_prompts, got)]
    for turn in range(args.turns):
        b, o = statistics.median(bare_s[turn]), statistics.median(ours_s[turn])
        report["turns"].append({"turn": turn + 1, "generated_tokens": tokens[turn], "bare_tokens_per_s": tokens[turn] / b,
                                "hfpolicy_tokens_per_s": tokens[turn] / o, "ratio": b / o})
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"model {report['model']} | {report['threads']} threads | batch {args.batch} x {args.max_new_tokens} new tokens | "
          f"prompts {min(report['prompt_tokens'])}-{max(report['prompt_tokens'])} tokens | median of {args.repeats}")
    print(f"{'turn':>4}  {'tokens':>6}  {'bare generate':>14}  {'HFPolicy':>10}  {'ratio':>6}")
    for t in report["turns"]:
        print(f"{t['turn']:>4}  {t['generated_tokens']:>6}  {t['bare_tokens_per_s']:>10.1f} t/s  {t['hfpolicy_tokens_per_s']:>6.1f} t/s  {t['ratio']:>5.2f}x")
    return 0


def _tool_turn_ids(env, tok) -> list[int]:
    """The ids the env appends after a calculator call: its template's rendering of one tool reply."""
    end = list(env.template.end_of_turn_ids)
    return list(env.template.turn_suffix([{"role": "tool", "name": "calculate", "content": "42"}], end))


if __name__ == "__main__":
    sys.exit(main())
