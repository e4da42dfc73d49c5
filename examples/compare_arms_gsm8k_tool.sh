#!/bin/bash
# Two arms of examples/learn_smollm2-135m_gsm8k_tool.sh trained at the same generated-token budget, then
# compared: the engine of compare_step_vs_concat_gsm8k_tool.sh and compare_tree_vs_flat_gsm8k_tool.sh (their
# headers say what to run, on what, for how long). Any other pair of settings runs the same way:
#
#   ARM1="step:MODE=step" ARM2="concat:MODE=concat" RUN_ROOT=~/runs/my_pair bash examples/compare_arms_gsm8k_tool.sh
#
# ARMn is LABEL:SETTING=VALUE SETTING=VALUE ... (the learn recipe's settings; no spaces inside a value).
# What it does, skipping whatever RUN_ROOT shows done, so that running it again continues where it stopped:
#  1. both arms, part by part in turn (same PART, so the same data.seed), TOTAL_STEPS steps each in parts of
#     STEPS_PER_PART; arm LABEL's part N lives in RUN_ROOT/LABEL/partN and continues part N-1's adapter;
#  2. the token budget: the larger of the two arms' generated tokens (agent_gym/generated_tokens summed over
#     their steps), written to RUN_ROOT/budget.txt; the other arm trains further parts (data.seed = their
#     PART) of as many steps as its own tokens per step say it needs to reach the budget, to within half a
#     step (at most MAX_TOPUP_PARTS parts);
#  3. each arm's last adapter merged into its base (agent-gym export-model) and played greedily on the first
#     EVAL_EPISODES (1319: all) GSM8K test problems, in order (agent-gym eval --backend vllm):
#     RUN_ROOT/LABEL/final/{model/,eval.jsonl,eval.json};
#  4. RUN_ROOT/compare.txt and compare.json (examples/compare_evals.py ARM1 ARM2: paired SE, sign test; also
#     on the first 512, the held-out set), per_task.csv, heldout_tokens.{csv,png} and heldout_steps.{csv,png}
#     (examples/plot_heldout_accuracy.py, both arms), and summary.txt with all of it.
# A part that stopped midway continues from its last checkpoint (every SAVE_FREQ=5 steps) on the same
# machine; on another machine (checkpoints gone) it starts over, its earlier metrics kept in partN/lost.*.
# What must survive a machine: RUN_ROOT without partN/ckpt/ (adapters ~10 MB a part, metrics, logs).
# MAX_UNITS=k stops after k units (a part or a final evaluation) that ran, for calls with a time limit.
# Extra arguments are hydra options for every part of both arms. AGENT_GYM_VERL_DRY_RUN=1: each arm's part 1
# composes verl's config (nothing is checked, trained or written) and the plan is printed.
set -euo pipefail

: "${ARM1:?ARM1=LABEL:SETTING=VALUE... (see the header)}" "${ARM2:?ARM2=LABEL:SETTING=VALUE... (see the header)}"
: "${RUN_ROOT:?RUN_ROOT=<folder of this comparison>}"
MODEL_PATH=${MODEL_PATH:-$HOME/models/smollm2-135m-tool}
TOTAL_STEPS=${TOTAL_STEPS:-40}
STEPS_PER_PART=${STEPS_PER_PART:-10}
MAX_TOPUP_PARTS=${MAX_TOPUP_PARTS:-8}
MAX_UNITS=${MAX_UNITS:-0}
EVAL_EPISODES=${EVAL_EPISODES:-1319}
for v in TOTAL_STEPS STEPS_PER_PART MAX_TOPUP_PARTS MAX_UNITS EVAL_EPISODES; do
  case ${!v} in ''|*[!0-9]*) echo "$v must be a number, got '${!v}'" >&2; exit 2 ;; esac
done
(( STEPS_PER_PART > 0 && TOTAL_STEPS > 0 )) || { echo "TOTAL_STEPS and STEPS_PER_PART must be positive" >&2; exit 2; }
cd "$(dirname "$0")/.."
LEARN=examples/learn_smollm2-135m_gsm8k_tool.sh
EXTRA=("$@")
LABELS=("${ARM1%%:*}" "${ARM2%%:*}")
SETTINGS=("${ARM1#*:}" "${ARM2#*:}")
[[ ${LABELS[0]} != "${LABELS[1]}" && ${LABELS[0]} =~ ^[A-Za-z0-9_.-]+$ && ${LABELS[1]} =~ ^[A-Za-z0-9_.-]+$ ]] || {
  echo "the arms need two different labels of letters, digits, _ . - (got '${LABELS[0]}', '${LABELS[1]}')" >&2; exit 2; }
# The arms differ only by their settings: nothing of the learn recipe's own comes from this shell.
unset MODE TREE_WIDTH TREE_BRANCH_AT TREE_MAX_LEAVES TREE_TOP_K N MINI DATA_DIR VAL_DIR RUN_DIR PART ADAPTER STEPS \
  DATA_SEED CKPT_DIR VERL_FILE_LOGGER_PATH
