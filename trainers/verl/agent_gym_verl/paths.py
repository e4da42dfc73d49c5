"""Print installed file paths the run scripts need: ``python -m agent_gym_verl.paths agent_loop_config``."""

from __future__ import annotations

import sys

from agent_gym_verl import AGENT_LOOP_CONFIG

PATHS = {"agent_loop_config": AGENT_LOOP_CONFIG}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in PATHS:
        print(f"usage: python -m agent_gym_verl.paths {{{','.join(PATHS)}}}", file=sys.stderr)
        return 2
    print(PATHS[args[0]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
