"""Supervised tool-use warm start from demonstrations played through the env itself.

    python examples/sft_warmstart.py --out ~/models/smollm2-135m-gsm8k-tool-sft \\
        [--env AgentR1/GSM8KTool-v0] [--model PATH] [--limit 2000] [--epochs 1] [--batch-size 16] [--lr 5e-5]
    python examples/sft_warmstart.py --env AgentR1/SearchQA-v0 --env-kwarg difficulty=medium \\
        --out ~/models/smollm2-135m-searchqa-sft --limit 2000 --lora-rank 16 --lr 5e-4

Small instruction models never use the tools well from the instructions alone (SmolLM2-135M-Instruct:
0 calculator calls in 1,024 GSM8KTool episodes; on SearchQA it searches for the prompt's example name
and never answers), so an RL run from them sees no reward to learn from. This script writes a
demonstration for each of ``--limit`` training tasks, from ``--offset``, with the env package's own
demonstrations module:

- ``AgentR1/GSM8KTool-v0``: GSM8K's calculator annotations (``<<48/2=24>>``) become ``calculate``
  calls, the solution closes (``agent_gym_gsm8k.demonstrations``);
- ``AgentR1/SearchQA-v0``: a grounded expert searches each name on the question's chain, opens a
  passage where the result's snippet is cut, and answers (``agent_gym_searchqa.demonstrations``).

Each demonstration is played through the env itself (so the tool replies are the env's own and the
prompt is the env's prompt, token for token); the episodes that end correct with no tool error are kept
and the model is fine-tuned on them with the loss on the assistant's tokens only
(``Trajectory.token_sequence``'s action mask). The result is an ordinary Hugging Face folder (or, with
``--lora-rank``, an adapter folder that loads as a model) for ``MODEL_PATH=`` of the verl recipes and
``agent-gym eval --model``.

Defaults run on a laptop CPU for a smoke test (``--limit 16 --max-steps 2``); a real warm start is meant
for a GPU (3,000 problems, two epochs: about a minute of training on an H200; the figures and the
commands are in docs/performance.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import sys
import time
from collections import Counter
from typing import Any

import gymnasium as gym

import agent_gym  # noqa: F401  (registers the env ids)
from agent_gym.commands import UsageError, add_env_kwarg_option, parse_env_kwargs, resolve_env_id
from agent_gym.models import load_causal_lm, load_tokenizer
from agent_gym.rollout import ScriptedPolicy, run_episodes

#: The envs with a demonstrations module: each has ``demonstrations(env, *, offset, limit)`` yielding
#: ``(task_id, assistant turns or None, outcome)``.
DEMONSTRATIONS = {
    "AgentR1/GSM8KTool-v0": "agent_gym_gsm8k.demonstrations",
    "AgentR1/SearchQA-v0": "agent_gym_searchqa.demonstrations",
    "AgentR1/SWE-v0": "agent_gym_swe.demonstrations",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--out", required=True, help="folder for the fine-tuned model, its tokenizer and sft_summary.json")
    parser.add_argument(
        "--env", default="AgentR1/GSM8KTool-v0",
        help=f"env to demonstrate: {', '.join(DEMONSTRATIONS)} (default: %(default)s; the AgentR1/ prefix may be left out)",
    )
    add_env_kwarg_option(parser)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model name or folder to fine-tune (default: %(default)s, the embedded SmolLM2-135M-Instruct without the packaged adapter)")
    parser.add_argument("--limit", type=int, default=2000, help="training tasks to turn into demonstrations (default 2000)")
    parser.add_argument(
        "--offset", type=int, default=0,
        help="skip this many training tasks first, e.g. to keep the tasks an RL run trains on unseen (default 0)",
    )
    parser.add_argument("--epochs", type=float, default=1.0, help="passes over the kept demonstrations (default 1)")
    parser.add_argument("--batch-size", type=int, default=16, help="episodes per optimizer step (default 16)")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate, linear warm-up and decay (default 5e-5)")
    parser.add_argument(
        "--lora-rank", type=int, default=0,
        help="train a LoRA adapter of this rank on every linear layer instead of all weights (needs peft); "
        "--out then holds the adapter, loadable as a model folder (default 0: full fine-tune)",
    )
    parser.add_argument("--lora-alpha", type=float, default=None, help="LoRA scale numerator (default: 2 x rank)")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps (smoke tests)")
    parser.add_argument("--max-length", type=int, default=1024, help="drop episodes longer than this many tokens (default 1024)")
    parser.add_argument("--device", default="auto", help="cuda, cpu or auto (default: cuda when available)")
    parser.add_argument("--seed", type=int, default=0, help="shuffling and initialisation seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    for name in ("limit", "batch_size", "max_length"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lora_rank < 0:
        parser.error("--lora-rank must be >= 0")
    if args.offset < 0:
        parser.error("--offset must be >= 0")
    if args.epochs <= 0 or args.lr <= 0:
        parser.error("--epochs and --lr must be > 0")
    try:
        args.env = resolve_env_id(args.env)
        args.env_kwargs = parse_env_kwargs(args.env_kwarg)
    except UsageError as exc:
        parser.error(str(exc))
    if args.env not in DEMONSTRATIONS:
        parser.error(f"--env {args.env}: no demonstrations for it; one of {', '.join(DEMONSTRATIONS)}")
    if args.chat_template is not None:
        args.env_kwargs["chat_template"] = args.chat_template
    return args


def build_demonstrations(
    tokenizer: Any,
    *,
    limit: int,
    max_length: int,
    offset: int = 0,
    env_id: str = "AgentR1/GSM8KTool-v0",
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
) -> tuple[list[tuple[list[int], list[int]]], Counter[str]]:
    """Play the demonstrations of ``limit`` training tasks of ``env_id``, from ``offset``, through the env.

    Returns the kept episodes as ``(token_ids, action_mask)`` and a count of every outcome: ``kept``, the
    env module's reasons for writing no demonstration (GSM8K: ``no_annotations``; SearchQA: ``not_found``,
    ``not_stated``, ...), and the reasons for dropping a played one: ``tool_error``, ``not_correct``,
    ``too_long`` (a reply longer than the env takes in one turn, or an episode over ``max_length``).
    """
    kwargs: dict[str, Any] = {**(env_kwargs or {}), "tokenizer": tokenizer, "split": "train"}
    module = importlib.import_module(DEMONSTRATIONS[env_id])
    probe = gym.make(env_id, **kwargs).unwrapped
    outcome: Counter[str] = Counter()
    scripts: list[list[str]] = []
    task_ids: list[str] = []
    for task_id, turns, reason in module.demonstrations(probe, offset=offset, limit=limit):
        if turns is None:
            outcome[reason] += 1
            continue
        scripts.append(turns)
        task_ids.append(task_id)
    reply_limit = probe.max_action_tokens  # a longer reply is cut (finish "length") and dropped as too long
    probe.close()
    if not scripts:
        return [], outcome

    policy = ScriptedPolicy(tokenizer, lambda conversation, turn: scripts[conversation][turn - 1])
    result = run_episodes(
        lambda: gym.make(env_id, **kwargs),
        policy,
        task_ids=task_ids,
        batch_size=64,
        max_new_tokens=reply_limit,
        progress=progress,
    )
    kept: list[tuple[list[int], list[int]]] = []
    for trajectory in result.trajectories:
        info = trajectory.final_info
        if "length" in trajectory.metadata.get("finish_reasons", ()):
            outcome["too_long"] += 1
        elif info.get("tool_errors"):
            outcome["tool_error"] += 1
        elif not info.get("correct"):
            outcome["not_correct"] += 1
        else:
            ids, mask = trajectory.token_sequence()
            if len(ids) > max_length:
                outcome["too_long"] += 1
                continue
            outcome["kept"] += 1
            kept.append((ids, mask))
    return kept, outcome


def train(
    model: Any,
    examples: list[tuple[list[int], list[int]]],
    *,
    pad_id: int,
    epochs: float,
    batch_size: int,
    lr: float,
    max_steps: int | None,
    device: str,
    seed: int,
    progress: bool = True,
) -> list[float]:
    """Fine-tune ``model`` on ``examples`` (loss on action tokens only); returns the loss of every step."""
    import torch
    from tqdm.auto import tqdm

    rng = random.Random(seed)
    steps_per_epoch = math.ceil(len(examples) / batch_size)
    total = max(1, math.ceil(steps_per_epoch * epochs))
    if max_steps is not None:
        total = min(total, max_steps)
    warmup = max(1, total // 10)
    params = [p for p in model.parameters() if p.requires_grad]  # a LoRA model trains its adapter only
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup)))
    )
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)
    model.train()
    losses: list[float] = []
    order: list[int] = []
    bar = tqdm(total=total, desc="sft", disable=not progress)
    while len(losses) < total:
        if not order:  # a new epoch; its last batch may be short, so no example repeats within a batch
            order = list(range(len(examples)))
            rng.shuffle(order)
        batch = [examples[i] for i in order[:batch_size]]
        del order[:batch_size]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)  # -100: no loss
        for row, (ids, mask) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention[row, : len(ids)] = 1
            labels[row, : len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask)])
        with autocast:
            out = model(
                input_ids=input_ids.to(device), attention_mask=attention.to(device), labels=labels.to(device)
            )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(out.loss.detach()))
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    model.eval()
    return losses


def with_lora(model: Any, *, rank: int, alpha: float | None = None) -> Any:
    """Wrap ``model`` in a peft LoRA of ``rank`` on every linear layer of its blocks (not the embeddings)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=alpha if alpha is not None else 2 * rank,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def save_adapter(model: Any, out: str, *, base: str | None) -> None:
    """Save the LoRA weights in bfloat16 (half the bytes; merging into float32 weights loses nothing that
    matters at this rank) with the base named so that ``agent_gym.models.load_causal_lm(out)`` finds it."""
    import torch

    from agent_gym.models import BASE_MODEL

    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.bfloat16)
    config = model.peft_config["default"]
    config.base_model_name_or_path = base or BASE_MODEL
    model.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    examples, outcome = build_demonstrations(
        tokenizer,
        limit=args.limit,
        env_id=args.env,
        env_kwargs=args.env_kwargs,
        max_length=args.max_length,
        offset=args.offset,
        progress=not args.no_progress,
    )
    built_s = time.perf_counter() - started
    print(f"demonstrations: {dict(sorted(outcome.items()))} in {built_s:.1f} s", file=sys.stderr)
    if not examples:
        print("error: no demonstration was kept; nothing to train on", file=sys.stderr)
        return 1
    model = load_causal_lm(args.model, dtype=torch.float32).to(device)
    if args.lora_rank:
        model = with_lora(model, rank=args.lora_rank, alpha=args.lora_alpha)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    t0 = time.perf_counter()
    losses = train(
        model,
        examples,
        pad_id=int(pad_id),
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        max_steps=args.max_steps,
        device=device,
        seed=args.seed,
        progress=not args.no_progress,
    )
    train_s = time.perf_counter() - t0
    os.makedirs(args.out, exist_ok=True)
    if args.lora_rank:
        save_adapter(model, args.out, base=args.model)
    else:
        model.save_pretrained(args.out)
        tokenizer.save_pretrained(args.out)
    summary = {
        "env_id": args.env,
        "env_kwargs": args.env_kwargs,
        "model": args.model or "embedded SmolLM2-135M-Instruct",
        "device": device,
        "problems": sum(outcome.values()),
        "offset": args.offset,
        "demonstrations": dict(sorted(outcome.items())),
        "action_tokens": sum(sum(mask) for _, mask in examples),
        "steps": len(losses),
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "lora_rank": args.lora_rank,
        "lr": args.lr,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": [round(x, 4) for x in losses],
        "build_seconds": round(built_s, 1),
        "train_seconds": round(train_s, 1),
    }
    with open(os.path.join(args.out, "sft_summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "losses"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
