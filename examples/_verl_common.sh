# Sourced by the run_*.sh scripts: settings that depend on the installed verl version.
#   VERL_VERSION_ARGS  extra hydra options (verl 0.9.x: the legacy trainer, which agent_gym_verl extends)
#   AGENT_LOOP_CONFIG  the agent-gym agent-loop registry file (agent_gym + agent_gym_step)
AGENT_LOOP_CONFIG=$(python3 -m agent_gym_verl.paths agent_loop_config) || {
  echo "agent_gym_verl is not installed: pip install -e trainers/verl (see docs/verl.md)" >&2; exit 1; }
VERL_VERSION_ARGS=()
if python3 - <<'PY'
import sys
from importlib.metadata import version
major, minor = (int(x) for x in version("verl").split(".")[:2])
sys.exit(0 if (major, minor) >= (0, 9) else 1)
PY
then
  # verl 0.9's default (v1) trainer needs the TransferQueue package and has no step-mode seam.
  VERL_VERSION_ARGS+=(trainer.use_v1=False)
fi
# verl's token log-probs without flash-attn loop over every token in Python (the actor update's cost of
# that loop: docs/performance.md); agent_gym_verl.fast_logprobs vectorises it
# in every verl process through verl's own import hook. Set VERL_USE_EXTERNAL_MODULES= (empty) to run verl's as is; with
# modules of your own, list ours too: VERL_USE_EXTERNAL_MODULES=my_mod,agent_gym_verl.fast_logprobs.
export VERL_USE_EXTERNAL_MODULES=${VERL_USE_EXTERNAL_MODULES-agent_gym_verl.fast_logprobs}

# require_input PATH COMMAND...: before verl starts (minutes of Ray and vLLM start-up), stop with exit
# status 1 when PATH, an input the script reads, is missing, and print the command(s) that make it.
# Dry runs (AGENT_GYM_VERL_DRY_RUN=1) only compose verl's config, so they skip the check.
require_input() {
  local xtrace=${-//[^x]/}; { set +x; } 2>/dev/null
  if [[ -z ${AGENT_GYM_VERL_DRY_RUN:-} && ! -e $1 ]]; then
    printf '%s: %s is missing; make it first with:\n' "$(basename "$0")" "$1" >&2
    shift; printf '  %s\n' "$@" >&2
    exit 1
  fi
  [[ -n $xtrace ]] && set -x; return 0
}
# require_model COMMAND...: require_input for MODEL_PATH's config.json when MODEL_PATH is a folder path
# (starts with / or .); a hub name is left to verl and vLLM.
require_model() {
  case $MODEL_PATH in /*|.*) require_input "$MODEL_PATH/config.json" "$@" ;; esac
}
