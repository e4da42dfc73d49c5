#!/usr/bin/env bash
# The TRL adapter's CI: installs trainers/trl (with trl and datasets) into the active virtualenv, the
# README's .venv, then runs trainers/trl/tests against the newest tested trl, and against the oldest the
# tests that touch what differs between releases (TRL_OLDEST_TESTS: the private surface and real GRPO steps).
#
#   bash .ci/trl.sh            # from the repository root, .venv activated (called by .ci/run)
#
# TRL_LATEST (default 1.16.0) is installed with its dependencies; torch and transformers must stay the
# ones the README installed and the core's tests ran on (the script fails if pip replaced either; the
# transformers range is capped alike in pyproject.toml and trainers/trl/pyproject.toml). TRL_OLDEST (default 1.14.2; empty skips it) is laid over
# it in a temporary folder on PYTHONPATH (trl alone, --no-deps: its dependencies are the same). 1.15.0 is
# outside the supported range: it cannot compute log-probs with a torch build without Triton (CPU).
# Prints one summary line per trl version and exits non-zero if any test failed or none ran.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
TRL_LATEST=${TRL_LATEST:-1.16.0}
TRL_OLDEST=${TRL_OLDEST-1.14.2}
# Under the oldest release only the tests of what changes between trl releases: the private methods the
# adapter calls (test_private.py) and whole GRPO steps through them (test_train.py). The rest (datasets,
# rollouts, the example) goes through the same adapter code and the public API; running all of it under
# both made this stage 813 s of a CI run alone on 2 cores.
TRL_OLDEST_TESTS=${TRL_OLDEST_TESTS:-trainers/trl/tests/test_private.py trainers/trl/tests/test_train.py}
export PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
start=$SECONDS
log() { printf '[trl-ci %(%H:%M:%S)T] %s\n' -1 "$*"; }
quiet_pip() { python -m pip "$@" 2>&1 | grep -v -E '^WARNING: Location|is ignored: it is neither' ; return "${PIPESTATUS[0]}"; }

versions() { python -c 'from importlib.metadata import version as v; print("torch", v("torch"), "transformers", v("transformers"))'; }
before=$(versions) || { log "no torch or transformers in $(command -v python)"; exit 1; }
log "installing trl==$TRL_LATEST and -e trainers/trl into $(python -c 'import sys; print(sys.prefix)')"
quiet_pip install -q --no-compile "trl==$TRL_LATEST" -e trainers/trl || { log "pip install failed"; exit 1; }
after=$(versions)
if [[ $after != "$before" ]]; then  # the core's tests ran on $before: the adapter must run on the same
  log "installing trl moved the README install's packages: $before -> $after (pin the range in pyproject.toml)"
  exit 1
fi
log "set up in $((SECONDS - start)) s: $(python -c 'from importlib.metadata import version as v; print("trl", v("trl"), "transformers", v("transformers"), "torch", v("torch"), "datasets", v("datasets"))')"

SUMMARY=()
status=0
run_tests() {  # label [PYTHONPATH [TESTS]]
  local label=$1 path=${2:-} tests=${3:-trainers/trl/tests} out rc t0=$SECONDS
  out=$(mktemp)
  log "$label: $(PYTHONPATH=$path python -c 'import trl; print("trl", trl.__version__, "from", trl.__file__)')"
  PYTHONPATH=$path python -m pytest $tests -q -p no:cacheprovider --durations=5 -W ignore::FutureWarning 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  SUMMARY+=("$label: $(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)' "$out" | tail -n1 | tr -d '=' | sed 's/^ *//') in $((SECONDS - t0)) s (exit $rc)")
  rm -f "$out"
  [[ $rc -eq 0 ]] || status=1
}

run_tests "trl $TRL_LATEST"
if [[ -n $TRL_OLDEST ]]; then
  overlay=$(mktemp -d)
  if quiet_pip install -q --no-compile --no-deps --target "$overlay" "trl==$TRL_OLDEST"; then
    run_tests "trl $TRL_OLDEST" "$overlay" "$TRL_OLDEST_TESTS"
  else
    SUMMARY+=("trl $TRL_OLDEST: pip install FAILED")
    status=1
  fi
  rm -rf "$overlay"
fi
log "TRL adapter tests finished in $((SECONDS - start)) s"
for line in "${SUMMARY[@]}"; do echo "trl-ci $line"; done
exit $status
