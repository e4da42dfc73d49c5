#!/bin/bash
# GRPO that aims to raise GSM8K-with-a-calculator accuracy of the warm-started SmolLM2-135M
# (smollm2-135m-tool) on ONE GPU, through the agent-gym verl adapter in step mode (segment samples), in
# parts that each fit a short machine lease: every part trains a LoRA adapter (a few MB) and the next
# part continues it. What it measured, with dates and hardware: docs/performance.md, "Learning on one H200".
#
#   agent-gym export-model --model smollm2-135m-tool --out ~/models/smollm2-135m-tool      # MODEL_PATH
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool        # DATA_DIR
#   agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out ~/data/gsm8k_tool_val512 --mode step
#   bash examples/learn_smollm2-135m_gsm8k_tool.sh                      # part 1: STEPS steps, then the adapter
#   PART=2 ADAPTER=~/runs/gsm8k_tool_learn/part1/adapter bash examples/learn_smollm2-135m_gsm8k_tool.sh
#   python3 examples/plot_heldout_accuracy.py ~/runs/gsm8k_tool_learn/part*/metrics.jsonl --csv c.csv --png c.png
#
# Held-out set: validation plays the FIRST 512 GSM8K test problems (VAL_DIR's test.parquet, written by the
# export-verl line above) greedily (temperature 0), before training and every TEST_FREQ steps; training
# never sees the test split. A file of its own, not data.val_max_samples: verl gives the validation
# dataset the training data's `shuffle`, so val_max_samples draws a random, unseeded subset each run.
# Metrics (VERL_FILE_LOGGER_PATH, default RUN_DIR/partN/metrics.jsonl): val-core/<source>/acc/mean@1
# (greedy accuracy), val-aux/<source>/tool_calls/mean@1 (calls per episode),
# val-aux/<source>/tool_call_validity (answered calls that parsed and ran / answered calls) and
# val-aux/<source>/episodes (512). A file there already is kept as metrics.1.jsonl (.2, ...).
#
# Resume across machines: only the adapter needs to survive (rank 16: 9.8 MB in bfloat16). After the run
# the script writes it from the last checkpoint (python3 -m agent_gym_verl.lora) to
# RUN_DIR/partN/adapter; the next part, on a fresh machine with the same MODEL_PATH export, continues it
# with ADAPTER=<that folder> (verl's actor_rollout_ref.model.lora_adapter_path; the optimizer restarts).
# PART picks the folders and data.seed, so each part draws its own order of training problems.
# `agent-gym eval AgentR1/GSM8KTool-v0 --model RUN_DIR/partN/adapter` plays the result anywhere (merged
# into its base, the MODEL_PATH written in adapter_config.json).
# LORA_RANK=0 trains all weights instead (LR 1e-5) and saves the bf16 actor too (269 MB,
# CKPT/global_step_N/actor/huggingface): the next part then takes MODEL_PATH=<that folder>, no ADAPTER.
#
# Settings (environment): STEPS (40 per part), BATCH (64 prompts) x N (8 episodes: GRPO groups),
# TEMPERATURE (0.8 for sampling), LR (1e-4 with LoRA), LORA_RANK/LORA_ALPHA (16/32), LORA_MERGE (True:
# vLLM gets the merged weights each step, no LoRA kernels), TEST_FREQ / SAVE_FREQ (5), GRAD_CKPT (False;
# True halves the actor's activation memory), EAGER (False: vLLM with CUDA graphs), DATA_SEED (=PART),
# ADAPTER_BASE_CHECK (1: refuse an ADAPTER trained on other weights than MODEL_PATH's).
# Any extra hydra option can be appended. AGENT_GYM_VERL_DRY_RUN=1 composes verl's config and stops.
#
# Arms of a comparison (examples/compare_step_vs_concat_gsm8k_tool.sh, compare_tree_vs_flat_gsm8k_tool.sh;
# docs/verl.md, "Comparing credit assignment"): the same recipe, seeds and held-out problems, one setting apart.
#   MODE=concat: concat mode (one sample per episode, tool tokens masked, stock verl's agent loop `agent_gym`)
#     instead of step mode; its rows come from `gsm8k_tool.py --mode concat` (DATA_DIR default
#     ~/data/gsm8k_tool_concat, VAL_DIR ~/data/gsm8k_tool_concat_val512), and a response is the whole
#     episode after the first prompt (1024 tokens; step mode: one turn, 256).
#   TREE_WIDTH=2 (step mode only): tree rollouts, per-state GRPO groups (+agent_gym.tree.*; docs/verl.md,
#     "Tree rollouts"), with TREE_BRANCH_AT (every), TREE_MAX_LEAVES (8), TREE_TOP_K (1, for entropy).
#     rollout.n (N) then counts trees per prompt, and ppo_mini_batch_size (MINI, default BATCH/2) rows x N.
#   RUN_DIR defaults to one folder per arm (~/runs/gsm8k_tool_learn, ..._concat, ..._tree), so arms never
#   share checkpoints. Every step logs agent_gym/generated_tokens (the tokens the policy sampled, env
#   tokens not counted): the cost axis of plot_heldout_accuracy.py --x tokens.
#
# Another env through the same recipe (examples/learn_smollm2-135m_searchqa.sh sets these, then runs this
# script): DATA_DIR, VAL_DIR, MODEL_PATH, RUN_DIR; MODEL_CMD, DATA_CMD, VAL_CMD (the commands that make a
# missing input, named in its message); PROMPT_LENGTH (1024: the longest context a step-mode turn sees);
# PROJECT and NAME (verl's project and experiment name stem); RECIPE (the script the next part's line names).
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-$HOME/models/smollm2-135m-tool}   # agent-gym export-model --model smollm2-135m-tool
MODE=${MODE:-step}
TREE_WIDTH=${TREE_WIDTH:-}                                   # empty: flat GRPO groups of N episodes
case "$MODE" in
  step) DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k_tool}; VAL_DIR=${VAL_DIR:-$HOME/data/gsm8k_tool_val512}
        RESPONSE_LENGTH=256; ARM=${TREE_WIDTH:+_tree} ;;                # the longest single turn
  concat) DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k_tool_concat}; VAL_DIR=${VAL_DIR:-$HOME/data/gsm8k_tool_concat_val512}
          RESPONSE_LENGTH=1024; ARM=_concat ;;                          # all turns and tool replies
  *) echo "MODE must be step or concat, got '$MODE'" >&2; exit 2 ;;
