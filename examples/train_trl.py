#!/usr/bin/env python3
"""Train any registered env with TRL's GRPOTrainer through the agent-r1-gym TRL adapter.

    pip install -e trainers/trl                       # trl 1.14.2 / 1.16.x, datasets
    python examples/train_trl.py AgentR1/Arithmetic-v0 --env-kwarg level=1          # CPU, laptop sizes
    python examples/train_trl.py AgentR1/ArithmeticTool-v0 --env-kwarg few_shot=true --steps 20
    python examples/train_trl.py AgentR1/GSM8KTool-v0 --split train --model ~/models/qwen3-4b \\
        --use-vllm --vllm-mode colocate --bf16 --batch-size 32 --num-generations 8 --max-completion-length 1024

Episodes are played by agent_gym_trl.EnvRollout (multi-turn, token in / token out: the env's prompt ids go
to TRL's generation backend, the generated ids go back to the env, nothing is re-tokenized), the reward is
the env's return (agent_gym_trl.env_reward), the rows come from the env's own task source
(agent_gym_trl.env_dataset). Each logged step prints one line: reward, correctness, turns, tool calls.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import signal
import statistics
import sys
import time
import warnings
from pathlib import Path


#: TRL's vllm_importance_sampling_mode values (TRL's default first)
IS_MODES = ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate")
CSV_FIELDS = ["step", "wall_s", "step_s", "reward", "reward_std", "correct", "turns", "tool_calls", "tool_errors",
              "policy_ids"]


def _env_kwarg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)  # level=1 -> 1, few_shot=true -> True, difficulty=easy -> "easy"
    except json.JSONDecodeError:
        return key, value


def _tree_mode(text: str) -> str | int:
    if text in ("entropy", "random"):
        return text
    try:
        step = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected entropy, random or a step index >= 0, got {text!r}") from None
    if step < 0:
        raise argparse.ArgumentTypeError(f"a step index must be >= 0, got {step}")
    return step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="GRPO on any agent-r1-gym env with TRL (multi-turn, token in / token out).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("env_id", help="a registered env id, e.g. AgentR1/Arithmetic-v0 (`agent-gym list` shows them)")
    p.add_argument("--env-kwarg", action="append", type=_env_kwarg, default=[], metavar="KEY=VALUE",
                   help="an env constructor argument (JSON value), repeatable: level=1, few_shot=true")
    p.add_argument("--split", default=None, help="the env's split (GSM8K: train/test); default: the env's default")
    p.add_argument("--rows", type=int, default=512,
                   help="dataset rows: the first N tasks of a finite source, the distinct tasks of seeds 0..N-1 of a "
                        "generated one (the header line says how many duplicates it dropped); 0: all tasks")
    p.add_argument("--model", default="smollm2-135m-instruct",
                   help="a built-in name (smollm2-135m-instruct, smollm2-135m-tool), a Hugging Face folder, or a hub name")
    p.add_argument("--output-dir", default="runs/trl", help="TRL's output folder (the final model is saved there with --save)")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=8, help="completions per device per step (per_device_train_batch_size)")
    p.add_argument("--num-generations", type=int, default=4, help="episodes per task (the GRPO group)")
    p.add_argument("--max-completion-length", type=int, default=128,
                   help="ids per episode after the first prompt: every turn and env reply together; also a turn's limit")
    p.add_argument("--lr", type=float, default=1e-5, help="learning rate")
    p.add_argument("--lr-scheduler", default="linear", choices=("linear", "constant", "cosine"),
                   help="how the learning rate changes over --steps: TRL's default linear decays it to 0; verl's "
                        "actor keeps it constant")
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (0: no reference model)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--steps-per-generation", type=int, default=None,
                   help="micro-batches of --batch-size per generation batch (TRL's steps_per_generation; default: "
                        "--grad-accum): a generation batch holds batch-size x this many episodes per process and makes "
                        "this / --grad-accum optimizer steps")
    p.add_argument("--logging-steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true",
                   help="bfloat16 mixed precision: float32 weights and AdamW state, bfloat16 compute; --save writes "
                        "bfloat16. (Weights held in bfloat16 lose most updates at small learning rates: one AdamW "
                        "step at lr 1e-5 changes 9%% of Gemma 3 270M's bfloat16 weights, all of its float32 ones)")
    p.add_argument("--gradient-checkpointing", action="store_true", help="trade compute for memory (large models)")
    p.add_argument("--use-vllm", action="store_true", help="generate with vLLM (GPU; pip install 'trl[vllm]')")
    p.add_argument("--vllm-mode", choices=["colocate", "server"], default="colocate",
                   help="colocate: vLLM inside the training process; server: a separate `trl vllm-serve --model M`")
    p.add_argument("--vllm-server-base-url", default=None, help="server mode: the server's URL (default host:port 0.0.0.0:8000)")
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.3, help="colocate mode: vLLM's share of GPU memory")
    p.add_argument("--vllm-importance-sampling", default="sequence_mask", choices=IS_MODES + ("off",),
                   help="how TRL corrects for vLLM's sampling log-probs differing from the trainer's (TRL's "
                        "vllm_importance_sampling_mode; ratios outside [0, 3] masked or clipped, per sequence or per "
                        "token); off: no correction, as in verl's recipes")
    p.add_argument("--env-workers", type=int, default=None, metavar="N",
                   help="play the envs in N Ray worker processes (per env id and arguments) while generation stays "
                        "in the trainer (EnvRollout(env_workers=N); needs `pip install \"agent-r1-gym[ray]\"`; starts a "
                        "local Ray unless RAY_ADDRESS names a cluster; docs/ray.md); the workers load --model's tokenizer")
    p.add_argument("--tree", type=_tree_mode, default=None, metavar="entropy|random|K",
                   help="per-state GRPO groups (EnvRollout(tree=...); docs/trl.md): each task's --num-generations "
                        "episodes are one tree, an episode and num_generations - 1 branches from the state before one "
                        "of its steps: its least likely one (entropy; needs sampling log-probs: --use-vllm), a random "
                        "one (random) or step K (clipped to its last); every sample starts at that state, the steps "
                        "before it are generated once, and the completion budget counts from there")
    p.add_argument("--trajectories", default=None, metavar="PATH.jsonl",
                   help="append every episode (ids, log-probs, rewards, info) to this JSONL file")
    p.add_argument("--metrics-csv", default=None, metavar="PATH.csv",
                   help="write one row per generation batch (TRL logs the episodes once per batch, every "
                        "--steps-per-generation / --grad-accum optimizer steps): the step, wall seconds, the seconds of the steps since the last row, reward "
                        "(mean return) and its std, correctness, turns, tool calls, tool errors, policy ids; written "
                        "as it trains, so a stopped run keeps its rows")
    p.add_argument("--log-jsonl", default=None, metavar="PATH.jsonl",
                   help="write every log TRL makes as one JSON line ({\"step\": ..., **logs}): loss, grad norm, learning "
                        "rate, entropy, clip ratios, the vLLM importance-sampling metrics (sampling/...), the env's "
                        "counters (env/...); written as it trains")
    p.add_argument("--report-to", default="none", help="TRL/transformers loggers: none, tensorboard, wandb, trackio")
    p.add_argument("--save", action="store_true", help="save the trained model to --output-dir at the end")
    args = p.parse_args(argv)
    if args.batch_size % args.num_generations:
        p.error(f"--batch-size ({args.batch_size}) must be a multiple of --num-generations ({args.num_generations})")
    if args.steps_per_generation is not None and args.steps_per_generation < 1:
        p.error(f"--steps-per-generation must be >= 1, got {args.steps_per_generation}")
    if args.env_workers is not None and args.env_workers < 1:
        p.error(f"--env-workers must be >= 1, got {args.env_workers}")
    cap = os.environ.get("AGENT_GYM_MAX_STEPS")
    if cap:
        # A short run of the command as written (CI runs the docs' training commands so): the same set-up,
        # the same batches, fewer optimizer steps.
        if not cap.isdigit() or int(cap) < 1:
            p.error(f"AGENT_GYM_MAX_STEPS must be a number of steps >= 1, got {cap!r}")
        if int(cap) < args.steps:
            print(f"AGENT_GYM_MAX_STEPS={cap}: training {cap} of the {args.steps} optimizer steps", file=sys.stderr)
            args.steps = int(cap)
    if args.tree is not None and args.env_workers is not None:
        p.error("--tree forks env states in the trainer's process: it does not go with --env-workers")
    if args.tree is not None and args.num_generations < 2:
        p.error("--tree needs --num-generations >= 2 (the episodes of one tree)")
    return args


def grpo_config_kwargs(args: argparse.Namespace, gpu: bool) -> dict:
    """GRPOConfig's arguments from the command line (``gpu``: whether CUDA is there)."""
    return dict(
        output_dir=args.output_dir,
        use_cpu=not gpu,
        bf16=args.bf16,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        gradient_accumulation_steps=args.grad_accum,
        steps_per_generation=args.steps_per_generation,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type=args.lr_scheduler,
        beta=args.beta,
        temperature=args.temperature,
        logging_steps=args.logging_steps,
        gradient_checkpointing=args.gradient_checkpointing,
        save_strategy="no",
        report_to=args.report_to,
        disable_tqdm=True,
        seed=args.seed,
        use_vllm=args.use_vllm,
        vllm_mode=args.vllm_mode,
        vllm_server_base_url=args.vllm_server_base_url,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_importance_sampling_correction=args.vllm_importance_sampling != "off",
        vllm_importance_sampling_mode=args.vllm_importance_sampling if args.vllm_importance_sampling != "off" else IS_MODES[0],
    )


