#!/usr/bin/env bash
# The linters' CI: installs ruff and mypy at pinned versions into the active virtualenv (the README's
# .venv, so that mypy sees the torch, transformers and gymnasium a user installs), then runs
# `ruff check .` and `mypy` from the repository root, as configured in pyproject.toml ([tool.ruff]:
# the rules; [tool.mypy]: the files, agent_gym and every envs/*/agent_gym_* and trainers/*/agent_gym_*
# package, and the optional dependencies whose imports are Any). The stubs of the typed-elsewhere
# libraries the core uses (tqdm, jsonschema) are installed with mypy, pinned too.
#
#   bash .ci/lint.sh     # .venv activated (called by .ci/run right after the README's install)
#
# Pinned because a new release of either adds checks: CI must fail on the code, not on an upgrade.
# RUFF_VERSION / MYPY_VERSION override the pins. Prints one summary line per tool and exits non-zero if
# either reported anything.
#
# mypy's cache lives outside the clone (MYPY_CACHE_DIR, default ~/.cache/agent-r1-gym/mypy), because
# CI clones afresh every time: cold, mypy takes about a minute on two cores (most of it reading torch
# and transformers); warm, a few seconds. The cache is safe to share: mypy re-checks every file whose
# content hash changed, whatever folder the clone or the virtualenv is in, and replaces entries atomically.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
RUFF_VERSION=${RUFF_VERSION:-0.17.6}
MYPY_VERSION=${MYPY_VERSION:-2.4.1}
STUBS=("types-tqdm==4.70.0.20261122" "types-jsonschema==4.26.0.20261006")
export MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-r1-gym/mypy}
log() { printf '[lint %(%H:%M:%S)T] %s\n' -1 "$*"; }

if [[ -z ${VIRTUAL_ENV:-} ]]; then
  log "no virtualenv is active: activate the README's .venv first (. .venv/bin/activate)"
  exit 1
fi
t0=$SECONDS
python -m pip install -q --no-compile --disable-pip-version-check "ruff==$RUFF_VERSION" "mypy==$MYPY_VERSION" "${STUBS[@]}" \
  || { log "pip install of ruff==$RUFF_VERSION mypy==$MYPY_VERSION ${STUBS[*]} failed"; exit 1; }
log "installed ruff $RUFF_VERSION, mypy $MYPY_VERSION and ${STUBS[*]} into $VIRTUAL_ENV in $((SECONDS - t0)) s"

status=0
t0=$SECONDS
if python -m ruff check .; then
  log "ruff: no errors ($((SECONDS - t0)) s)"
else
  log "ruff: errors above ($((SECONDS - t0)) s)"; status=1
fi
t0=$SECONDS
if python -m mypy; then
  log "mypy: no errors ($((SECONDS - t0)) s)"
else
  log "mypy: errors above ($((SECONDS - t0)) s)"; status=1
fi
exit "$status"