esac
[[ -z $TREE_WIDTH || $MODE == step ]] || { echo "TREE_WIDTH needs MODE=step: tree rollouts are a step-mode loop" >&2; exit 2; }
PART=${PART:-1}
ADAPTER=${ADAPTER:-}                                         # the previous part's adapter folder
STEPS=${STEPS:-40}
BATCH=${BATCH:-64}
N=${N:-8}
TEMPERATURE=${TEMPERATURE:-0.8}
LORA_RANK=${LORA_RANK:-16}
LORA_ALPHA=${LORA_ALPHA:-32}
LORA_MERGE=${LORA_MERGE:-True}
TEST_FREQ=${TEST_FREQ:-5}
SAVE_FREQ=${SAVE_FREQ:-5}
GRAD_CKPT=${GRAD_CKPT:-False}
EAGER=${EAGER:-False}
DATA_SEED=${DATA_SEED:-$PART}
MICRO=${MICRO:-32}
MINI=${MINI:-$((BATCH / 2))}   # prompts per optimizer step (verl counts N rows each): two updates per step
RUN_DIR=${RUN_DIR:-$HOME/runs/gsm8k_tool_learn$ARM}
PROMPT_LENGTH=${PROMPT_LENGTH:-1024}
PROJECT=${PROJECT:-agent-gym-gsm8k-tool}
NAME=${NAME:-smollm2_135m_learn}
MODEL_CMD=${MODEL_CMD:-"agent-gym export-model --model smollm2-135m-tool --out $MODEL_PATH"}
DATA_CMD=${DATA_CMD:-"python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir $DATA_DIR --mode $MODE"}
VAL_CMD=${VAL_CMD:-"agent-gym export-verl AgentR1/GSM8KTool-v0 --split test --limit 512 --out $VAL_DIR --mode $MODE"}
PART_DIR=$RUN_DIR/part$PART
CKPT_DIR=${CKPT_DIR:-$PART_DIR/ckpt}   # per part: a rerun of the same part resumes from its last checkpoint
case "$PART" in ''|*[!0-9]*) echo "PART must be a number, got '$PART'" >&2; exit 2 ;; esac
if [[ $LORA_RANK -gt 0 ]]; then LR=${LR:-1e-4}; else LR=${LR:-1e-5}; fi
cd "$(dirname "$0")/.." && source examples/_verl_common.sh
require_model "$MODEL_CMD"
require_input "$DATA_DIR/train.parquet" "$DATA_CMD"
require_input "$VAL_DIR/test.parquet" "$VAL_CMD"
# LoRA merged into vLLM's weights and LoRA-only checkpoints are verl 0.9's.
python3 - <<'PY' || exit 1
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    found = version("verl")
except PackageNotFoundError:
    found = None