def rollout_kwargs(args: argparse.Namespace) -> dict:
    """EnvRollout's arguments from the command line (besides ``on_episode``)."""
    return dict(
        env_workers=args.env_workers,
        tree=args.tree,
        # env workers load the tokenizer by the name given here (a built-in name, a folder, a hub name)
        tokenizer=args.model if args.env_workers else None,
    )


def interrupted_message(args: argparse.Namespace, steps: int, episodes: int, seconds: float) -> str:
    """What a Ctrl-C'd run prints: how far it got (``seconds`` since it began), and where what it wrote is."""
    written = [f"{path} ({option})" for path, option in ((args.metrics_csv, "--metrics-csv"),
                                                          (args.log_jsonl, "--log-jsonl"),
                                                          (args.trajectories, "--trajectories")) if path]
    where = ["written as it trained: " + ", ".join(written) if written
             else "no metrics written (--metrics-csv, --log-jsonl write them as it trains)"]
    out = Path(args.output_dir)
    began = time.time() - seconds
    # TRL's loggers (--report-to tensorboard) write there as it trains; files of an earlier run are not this one's
    if out.is_dir() and any(f.is_file() and f.stat().st_mtime >= began for f in out.rglob("*")):
        where.append(f"files written to {out}")
    if args.save:
        where.append("the model is not saved (--save saves it when the run ends)")
    return (f"interrupted: {steps} of {args.steps} optimizer steps done, {episodes} episodes played, "
            f"{seconds:.0f} s\n" + "; ".join(where))


