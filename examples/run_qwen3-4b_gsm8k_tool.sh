#!/bin/bash
# GSM8K with a calculator tool, multi-step, step-level GRPO (Agent-R1's run_qwen3-4b_gsm8k_tool.sh on
# agent-gym).
#
#   python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir ~/data/gsm8k_tool
#   bash examples/run_qwen3-4b_gsm8k_tool.sh [more hydra overrides]
#
# Step mode: every assistant turn of an episode is its own training sample (prompt = the context that
# turn saw, response = what it generated), and GRPO normalises each trajectory's return within its
# prompt group once, giving every step of the trajectory that advantage (docs/verl.md). Each row's
# agent_name (agent_gym_step) picks the mode; the env (AgentR1/GSM8KTool-v0, up to 5 turns) owns the
# tool, the prompt and the reward.
#
# GPUs: 2 x 80 GB (A100/H100). Expected memory per GPU: actor 4B (FSDP, sharded over 2) ~32 GB
# params+grads+Adam + activations for micro-batches of 8 step samples of up to 4096+2048 tokens with
# gradient checkpointing ~15-25 GB; vLLM 0.6 of the GPU while generating (asleep while training).
# One training step holds up to 256 prompts x 5 rollouts x 5 turns = 6400 step samples.
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}   # any HF causal LM path or hub name
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k_tool}
cd "$(dirname "$0")/.." && source examples/_verl_common.sh
require_input "$DATA_DIR/train.parquet" "python3 examples/data_preprocess/gsm8k_tool.py --local_save_dir $DATA_DIR"

export VLLM_USE_V1=1

python3 -m agent_gym_verl.main_ppo \
    algorithm.adv_estimator=grpo `# trajectory-aware in step mode: one trajectory, one group member` \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=256 \
    data.max_prompt_length=4096 `# step mode: the longest context a turn may see` \
    data.max_response_length=2048 `# step mode: the longest single turn` \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 `# rows per optimizer step x n; step samples here` \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.prompt_length=4096 \
    actor_rollout_ref.rollout.response_length=2048 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOP_CONFIG" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger='["console"]' \
    trainer.project_name=agent-gym-gsm8k-tool \
    trainer.experiment_name='qwen3_4b_step_grpo' \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=5 \
    trainer.total_epochs=15 \
    "${VERL_VERSION_ARGS[@]}" "$@"
