#!/usr/bin/env bash
# The Ray env pool's CI: installs Ray (the [ray] extra, at the tested version) into the active virtualenv
# (the README's .venv) and runs the tests that need it: tests/test_ray_pool.py (a local Ray cluster on
# CPU: the same trajectories as in-process, a worker killed mid-episode), the doc blocks that need Ray
# (docs/ray.md's example, docs/trl.md's `train_trl.py --env-workers 2`), and the TRL adapter's envs in Ray
# workers (trainers/trl/tests/test_env_workers.py: the samples of envs in process, and a GRPO step through
# trainer.train()), which need the adapter .ci/trl.sh installs first (.ci/run runs it before this script).
#
#   bash .ci/ray.sh     # .venv activated (called by .ci/run after the README's tests)
#
# Not in the README's install: Ray is a large optional dependency that only the env pool uses; the
# README's test command skips these tests without it.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
RAY_VERSION=${RAY_VERSION:-2.60.0}
log() { printf '[ray-ci %(%H:%M:%S)T] %s\n' -1 "$*"; }

if [[ -z ${VIRTUAL_ENV:-} ]]; then
  log "no virtualenv is active: activate the README's .venv first (. .venv/bin/activate)"
  exit 1
fi
python -m pip install -q --no-compile --disable-pip-version-check "ray==$RAY_VERSION" 2>&1 | grep -v -E '^WARNING: Location|is ignored: it is neither'
[[ ${PIPESTATUS[0]} -eq 0 ]] || { log "pip install ray==$RAY_VERSION failed"; exit 1; }
log "ray $(python -c 'import ray; print(ray.__version__)')"
python -m pytest tests/test_ray_pool.py -q -p no:cacheprovider -rs
status=$?
# The doc blocks that need Ray (docs/ray.md's example; docs/trl.md's training command with envs in Ray
# workers, one optimizer step of it: max-steps=1), which the README's tests skip without Ray; here they
# must run (AGENT_GYM_DOC_BLOCKS_NO_SKIP), the TRL one with the adapter .ci/trl.sh installed.
AGENT_GYM_DOC_BLOCKS_NO_SKIP=1 python -m pytest tests/test_doc_blocks.py -k "needs-ray" -q -p no:cacheprovider -rs \
  --durations=3 || status=1
if python -c 'import agent_gym_trl, trl' 2>/dev/null; then
  python -m pytest trainers/trl/tests/test_env_workers.py -q -p no:cacheprovider -rs -W ignore::FutureWarning || status=1
else
  log "the TRL adapter is not installed (bash .ci/trl.sh installs it): trainers/trl/tests/test_env_workers.py not run"
fi
exit "$status"
