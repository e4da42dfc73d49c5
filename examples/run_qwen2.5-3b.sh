#!/bin/bash
# GSM8K, single step, GRPO: the sanity check (Agent-R1's run_qwen2.5-3b.sh on agent-gym).
#
#   python3 examples/data_preprocess/gsm8k.py --local_save_dir ~/data/gsm8k
#   bash examples/run_qwen2.5-3b.sh [more hydra overrides]
#
# GPUs: 2 x 80 GB (A100/H100). Expected memory per GPU: actor (FSDP, bf16 params, fp32 Adam, sharded
# over 2 GPUs) ~25 GB + activations (gradient checkpointing) ~10-20 GB; vLLM takes 0.6 of the GPU while
# generating and is put to sleep for training; the reference model is offloaded to CPU.
# The env scores every answer (reward = 1 for the right number after ####): no reward function is set.
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}   # any HF causal LM path or hub name
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
cd "$(dirname "$0")/.." && source examples/_verl_common.sh
require_input "$DATA_DIR/train.parquet" "python3 examples/data_preprocess/gsm8k.py --local_save_dir $DATA_DIR"

export VLLM_USE_V1=1

# Stock verl runs concat mode (rows with agent_name=agent_gym); agent_gym_verl.main_ppo is verl's
# entry point plus the agent-gym trainer extension, which also logs the env metrics (agent_gym/*).
python3 -m agent_gym_verl.main_ppo \
    algorithm.adv_estimator=grpo `# group-relative advantages over the n rollouts of a prompt` \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=1024 `# prompts per training step` \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    data.return_raw_chat=True `# the agent loop reads the row's chat and env fields` \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_mini_batch_size=128 `# prompts per optimizer step (x n rollouts)` \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async `# agent loops run on verl's async rollout` \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=5 `# rollouts per prompt (the GRPO group)` \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOP_CONFIG" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=40 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger='["console"]' \
    trainer.project_name=agent-gym-gsm8k \
    trainer.experiment_name='qwen2_5_3b_grpo' \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=20 \
    trainer.total_epochs=15 \
    "${VERL_VERSION_ARGS[@]}" "$@"
