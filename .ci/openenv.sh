#!/usr/bin/env bash
# The OpenEnv adapter's CI: install trainers/openenv (and openenv-core) into the active virtualenv, then
# run its tests (a real `agent-gym serve` subprocess on localhost, driven by openenv-core's clients) and
# the code blocks of docs/openenv.md.
#
#   . .venv/bin/activate && bash .ci/openenv.sh      # from the repository root, after the README install
#
# The main virtualenv is used because openenv-core's pins leave torch, transformers, tokenizers and numpy
# as they are (through gradio it moves pillow below 13). The install runs under a constraint file made
# of their installed versions, so a release of openenv-core that wanted to change them fails here
# instead of changing them; the versions are compared once more afterwards.
set -euo pipefail
start=$(date +%s)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  echo "openenv CI: activate the project's virtualenv first (README: Install)" >&2
  exit 1
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
kept=$(mktemp)
trap 'rm -f "$kept"' EXIT
python -m pip freeze | grep -iE '^(torch|transformers|tokenizers|numpy)==' > "$kept"
python -m pip install -q --no-compile -c "$kept" -e trainers/openenv
if ! python -m pip freeze | grep -iE '^(torch|transformers|tokenizers|numpy)==' | diff "$kept" -; then
  echo "openenv CI: installing trainers/openenv changed the versions above" >&2
  exit 1
fi
python -m pytest trainers/openenv/tests -q
# docs/openenv.md's examples, each against the serve command the page gives it, and every other doc
# block that needs the adapter (the README's `agent-gym serve`, to its arguments) (tests/doc_blocks.py);
# the main suite skips them, as its virtualenv has no openenv-core then.
AGENT_GYM_DOC_BLOCKS_NO_SKIP=1 python -m pytest tests/test_doc_blocks.py -q -k "docs/openenv.md or needs-agent_gym_openenv"
echo "openenv CI: $(( $(date +%s) - start )) s"