log() { printf '\n=== %s\n' "$*"; }

if [[ -n ${AGENT_GYM_VERL_DRY_RUN:-} ]]; then
  for i in 0 1; do
    read -ra kv <<< "${SETTINGS[$i]}"
    log "arm ${LABELS[$i]}: ${SETTINGS[$i]} -> $RUN_ROOT/${LABELS[$i]}"
    env "${kv[@]}" MODEL_PATH="$MODEL_PATH" RUN_DIR="$RUN_ROOT/${LABELS[$i]}" PART=1 STEPS="$STEPS_PER_PART" \
      bash "$LEARN" "${EXTRA[@]}"
  done
  log "plan: $TOTAL_STEPS steps per arm in parts of $STEPS_PER_PART, then up to $MAX_TOPUP_PARTS parts to the token budget, then $EVAL_EPISODES test problems each"
  exit 0
fi

# Everything both arms read, checked before hours of training start (the learn recipe's default folders).
missing=()
[[ -e $MODEL_PATH/config.json ]] || missing+=("agent-gym export-model --model smollm2-135m-tool --out $MODEL_PATH")
for i in 0 1; do
  mode=step; [[ " ${SETTINGS[$i]} " == *" MODE=concat "* ]] && mode=concat
  suffix=; [[ $mode == concat ]] && suffix=_concat
  [[ -e $HOME/data/gsm8k_tool$suffix/train.parquet ]] ||
    missing+=("python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir $HOME/data/gsm8k_tool$suffix --mode $mode")
  [[ -e $HOME/data/gsm8k_tool${suffix}_val512/test.parquet ]] ||
    missing+=("agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out $HOME/data/gsm8k_tool${suffix}_val512 --mode $mode")
