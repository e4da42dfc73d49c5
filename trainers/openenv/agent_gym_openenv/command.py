"""``agent-gym serve``: the subcommand this adapter adds to the core CLI.

This package declares :func:`add_parser` in the entry-point group ``agent_gym.commands`` (the
module :mod:`agent_gym.commands` is what a subcommand is built from). ``agent-gym`` loads it whenever
it builds its parser, ``--help`` included, so this module imports neither openenv-core (seconds: it imports gradio) nor the server;
running the command does (:mod:`agent_gym_openenv.server`).
"""

from __future__ import annotations

import argparse
from typing import Any

from agent_gym.commands import (
    UsageError,
    add_env_options,
    env_kwargs,
    missing_adapter_message,
    positive_int,
    resolve_env_id,
    user_errors,
)

__all__ = ["add_parser", "run"]

_EPILOG = """\
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


def add_parser(subparsers: Any, formatter_class: Any = argparse.RawDescriptionHelpFormatter) -> argparse.ArgumentParser:
    """Add ``serve`` to ``agent-gym``'s subparsers (the ``agent_gym.commands`` entry point)."""
    p = subparsers.add_parser(
        "serve", help="serve an env over OpenEnv: many episodes per server (OpenEnv adapter)",
        description="Serve an env over OpenEnv: many concurrent episodes, each in its own session and env.",
        epilog=_EPILOG, formatter_class=formatter_class,
    )
    add_env_options(p)
    p.set_defaults(split="train")  # a server usually feeds a trainer
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 for other machines (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="TCP port; 0 picks a free one (default: %(default)s)")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer folder or hub name (the policy's); default: the default model's")
    p.add_argument("--max-sessions", type=positive_int, default=256, help="sessions (episodes in flight) at a time (default: %(default)s)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; a user's mistake raises :class:`~agent_gym.commands.UsageError`."""
    try:
        from agent_gym_openenv.server import serve
    except ImportError as exc:  # openenv-core (or one of its parts) is not installed
        raise UsageError(missing_adapter_message("serve", exc)) from None
    env_id = resolve_env_id(args.env_id)
    kwargs = env_kwargs(args)
    user_errors(lambda: serve(env_id, host=args.host, port=args.port, env_kwargs=kwargs, tokenizer=args.tokenizer,
                              max_sessions=args.max_sessions))
    return 0
