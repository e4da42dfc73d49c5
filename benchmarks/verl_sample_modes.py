"""Concat, per-step and segment samples side by side: the same GRPO run on GSM8KTool, three ways (GPU).

    python benchmarks/verl_sample_modes.py --model ~/models/smollm2-135m-tool --out runs/sample_modes

For each mode it runs ``examples/run_smollm2-135m_gsm8k_tool.sh`` (64 prompts x 5 episodes per step,
the warm-started SmolLM2 that calls the calculator) for ``--steps`` training steps with validation off,
reads verl's per-step metrics (its file logger), and prints medians over steps 2..N of

- trained tokens per step (``global_seqlen/mean``: the prompt + response tokens the update runs on),
- the actor-update time (``timing_s/update_actor``) and the whole step (``timing_s/step``),
- samples per step and the padding fraction (step and segment modes),

and each mode's update time relative to concat mode's. The modes:

- ``concat``: ``agent_name=agent_gym``, one sample per trajectory (stock verl's layout);
- ``step``: ``agent_name=agent_gym_step`` with ``+agent_gym.samples=step``, one sample per env step
  carrying its whole context (Agent-R1's layout, quadratic in the episode length);
- ``segment``: ``agent_name=agent_gym_step`` (the default samples), one sample per run of append-only
  steps, with step-level advantages.

Needs a GPU with vLLM and verl, the model folder (``agent-gym export-model --model smollm2-135m-tool
--out DIR``) and the data (``examples/data_preprocess/gsm8k_tool.py``, both modes; the script prints the
commands when they are missing). ``--dry-run`` only prints the commands.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = {
    # mode -> (the run script's MODE, extra hydra overrides)
    "concat": ("concat", []),
    "step": ("step", ["+agent_gym.samples=step"]),
    "segment": ("step", []),
}
METRICS = {
    "trained_tokens": "global_seqlen/mean",
    "update_actor_s": "timing_s/update_actor",
    "step_s": "timing_s/step",
    "gen_s": "timing_s/gen",
    "samples": "agent_gym/step/samples",
    "padding_fraction": "agent_gym/step/padding_fraction",
    "reward": "critic/score/mean",
}


def read_metrics(path: Path) -> list[dict]:
    """verl's file-logger lines: ``{"step": n, "data": {...}}``, one per training step."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                if "timing_s/step" in record["data"]:
                    rows.append({"step": record["step"], **record["data"]})
    return rows


def summarise(rows: list[dict], first_step: int) -> dict[str, float | None]:
    """Medians over steps >= first_step of every metric in METRICS (None when verl did not log it)."""
    kept = [r for r in rows if r["step"] >= first_step]
    out: dict[str, float | None] = {"steps": float(len(kept))}
    for name, key in METRICS.items():
        values = [float(r[key]) for r in kept if r.get(key) is not None]
        out[name] = statistics.median(values) if values else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.expanduser("~/models/smollm2-135m-tool"), help="HF model folder (MODEL_PATH)")
    parser.add_argument("--out", default="runs/sample_modes", help="folder for the metric files, logs and the CSV")
    parser.add_argument("--steps", type=int, default=6, help="training steps per mode (medians over steps 2..N)")
    parser.add_argument("--modes", default="concat,step,segment", help="comma-separated subset of concat,step,segment")
    parser.add_argument("--summarise-only", action="store_true", help="read the metric files of an earlier run, run nothing")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("overrides", nargs="*", help="extra hydra overrides for every run (e.g. actor_rollout_ref.rollout.enforce_eager=True)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in modes:
        script_mode, extra = MODES[mode]
        metrics = out / f"{mode}.jsonl"
        command = [
            "bash", str(REPO / "examples/run_smollm2-135m_gsm8k_tool.sh"),
            *extra, "trainer.val_before_train=False", "trainer.test_freq=-1", *args.overrides,
        ]
        env = {**os.environ, "MODE": script_mode, "STEPS": str(args.steps), "MODEL_PATH": args.model,
               "VERL_FILE_LOGGER_PATH": str(metrics.resolve())}
        print(f"[{mode}] MODE={script_mode} STEPS={args.steps} {' '.join(command)}", file=sys.stderr, flush=True)
        if args.dry_run:
            continue
        if not args.summarise_only:
            with open(out / f"{mode}.log", "w") as log:
                rc = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                print(f"[{mode}] failed (exit {rc}); see {out / f'{mode}.log'}", file=sys.stderr)
                return rc
        results[mode] = summarise(read_metrics(metrics), first_step=2)
    if not results:
        return 0
    base = (results.get("concat") or {}).get("update_actor_s")
    fields = ["mode", "steps", *METRICS, "update_vs_concat"]
    with open(out / "sample_modes.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for mode, r in results.items():
            ratio = r["update_actor_s"] / base if base and r["update_actor_s"] else None
            writer.writerow({"mode": mode, **r, "update_vs_concat": ratio})
    print(f"{'mode':8} {'tokens/step':>12} {'update s':>9} {'step s':>8} {'samples':>8} {'pad':>6} {'vs concat':>9}")
    for mode, r in results.items():
        ratio = r["update_actor_s"] / base if base and r["update_actor_s"] else None

        def fmt(v, spec):
            return format(v, spec) if v is not None else "-"

        print(f"{mode:8} {fmt(r['trained_tokens'], '12.0f')} {fmt(r['update_actor_s'], '9.2f')} {fmt(r['step_s'], '8.2f')} "
              f"{fmt(r['samples'], '8.0f')} {fmt(r['padding_fraction'], '6.3f')} {fmt(ratio, '9.2f')}")
    print(f"medians of steps 2..{args.steps}; CSV: {out / 'sample_modes.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
