"""Shared command line of the data_preprocess scripts (Agent-R1's flags, agent-gym's exporter)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable


def parse_args(default_dir: str, default_mode: str, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--local_save_dir", default=default_dir, help="where train.parquet and test.parquet go")
    p.add_argument("--local_dir", default=None, help="deprecated spelling of --local_save_dir")
    p.add_argument(
        "--local_dataset_path",
        default=None,
        help="folder with the original GSM8K train.jsonl/test.jsonl (default: $AGENT_GYM_GSM8K_DIR, "
        "else the copy packaged with agent-r1-gym-gsm8k); "
        "stored in each row as the env's data_dir, so training finds the same files",
    )
    p.add_argument("--hdfs_dir", default=None, help="not supported here: copy the folder with your own tools")
    p.add_argument("--mode", choices=("concat", "step"), default=default_mode, help="agent loop the rows select")
    p.add_argument("--limit", type=int, default=None, help="export only the first N tasks of each split")
    p.add_argument("--env_kwargs", default="{}", help="JSON object of extra gym.make arguments for every row")
    args = p.parse_args()
    if args.local_dir is not None:
        print("Warning: Argument 'local_dir' is deprecated. Please use 'local_save_dir' instead.", file=sys.stderr)
        args.local_save_dir = args.local_dir
    if args.hdfs_dir is not None:
        p.error("--hdfs_dir is not supported; write locally with --local_save_dir and copy the folder yourself")
    return args


def export(env_id: str, args: argparse.Namespace, *, ground_truth: Callable[[Any], Any] | None = None) -> None:
    from agent_gym_verl.export import export_env

    env_kwargs = json.loads(args.env_kwargs)
    if args.local_dataset_path:
        env_kwargs["data_dir"] = os.path.abspath(os.path.expanduser(args.local_dataset_path))
    out = os.path.expanduser(args.local_save_dir)
    for split in ("train", "test"):
        path = export_env(
            env_id,
            split,
            out,
            env_kwargs=env_kwargs,
            mode=args.mode,
            data_source="openai/gsm8k",  # verl's own GSM8K scorer recognises it (the env scores anyway)
            ability="math",
            limit=args.limit,
            ground_truth=ground_truth,
        )
        print(f"{env_id} [{split}] -> {path}")