if found is None or tuple(int(x) for x in found.split(".")[:2]) < (0, 9):
    sys.exit(f"learn_smollm2-135m_gsm8k_tool.sh needs verl >= 0.9 (found {found or 'none'}): python3 -m pip install -e 'trainers/verl[verl09]'")
PY

MODEL_ARGS=()
if [[ $LORA_RANK -gt 0 ]]; then
  MODEL_ARGS+=(
    actor_rollout_ref.model.lora_rank=$LORA_RANK
    actor_rollout_ref.model.lora_alpha=$LORA_ALPHA
    actor_rollout_ref.model.target_modules=all-linear
    actor_rollout_ref.model.lora.merge=$LORA_MERGE
    +actor_rollout_ref.actor.checkpoint.save_lora_only=True   # the adapter, not 540 MB of frozen weights
  )
  if [[ -n $ADAPTER ]]; then
    require_input "$ADAPTER/adapter_config.json" "python3 -m agent_gym_verl.lora <the previous part's CKPT_DIR> --out $ADAPTER --base $MODEL_PATH"
    MODEL_ARGS+=(actor_rollout_ref.model.lora_adapter_path="$ADAPTER")
    # the adapter only continues on the weights it was trained on (ADAPTER_BASE_CHECK=0 skips this)
    [[ -n ${AGENT_GYM_VERL_DRY_RUN:-} || ${ADAPTER_BASE_CHECK:-1} == 0 ]] || python3 -m agent_gym_verl.lora --check-base "$ADAPTER" --base "$MODEL_PATH"
  fi
else
  [[ -z $ADAPTER ]] || { echo "ADAPTER needs LORA_RANK > 0; with LORA_RANK=0 continue from MODEL_PATH=<the last part's huggingface folder>" >&2; exit 2; }
  MODEL_ARGS+=("actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]")
fi
[[ $EAGER == True ]] && MODEL_ARGS+=(actor_rollout_ref.rollout.enforce_eager=True)
if [[ -n $TREE_WIDTH ]]; then
  MODEL_ARGS+=(
    +agent_gym.tree.width=$TREE_WIDTH
    "+agent_gym.tree.branch_at=${TREE_BRANCH_AT:-every}"
    +agent_gym.tree.max_leaves=${TREE_MAX_LEAVES:-8}
    +agent_gym.tree.top_k=${TREE_TOP_K:-1}
  )
