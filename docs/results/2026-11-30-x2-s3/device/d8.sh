#!/bin/bash
# Call I (the same machine, warm): GSM8KTool-v0 step mode on one GPU again, now with gradient checkpointing off
# (as it ran, a line `enable_gradient_checkpointing=False` in the script; now GRAD_CKPT=False), no validation,
# 3 steps: the update time against call E's.
date -u
VERL_FILE_LOGGER_PATH=$OUT/gsm8k_tool_step_nockpt.jsonl CUDA_VISIBLE_DEVICES=0 MODE=step MODEL_PATH=/root/smollm2_sft DATA_DIR=/root/data/gsm8k_tool_step STEPS=3 \
  timeout -k 5 $(bash .gpu/bin/left.sh 385) bash examples/run_smollm2-135m_gsm8k_tool.sh trainer.val_before_train=False trainer.test_freq=-1 \
  actor_rollout_ref.actor.optim.lr=1e-5 > $OUT/gsm8k_tool_step_nockpt.log 2>&1
echo "exit $?"; date -u
bash .gpu/bin/steplines.sh $OUT/gsm8k_tool_step_nockpt.log "agent_gym/(turns|tool_calls)/mean|agent_gym/step/samples|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor:|max_memory_allocated" | tail -40
