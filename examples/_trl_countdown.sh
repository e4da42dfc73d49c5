# Sourced by examples/trl_*_countdown.sh: GRPO with TRL (colocated vLLM generation) through the agent-gym TRL
# adapter on AgentR1/Countdown-v0 at difficulty "easy", with a held-out greedy evaluation before and after.
# The sourcing script sets:
#   MODEL_PATH, RUN_DIR   the model folder and the run's folder (both overridable from the environment)
#   EXPORT_COMMAND        the command that writes MODEL_PATH (printed when it is missing)
#   ENV_ARGS              env arguments, for training and evaluation alike (--env-kwarg KEY=VALUE ...)
#   BATCH_ARGS            how a generation batch of 32 tasks x 8 episodes is cut (train_trl.py options)
#   TRAIN_ARGS            (optional) further train_trl.py options of the recipe; arguments given to the
#                         script come after them, so they win
#   TITLE                 the plot's title
# What it does, in RUN_DIR:
#   1. eval_start.json: greedy accuracy of MODEL_PATH on the first EVAL_EPISODES easy test tasks (the tasks of
#      the verl recipes' validation files), agent-gym eval with vLLM;
#   2. trains STEPS optimizer steps: each generation batch is 32 training tasks x 8 episodes (a GRPO group per
#      task) at temperature 1, split into 2 optimizer steps of 128 episodes, lr 1e-5, no KL: the verl recipes'
#      batch (train_batch_size 32, n 8, ppo_mini_batch_size 16); the default 20 steps = verl's 10 steps.
#      metrics.csv has one row per generation batch (steps 1, 3, 5, ...), trl_logs.jsonl every metric TRL logs
#      (loss, grad norm, learning rate, entropy, clipping, vLLM importance sampling); the model is saved to RUN_DIR/model;
#   3. eval_end.json: the same greedy evaluation of the trained model;
#   4. the two evaluations compared task by task (examples/compare_evals.py: accuracies, the difference with
#      its paired standard error, tasks gained and lost; heldout_per_task.csv), then curve.csv and curve.png
#      (examples/plot_training_curve.py: train reward per optimizer step; needs matplotlib).
# train.log ends with the steady-state rate (steps 2..N: seconds per optimizer step, episodes/s).
# Settings (environment): MODEL_PATH, RUN_DIR, STEPS (20), TASKS (4096 training tasks), EVAL_EPISODES (256),
# GPU_MEM (vLLM's share of the GPU, in training and in both evaluations: 0.3), plus any extra train_trl.py
# option as arguments.
set -euo pipefail

STEPS=${STEPS:-20}
TRAIN_ARGS=(${TRAIN_ARGS[@]+"${TRAIN_ARGS[@]}"})
TASKS=${TASKS:-4096}
EVAL_EPISODES=${EVAL_EPISODES:-256}
GPU_MEM=${GPU_MEM:-0.3}
cd "$(dirname "$0")/.."
if [[ ! -f $MODEL_PATH/config.json ]]; then
  echo "$(basename "$0"): $MODEL_PATH/config.json is missing; make it first with:" >&2
  echo "  ${EXPORT_COMMAND//\$MODEL_PATH/$MODEL_PATH}" >&2
  exit 1
fi
mkdir -p "$RUN_DIR"
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}

evaluate() {  # model name
  agent-gym eval AgentR1/Countdown-v0 "${ENV_ARGS[@]}" --split test --episodes "$EVAL_EPISODES" \
    --model "$1" --backend vllm --gpu-memory-utilization "$GPU_MEM" --max-new-tokens 128 --no-progress --json \
    --out "$RUN_DIR/$2.jsonl" > "$RUN_DIR/$2.json"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(sys.argv[2], 'accuracy', s['accuracy'], 'on', s['episodes'], 'tasks')" \
    "$RUN_DIR/$2.json" "$2"
}

evaluate "$MODEL_PATH" eval_start
python3 examples/train_trl.py AgentR1/Countdown-v0 "${ENV_ARGS[@]}" --split train --rows "$TASKS" \
  --model "$MODEL_PATH" --use-vllm --vllm-mode colocate --vllm-gpu-memory-utilization "$GPU_MEM" --bf16 \
  "${BATCH_ARGS[@]}" --num-generations 8 --max-completion-length 128 \
  --lr 1e-5 --beta 0 --temperature 1.0 --steps "$STEPS" \
  --metrics-csv "$RUN_DIR/metrics.csv" --log-jsonl "$RUN_DIR/trl_logs.jsonl" --output-dir "$RUN_DIR/model" --save ${TRAIN_ARGS[@]+"${TRAIN_ARGS[@]}"} "$@" \
  2>&1 | tee "$RUN_DIR/train.log"
evaluate "$RUN_DIR/model" eval_end
python3 examples/compare_evals.py "$RUN_DIR/eval_start.jsonl" "$RUN_DIR/eval_end.jsonl" --csv "$RUN_DIR/heldout_per_task.csv"
python3 examples/plot_training_curve.py "$RUN_DIR/metrics.csv" --csv "$RUN_DIR/curve.csv" --png "$RUN_DIR/curve.png" \
  --title "$TITLE"