fi

if [[ -z ${AGENT_GYM_VERL_DRY_RUN:-} ]]; then
  export VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$PART_DIR/metrics.jsonl}
  mkdir -p "$(dirname "$VERL_FILE_LOGGER_PATH")"
  if [[ -s $VERL_FILE_LOGGER_PATH ]]; then   # verl truncates it: keep an earlier try's metrics
    k=1; while [[ -e ${VERL_FILE_LOGGER_PATH%.jsonl}.$k.jsonl ]]; do k=$((k + 1)); done
    mv "$VERL_FILE_LOGGER_PATH" "${VERL_FILE_LOGGER_PATH%.jsonl}.$k.jsonl"
  fi
fi
export VLLM_USE_FLASHINFER_SAMPLER=0 HYDRA_FULL_ERROR=1

python3 -m agent_gym_verl.main_ppo \
    algorithm.adv_estimator=grpo `# each trajectory's return normalised within its group of N` \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$VAL_DIR/test.parquet" \
    data.train_batch_size=$BATCH \
    data.seed=$DATA_SEED `# the order training problems are drawn in; one per part` \
    data.max_prompt_length=$PROMPT_LENGTH `# step mode: the longest context a turn sees; concat: the first prompt` \
    data.max_response_length=$RESPONSE_LENGTH \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=False `# no flash-attn: packed sdpa would attend across sequences` \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.model.enable_gradient_checkpointing=$GRAD_CKPT \
    actor_rollout_ref.actor.optim.lr=$LR \
    actor_rollout_ref.actor.ppo_mini_batch_size=$MINI \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.use_torch_compile=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.n=$N \
    actor_rollout_ref.rollout.temperature=$TEMPERATURE \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 `# greedy validation` \
    actor_rollout_ref.rollout.val_kwargs.do_sample=False \
    actor_rollout_ref.rollout.val_kwargs.n=1 \
    actor_rollout_ref.rollout.prompt_length=$PROMPT_LENGTH \
    actor_rollout_ref.rollout.response_length=$RESPONSE_LENGTH \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOP_CONFIG" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' \
    trainer.project_name=$PROJECT \
    trainer.experiment_name=${NAME}${ARM}_part$PART \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.val_before_train=True `# step 0: the part's start, on the same 512 problems` \
    trainer.test_freq=$TEST_FREQ `# and the last step, always` \
    trainer.save_freq=$SAVE_FREQ \
    trainer.max_actor_ckpt_to_keep=2 \
    trainer.default_local_dir="$CKPT_DIR" \
    trainer.resume_mode=auto \
    trainer.total_training_steps=$STEPS \
    "${MODEL_ARGS[@]}" "${VERL_VERSION_ARGS[@]}" "$@"

[[ -n ${AGENT_GYM_VERL_DRY_RUN:-} ]] && exit 0
SAME_ARM=$([[ $MODE == step ]] || echo "MODE=$MODE ")${TREE_WIDTH:+TREE_WIDTH=$TREE_WIDTH }   # the next part's arm
if [[ $LORA_RANK -gt 0 ]]; then
  python3 -m agent_gym_verl.lora "$CKPT_DIR" --out "$PART_DIR/adapter" --base "$MODEL_PATH"
  { set +x; } 2>/dev/null
  echo "next part: ${SAME_ARM}PART=$((PART + 1)) ADAPTER=$PART_DIR/adapter bash ${RECIPE:-examples/learn_smollm2-135m_gsm8k_tool.sh}"
else
  { set +x; } 2>/dev/null
  echo "next part: ${SAME_ARM}PART=$((PART + 1)) LORA_RANK=0 MODEL_PATH=$CKPT_DIR/global_step_$(cat "$CKPT_DIR/latest_checkpointed_iteration.txt")/actor/huggingface bash ${RECIPE:-examples/learn_smollm2-135m_gsm8k_tool.sh}"
fi
