"""Learning comparisons in units that each fit one short GPU lease, resumed from the results in the repository.

    python3 examples/learning_units.py next            # the first unit without results, and its exact commands
    python3 examples/learning_units.py run             # run that unit, then write its results
    python3 examples/learning_units.py run --unit NAME # run one named unit
    python3 examples/learning_units.py collect NAME --to DIR   # copy a unit's files so far (a running one too)
    python3 examples/learning_units.py list            # every unit, done or not

A unit is one arm of a comparison: 30 verl GRPO steps of a learn recipe
(examples/learn_smollm2-135m_gsm8k_tool.sh, BATCH=32 prompts x N=8 episodes a step, validation on the same
512 held-out problems every 10 steps), then the greedy evaluation of its last adapter (merged) on the
env's test problems in order (agent-gym eval). Its results live in RESULTS/NAME/ (RESULTS:
docs/data/learning-units): metrics.jsonl (verl's, one line a step), metrics_partK.jsonl (the parts that
equalise tokens), eval.json (the summary), eval_tasks.csv (per task: what compare_evals.py pairs; the
trajectories themselves, 4 MB compressed for 1,319 episodes, stay in the run folder), command.txt (what ran). A unit counts as done when eval.json is there, so committing a unit's folder
makes the next run take the next unit.

Units, in order: step and concat credit on GSM8KTool for seeds 1, 2, 3 (concat trains on to the generated
tokens of the committed step unit of its seed: agent_gym/generated_tokens summed over its steps, to within
half a step, in further parts that continue its adapter), SearchQA from the warm start, and tree against
flat (flat: gsm8k-step-seed1; the tree arm trains to its tokens). Each start model is evaluated once
(gsm8k-start, searchqa-start), beside the first unit that starts from it, on a small share of the GPU.

The inputs (the exported model, the parquet rows) are made first when missing, with the commands that
`next` prints. RUNS (~/runs/learning-units) holds the run folders; MODELS (~/models), DATA (~/data).
Exit status: 0 on success (also when every unit is done), 1 when a command fails, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "data" / "learning-units"
GSM8K_RECIPE = "examples/learn_smollm2-135m_gsm8k_tool.sh"
SEARCHQA_RECIPE = "examples/learn_smollm2-135m_searchqa.sh"
# Every unit's shape: 30 steps of 32 prompts x 8 episodes (about 20.5 s a step on one H200, alone) fit a
# 30-minute lease with start-up (5.5 minutes to the first step), the evaluation and a failed machine start.
# vLLM's KV cache by size, not by share: the start model's evaluation shares the GPU at start-up, and a
# share-based engine would count the other process's memory as its own.
COMMON = {"STEPS": "30", "BATCH": "32", "N": "8", "TEST_FREQ": "10", "SAVE_FREQ": "10"}
HYDRA = ["+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=17179869184"]
MAX_TOPUP_PARTS = 3
TOPUP_SEED = 1000  # part k > 1 of seed s draws its problems with data.seed s + 1000 (k - 1)


@dataclass(frozen=True)
class Unit:
    name: str
    recipe: str = ""                      # empty: an evaluation-only unit (a start model)
    settings: dict[str, str] = field(default_factory=dict)
    budget_of: str = ""                   # train on to this committed unit's generated tokens
    start: str = ""                       # the evaluation-only unit of this unit's start model
    model: str = "smollm2-135m-tool"      # the start model, a folder under MODELS
    env: str = "AgentR1/GSM8KTool-v0"
    eval_args: tuple[str, ...] = ("--split", "test", "--in-order", "--episodes", "1319")


def _gsm8k(mode: str, seed: int, **extra: str) -> Unit:
    budget = "" if mode == "step" and not extra else f"gsm8k-step-seed{seed}"
    name = f"gsm8k-{'tree' if extra else mode}-seed{seed}"
    return Unit(name, GSM8K_RECIPE, {"MODE": mode, "DATA_SEED": str(seed), **extra}, budget, "gsm8k-start")


_SEARCHQA_EVAL = ("--split", "test", "--env-kwarg", "difficulty=medium", "--episodes", "512")
UNITS: tuple[Unit, ...] = (
    *(_gsm8k(mode, seed) for seed in (1, 2, 3) for mode in ("step", "concat")),
    Unit("searchqa-step-seed1", SEARCHQA_RECIPE, {"MODE": "step", "DATA_SEED": "1"}, "", "searchqa-start",
         "smollm2-135m-searchqa", "AgentR1/SearchQA-v0", _SEARCHQA_EVAL),
    # 4 trees a prompt, branched once in 2 after the first calculator answer: 8 leaves like flat's 8
    # episodes; 32 prompts x 4 trees per optimizer step, the flat arm's 16 x 8 rows
    _gsm8k("step", 1, N="4", MINI="32", TREE_WIDTH="2", TREE_BRANCH_AT="[1]", TREE_MAX_LEAVES="2"),
    Unit("gsm8k-start"),
    Unit("searchqa-start", model="smollm2-135m-searchqa", env="AgentR1/SearchQA-v0", eval_args=_SEARCHQA_EVAL),
)
BY_NAME = {u.name: u for u in UNITS}


class UnitError(Exception):
    """A unit that cannot run (a missing budget, a bad name)."""


def _module(name: str) -> Any:
    """examples/NAME.py, loaded from its file (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def is_done(unit: Unit, results: Path) -> bool:
    return (results / unit.name / "eval.json").is_file()


def next_unit(results: Path) -> Unit | None:
    """The first training unit without results (evaluation-only units run beside them)."""
    return next((u for u in UNITS if u.recipe and not is_done(u, results)), None)


def metrics_files(folder: Path) -> list[Path]:
    """A unit's metric files in part order: metrics.jsonl, then metrics_part2.jsonl, ..."""
    files = [folder / "metrics.jsonl"] if (folder / "metrics.jsonl").is_file() else []
    k = 2
    while (folder / f"metrics_part{k}.jsonl").is_file():
        files.append(folder / f"metrics_part{k}.jsonl")
        k += 1
    return files


def tokens_of(files: Sequence[Path]) -> tuple[float, int]:
    """(generated tokens, training steps) that verl's metric files of one run cover, parts end to end."""
    plot = _module("plot_heldout_accuracy")
    return plot.token_totals(plot.split_parts([plot.read_metrics_file(p) for p in files]))


def budget(unit: Unit, results: Path) -> float | None:
    """The generated tokens this unit trains to (its budget_of unit's, committed), or None without one."""
    if not unit.budget_of:
        return None
    files = metrics_files(results / unit.budget_of)
    if not files:
        raise UnitError(f"{unit.name} trains to the generated tokens of {unit.budget_of}, which has no results in "
                        f"{results / unit.budget_of}: run `learning_units.py run --unit {unit.budget_of}` first")
    return tokens_of(files)[0]


def steps_to_budget(target: float, tokens: float, steps: int) -> int:
    """Steps still needed at the run's own tokens per step, to the nearest step (0: within half a step)."""
    if tokens <= 0 or steps <= 0:
        return 0
    return max(0, round((target - tokens) / (tokens / steps)))


@dataclass(frozen=True)
class Paths:
    runs: Path
    models: Path
    data: Path
    results: Path


def _env_line(settings: dict[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())


def part_command(unit: Unit, paths: Paths, part: int, steps: int | None = None) -> str:
    """The shell line of one part of a training unit."""
    seed = int(unit.settings.get("DATA_SEED", "1"))
    settings = {**COMMON, **unit.settings, "PART": str(part), "DATA_SEED": str(seed + TOPUP_SEED * (part - 1)),
                "MODEL_PATH": str(paths.models / unit.model), "RUN_DIR": str(paths.runs / unit.name)}
    if steps is not None:
        settings["STEPS"] = str(steps)
    if part > 1:
        settings["ADAPTER"] = str(paths.runs / unit.name / f"part{part - 1}" / "adapter")
    return f"{_env_line(settings)} bash {unit.recipe} {' '.join(HYDRA)}"


def eval_commands(unit: Unit, paths: Paths, model: Path, out: Path, gpu_share: float | None = None) -> list[str]:
    share = [] if gpu_share is None else ["--gpu-memory-utilization", str(gpu_share)]
    args = ["agent-gym", "eval", unit.env, *unit.eval_args, "--model", str(model), "--backend", "vllm",
            "--max-new-tokens", "256", *share, "--json", "--no-progress", "--out", str(out / "eval.jsonl")]
    part, done = shlex.quote(str(out / "eval.part.json")), shlex.quote(str(out / "eval.json"))
    # eval.json appears only once the evaluation succeeded: it is what marks a unit done
    return [f"mkdir -p {shlex.quote(str(out))}", f"{shlex.join(args)} > {part} && mv {part} {done}"]


def prepare_commands(unit: Unit, paths: Paths) -> list[tuple[Path, str]]:
    """(input, the command that makes it) of a training unit's start model and rows."""
    model = paths.models / unit.model
    if unit.env == "AgentR1/GSM8KTool-v0":
        mode = unit.settings.get("MODE", "step")
        suffix = "_concat" if mode == "concat" else ""
        train, val = paths.data / f"gsm8k_tool{suffix}", paths.data / f"gsm8k_tool{suffix}_val512"
        return [
            (model / "config.json", f"agent-gym export-model --model smollm2-135m-tool --out {model}"),
            (train / "train.parquet", f"python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir {train} --mode {mode}"),
            (val / "test.parquet", f"agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out {val} --mode {mode}"),
        ]
    kw = "--env-kwarg difficulty=medium"
    train, val = paths.data / "searchqa_medium", paths.data / "searchqa_medium_val512"
    return [
        (model / "config.json", f"python3 examples/sft_warmstart.py --env AgentR1/SearchQA-v0 {kw} --out {model}-lora "
         f"--limit 4000 --lora-rank 16 --lr 5e-4 --epochs 2 --batch-size 32 && "
         f"agent-gym export-model --model {model}-lora --out {model}"),
        (train / "train.parquet", f"agent-gym export-verl AgentR1/SearchQA-v0 --split train --limit 8192 {kw} --out {train} --mode step"),
        (val / "test.parquet", f"agent-gym export-verl AgentR1/SearchQA-v0 --split test --limit 512 {kw} --out {val} --mode step"),
    ]


def plan(unit: Unit, paths: Paths) -> list[str]:
    """The commands of a unit as `next` prints them (a budget unit's further parts are worked out as it runs)."""
    lines = [f"# unit {unit.name}"]
    if unit.recipe:
        lines += [f"[ -e {p} ] || {cmd}" for p, cmd in prepare_commands(unit, paths)]
        lines.append(part_command(unit, paths, 1))
        if unit.budget_of:
            lines.append(f"# then parts 2.. (at most {MAX_TOPUP_PARTS}, ADAPTER = the part before) until its generated "
                         f"tokens reach {unit.budget_of}'s")
        final = paths.runs / unit.name / "final"
        lines.append(f"agent-gym export-model --model {paths.runs / unit.name}/partK/adapter --out {final}/model --force")
        lines += eval_commands(unit, paths, final / "model", final)
    else:
        lines += eval_commands(unit, paths, paths.models / unit.model, paths.runs / unit.name)
    return lines


def sh(command: str, log: Path) -> None:
    """Run one shell line from the checkout's root, its output also appended to LOG; raise on failure."""
    print(f"+ {command}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"+ {command}\n")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", f"{command} 2>&1 | tee -a {shlex.quote(str(log))}"], cwd=ROOT)
    if done.returncode:
        raise UnitError(f"exit status {done.returncode}: {command}")


def collect(unit: Unit, paths: Paths, to: Path) -> list[Path]:
    """Copy what the unit has written so far into TO (its results layout); returns the files written."""
    run = paths.runs / unit.name
    to.mkdir(parents=True, exist_ok=True)
    pairs: list[tuple[Path, Path]] = []
    if unit.recipe:
        k = 1
        while (run / f"part{k}").is_dir():
            pairs.append((run / f"part{k}" / "metrics.jsonl", to / ("metrics.jsonl" if k == 1 else f"metrics_part{k}.jsonl")))
            k += 1
        final = run / "final"
    else:
        final = run
    pairs += [(final / "eval.json", to / "eval.json"), (run / "command.txt", to / "command.txt")]
    written = []
    for src, dst in pairs:
        if src.is_file():
            shutil.copyfile(src, dst)
            written.append(dst)
    if (final / "eval.json").is_file():  # the trajectories are complete once the summary is written
        compare = _module("compare_evals")
        compare.write_tasks(to / "eval_tasks.csv", compare.read_episodes(final / "eval.jsonl"))
        written.append(to / "eval_tasks.csv")
    return written


def run_unit(unit: Unit, paths: Paths) -> None:
    run = paths.runs / unit.name
    run.mkdir(parents=True, exist_ok=True)
    log, record = run / "log.txt", run / "command.txt"

    def do(command: str) -> None:
        with record.open("a") as fh:
            fh.write(command + "\n")
        sh(command, log)

    if not unit.recipe:
        for line in eval_commands(unit, paths, paths.models / unit.model, run, gpu_share=0.15):
            do(line)
        return
    target = budget(unit, paths.results)
    for path, command in prepare_commands(unit, paths):
        if not path.exists():
            do(command)
    start = BY_NAME.get(unit.start)
    beside = None
    if start is not None and not is_done(start, paths.results) and not (paths.runs / start.name / "eval.json").is_file():
        # the start model's evaluation, once, on 15% of the GPU while verl starts up
        beside = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "run", "--unit", start.name,
                                   "--runs", str(paths.runs), "--models", str(paths.models), "--data", str(paths.data),
                                   "--results", str(paths.results)], cwd=ROOT)
    part = 1
    if not (run / "part1" / "adapter" / "adapter_config.json").is_file():
        do(part_command(unit, paths, 1))
    while target is not None and part <= MAX_TOPUP_PARTS:
        files = [run / f"part{k}" / "metrics.jsonl" for k in range(1, part + 1)]
        tokens, steps = tokens_of(files)
        need = steps_to_budget(target, tokens, steps)
        print(f"{unit.name}: {tokens:.0f} generated tokens in {steps} steps; {unit.budget_of}: {target:.0f}; "
              f"{need} more steps", flush=True)
        if need == 0:
            break
        part += 1
        if not (run / f"part{part}" / "adapter" / "adapter_config.json").is_file():
            do(part_command(unit, paths, part, steps=need))
    final = run / "final"
    do(f"agent-gym export-model --model {run}/part{part}/adapter --out {final}/model --force")
    for line in eval_commands(unit, paths, final / "model", final):
        do(line)
    if beside is not None and beside.wait():
        raise UnitError(f"the evaluation of {unit.start} failed (its log: {paths.runs / unit.start / 'log.txt'})")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="learning_units.py", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("next", "run", "collect", "list"))
    p.add_argument("name", nargs="?", help="collect: the unit")
    p.add_argument("--unit", help="run: this unit instead of the next")
    p.add_argument("--to", type=Path, help="collect: the folder to copy into (default: RESULTS/NAME)")
    home = Path(os.path.expanduser("~"))
    p.add_argument("--runs", type=Path, default=home / "runs" / "learning-units")
    p.add_argument("--models", type=Path, default=home / "models")
    p.add_argument("--data", type=Path, default=home / "data")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    paths = Paths(args.runs, args.models, args.data, args.results)
    try:
        if args.command == "list":
            for u in UNITS:
                print(f"{u.name}\t{'done' if is_done(u, paths.results) else 'to run'}")
            return 0
        if args.command == "collect":
            if args.name not in BY_NAME:
                p.error(f"collect needs a unit name, one of: {', '.join(BY_NAME)}")
            named = BY_NAME[args.name]
            for path in collect(named, paths, args.to or paths.results / named.name):
                print(path)
            return 0
        if args.unit is not None and args.unit not in BY_NAME:
            p.error(f"--unit: one of {', '.join(BY_NAME)}, got {args.unit!r}")
        unit = BY_NAME[args.unit] if args.unit else next_unit(paths.results)
        if unit is None:
            print(f"every unit has results in {paths.results}")
            return 0
        if args.command == "next":
            print("\n".join(plan(unit, paths)))
            return 0
        run_unit(unit, paths)
        for path in collect(unit, paths, paths.results / unit.name):
            print(f"wrote {path}")
        if unit.start and (paths.runs / unit.start / "eval.json").is_file():
            for path in collect(BY_NAME[unit.start], paths, paths.results / unit.start):
                print(f"wrote {path}")
        print(json.dumps({"unit": unit.name, "results": str(paths.results / unit.name)}))
    except UnitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