done
if (( ${#missing[@]} )); then
  echo "$(basename "$0"): inputs are missing; make them first with:" >&2
  printf '  %s\n' "${missing[@]}" | sort -u >&2
  exit 1
fi

units=0
unit_done() {
  units=$((units + 1))
  if (( MAX_UNITS > 0 && units >= MAX_UNITS )); then
    log "$units unit(s) done (MAX_UNITS=$MAX_UNITS): run the same command again to continue"
    exit 0
  fi
}

done_parts() {  # how many parts of arm $1 have their adapter, counting from part 1
  local p=0
  while [[ -s $RUN_ROOT/$1/part$((p + 1))/adapter/adapter_config.json ]]; do p=$((p + 1)); done
  echo "$p"
}

run_part() {  # run_part INDEX PART STEPS: one part of arm INDEX, unless its adapter exists
  local label=${LABELS[$1]} part=$2 steps=$3
  local dir=$RUN_ROOT/$label pdir=$RUN_ROOT/$label/part$2 adapter=
  [[ -s $pdir/adapter/adapter_config.json ]] && return 0
  mkdir -p "$pdir"
  # a rerun keeps the part's length, whatever the budget arithmetic says now
  if [[ -s $pdir/steps.txt ]]; then steps=$(<"$pdir/steps.txt"); else echo "$steps" > "$pdir/steps.txt"; fi
  # a try without checkpoints here (another machine) is started over: its metrics would read as a new part
  if [[ ! -s $pdir/ckpt/latest_checkpointed_iteration.txt ]] && compgen -G "$pdir/metrics*.jsonl" > /dev/null; then
    local lost; lost=$pdir/lost.$(date +%Y%m%d-%H%M%S)
    mkdir -p "$lost" && mv "$pdir"/metrics*.jsonl "$lost"/
  fi
  (( part > 1 )) && adapter=$dir/part$((part - 1))/adapter
  read -ra kv <<< "${SETTINGS[$1]}"
  log "arm $label, part $part: $steps steps (${SETTINGS[$1]})"
  env "${kv[@]}" MODEL_PATH="$MODEL_PATH" RUN_DIR="$dir" PART="$part" STEPS="$steps" ADAPTER="$adapter" \
    bash "$LEARN" "${EXTRA[@]}" 2>&1 | tee -a "$pdir/log.txt"
  unit_done
}

arm_files() {  # the metrics files of arm $1's finished parts, in order, comma-separated
  local label=$1 files=() p k d
  for ((p = 1; p <= $(done_parts "$label"); p++)); do
    d=$RUN_ROOT/$label/part$p
    k=1; while [[ -e $d/metrics.$k.jsonl ]]; do files+=("$d/metrics.$k.jsonl"); k=$((k + 1)); done
    [[ -e $d/metrics.jsonl ]] && files+=("$d/metrics.jsonl")
  done
  (IFS=,; echo "${files[*]}")
}

tokens_of() {  # "TOKENS STEPS" of arm $1 (plot_heldout_accuracy.py --print-tokens)
  python3 examples/plot_heldout_accuracy.py --run "$1=$(arm_files "$1")" --print-tokens | cut -f2,3 | tr '\t' ' '
}

# 1. TOTAL_STEPS steps per arm, the arms' parts in turn.
phase1_parts=$(( (TOTAL_STEPS + STEPS_PER_PART - 1) / STEPS_PER_PART ))
for ((p = 1; p <= phase1_parts; p++)); do
  steps=$(( TOTAL_STEPS - (p - 1) * STEPS_PER_PART )); (( steps > STEPS_PER_PART )) && steps=$STEPS_PER_PART
  for i in 0 1; do run_part "$i" "$p" "$steps"; done
done

# 2. The same generated tokens: the budget is fixed once, so the arms do not chase each other.
if [[ ! -s $RUN_ROOT/budget.txt ]]; then
  read -r t0 _ <<< "$(tokens_of "${LABELS[0]}")"; read -r t1 _ <<< "$(tokens_of "${LABELS[1]}")"
  python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$t0" "$t1" > "$RUN_ROOT/budget.txt"
fi
budget=$(<"$RUN_ROOT/budget.txt")
for i in 0 1; do
  label=${LABELS[$i]}
  for ((extra = 0; extra < MAX_TOPUP_PARTS; extra++)); do
    read -r tokens steps_done <<< "$(tokens_of "$label")"
    # steps still needed at this arm's own tokens per step, to the nearest step (0: within half a step)
    need=$(python3 -c "import sys; b, t, s = map(float, sys.argv[1:]); print(max(0, round((b - t) / (t / s))) if t > 0 else 0)" \
           "$budget" "$tokens" "$steps_done")
    (( need > 0 )) || break
    (( need > STEPS_PER_PART )) && need=$STEPS_PER_PART
    run_part "$i" "$(( $(done_parts "$label") + 1 ))" "$need"
  done
  read -r tokens steps_done <<< "$(tokens_of "$label")"
  log "arm $label: $tokens generated tokens in $steps_done steps (budget $budget)"
done

# 3. Each arm's last adapter, merged, on the test problems in order.
for i in 0 1; do
  label=${LABELS[$i]}
  last=$RUN_ROOT/$label/part$(done_parts "$label")/adapter
  final=$RUN_ROOT/$label/final
  [[ -s $final/eval.jsonl && $(cat "$final/from.txt" 2>/dev/null) == "$last" ]] && continue
  mkdir -p "$final"
  log "arm $label: greedy evaluation of $last on $EVAL_EPISODES test problems"
  agent-gym export-model --model "$last" --out "$final/model" --force
  agent-gym eval AgentR1/GSM8KTool-v0 --split test --in-order --episodes "$EVAL_EPISODES" --model "$final/model" \
    --backend vllm --max-new-tokens 256 --json --no-progress --out "$final/eval.part.jsonl" > "$final/eval.json"
  mv "$final/eval.part.jsonl" "$final/eval.jsonl"
  echo "$last" > "$final/from.txt"
  unit_done
done

# 4. The comparison, the curves and the summary.
a=$RUN_ROOT/${LABELS[0]}/final/eval.jsonl; b=$RUN_ROOT/${LABELS[1]}/final/eval.jsonl
python3 examples/compare_evals.py "$a" "$b" --csv "$RUN_ROOT/per_task.csv" > "$RUN_ROOT/compare.txt"
python3 examples/compare_evals.py "$a" "$b" --json > "$RUN_ROOT/compare.json"
python3 examples/compare_evals.py "$a" "$b" --first 512 > "$RUN_ROOT/compare_first512.txt"
runs=(--run "${LABELS[0]}=$(arm_files "${LABELS[0]}")" --run "${LABELS[1]}=$(arm_files "${LABELS[1]}")")
for x in tokens steps; do
  png=(); python3 -c "import matplotlib" 2> /dev/null && png=(--png "$RUN_ROOT/heldout_$x.png")
  python3 examples/plot_heldout_accuracy.py "${runs[@]}" --x "$x" --csv "$RUN_ROOT/heldout_$x.csv" "${png[@]}" \
    --title "GSM8KTool held-out accuracy: ${LABELS[0]} vs ${LABELS[1]}" > "$RUN_ROOT/heldout_$x.txt"
done
{
  echo "# ${LABELS[0]} (${SETTINGS[0]}) vs ${LABELS[1]} (${SETTINGS[1]}); budget $budget generated tokens"
  echo "## held-out curves (first 512 test problems), against generated tokens"; cat "$RUN_ROOT/heldout_tokens.txt"
  echo "## final models, all $EVAL_EPISODES test problems (start = ${LABELS[0]}, end = ${LABELS[1]})"; cat "$RUN_ROOT/compare.txt"
  echo "## the same, first 512 (the held-out set)"; cat "$RUN_ROOT/compare_first512.txt"
} | tee "$RUN_ROOT/summary.txt"
echo "wrote $RUN_ROOT/summary.txt"