#: what the run is doing, for the message of a Ctrl-C outside the training loop
_stage = "before training began"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except KeyboardInterrupt:
        print(f"interrupted {_stage}", file=sys.stderr)
        return 130


def train(args: argparse.Namespace) -> int:
    global _stage
    from agent_gym.cpu import configure_cpu_threads

    configure_cpu_threads()  # before torch loads: one thread per core, OpenMP waits sleep on a busy machine
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # TRL 1.16 still calls transformers' gradient_checkpointing names, deprecated for v6, on every step.
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)

    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from agent_gym.models import load_causal_lm, load_tokenizer
    from agent_gym.trajectory import TrajectoryWriter
    from agent_gym_trl import EnvRollout, env_dataset, env_reward
    from agent_gym_trl.dataset import DuplicateTasksDropped

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no weight-loading bars: one line per step is the output
    gpu = torch.cuda.is_available()
    if args.use_vllm and not gpu:
        print("--use-vllm needs a CUDA GPU", file=sys.stderr)
        return 2
    started = time.perf_counter()
    tokenizer = load_tokenizer(args.model)
    # float32 master weights whatever the compute precision: TRL's bf16=True is autocast over them
    model = load_causal_lm(args.model, dtype=torch.float32)
    env_kwargs = dict(args.env_kwarg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DuplicateTasksDropped)
        dataset = env_dataset(args.env_id, args.rows or None, split=args.split, env_kwargs=env_kwargs,
                              tokenizer=tokenizer)
    dropped = ""  # said in the header line: "511 rows (512 seeds drew 511 distinct tasks; 1 duplicate dropped)"
    for w in caught:
        if issubclass(w.category, DuplicateTasksDropped):
            dropped = " (" + str(w.message).partition(": ")[2].partition(" (")[0] + ")"
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    writer = TrajectoryWriter(args.trajectories) if args.trajectories else None
    episodes_played = 0

    def on_episode(trajectory, _env):
        nonlocal episodes_played
        episodes_played += 1
        if writer is not None:
            writer.write(trajectory)

    rollout = EnvRollout(on_episode=on_episode, **rollout_kwargs(args))
    config = GRPOConfig(**grpo_config_kwargs(args, gpu))

    step_seconds: dict[int, float] = {}  # optimizer step -> its wall seconds (generation included when it ran)
    csv_file = open(args.metrics_csv, "w", newline="") if args.metrics_csv else None
    csv_writer = csv.writer(csv_file) if csv_file else None
    if csv_writer:
        csv_writer.writerow(CSV_FIELDS)
    log_file = open(args.log_jsonl, "w", encoding="utf-8") if args.log_jsonl else None

    class PrintSteps(TrainerCallback):
        last_row = 0  # the optimizer step of the last CSV row

        def on_step_begin(self, _args, state, _control, **kwargs):
            self.begun = time.perf_counter()

        def on_step_end(self, _args, state, _control, **kwargs):
            step_seconds[state.global_step] = time.perf_counter() - self.begun

        def on_log(self, _args, state, _control, logs=None, **kwargs):
            if logs and log_file:
                log_file.write(json.dumps({"step": state.global_step, **logs}) + "\n")
                log_file.flush()
            if logs and "env/return" in logs:
                elapsed = time.perf_counter() - started
                print(
                    f"step {state.global_step:4d}  reward {logs['reward']:.3f}  correct {logs['env/correct']:.3f}  "
                    f"turns {logs['env/turns']:.2f}  tool calls {logs['env/tool_calls']:.2f}  "
                    f"tool errors {logs['env/tool_errors']:.2f}  policy ids {logs['completions/mean_length']:.1f}  "
                    f"{elapsed:.0f} s",
                    flush=True,
                )
                if csv_writer:
                    # the optimizer steps since the last row: with steps_per_generation > 1 TRL logs the env's
                    # metrics once per generation batch, so a row covers that batch's generation and updates
                    covered = [sec for st, sec in step_seconds.items() if self.last_row < st <= state.global_step]
                    self.last_row = state.global_step
                    csv_writer.writerow([
                        state.global_step, f"{elapsed:.2f}", f"{sum(covered) if covered else float('nan'):.3f}",
                        *(f"{logs[k]:.6g}" for k in ("reward", "reward_std", "env/correct", "env/turns",
                                                     "env/tool_calls", "env/tool_errors", "completions/mean_length")),
                    ])
                    csv_file.flush()

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
        callbacks=[PrintSteps()],
    )
    trainer.remove_callback(PrinterCallback)  # one line per step from PrintSteps instead of every metric
    print(f"{args.env_id} {json.dumps(env_kwargs, sort_keys=True)}: {len(dataset)} rows{dropped}, model {args.model}, "
          f"{'GPU' if gpu else 'CPU'}{' + vLLM ' + args.vllm_mode if args.use_vllm else ''}"
          f"{'; vLLM importance sampling ' + args.vllm_importance_sampling if args.use_vllm else ''}"
          f"{f'; envs in {args.env_workers} Ray workers' if args.env_workers else ''}"
          f"{f'; tree groups ({args.tree})' if args.tree is not None else ''}; weights "
          f"{str(next(model.parameters()).dtype).removeprefix('torch.')}, compute {'bfloat16' if args.bf16 else 'float32'}",
          flush=True)
    # Ctrl-C may land in the rollout's generation task, which then dies holding the KeyboardInterrupt; as
    # the rollout's event loop closes, nothing has awaited that task, so asyncio logs it with a traceback
    # ("Task exception was never retrieved") before the interrupt reaches the handler below.
    logging.getLogger("asyncio").addFilter(
        lambda record: not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt)))
    try:
        trainer.train()
    except KeyboardInterrupt:
        # a second Ctrl-C while the files close ends the process at once, without a traceback
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        interrupted = True
    else:
        interrupted = False
    finally:
        if writer is not None:
            writer.close()
        if csv_file is not None:
            csv_file.close()
        if log_file is not None:
            log_file.close()
        rollout.close()
    if interrupted:
        print(interrupted_message(args, trainer.state.global_step, episodes_played, time.perf_counter() - started),
              file=sys.stderr, flush=True)
        return 130
    _stage = "after training"
    if args.save:
        _stage = f"while saving the model: {args.output_dir} may hold part of it"
        if args.bf16:
            trainer.model.to(torch.bfloat16)  # the precision it was trained to run in (and an export's)
        trainer.save_model(args.output_dir)
        print(f"saved to {args.output_dir}")
        _stage = f"after saving the model to {args.output_dir}"
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    if rewards:
        print(f"done: {trainer.state.global_step} steps in {time.perf_counter() - started:.0f} s; "
              f"reward {rewards[0]:.3f} (first logged step) -> {rewards[-1]:.3f} (last)")
    later = [seconds for step, seconds in sorted(step_seconds.items()) if step >= 2]
    if later:  # step 1 carries the start-up (vLLM's first generation, compilation); steps 2.. are steady state
        episodes = args.batch_size * args.grad_accum * max(1, int(os.environ.get("WORLD_SIZE", "1")))
        print(f"steps 2..{trainer.state.global_step}: {statistics.median(later):.2f} s per optimizer step (median), "
              f"{len(later) / sum(later):.3f} steps/s, {episodes * len(later) / sum(later):.1f} episodes/s "
              f"({episodes} episodes per optimizer step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
