#!/bin/bash
# Call B (nvidia-h200-x2): GSM8KTool-v0 in step mode with the warm-started SmolLM2 on TWO GPUs (FSDP over 2,
# two vLLM replicas): trainer.n_gpus_per_node=2 is the only change from the one-GPU command.
date -u; ls /root/smollm2_sft
L=$(bash .gpu/bin/left.sh 575)
VERL_FILE_LOGGER_PATH=$OUT/gsm8k_tool_step_2gpu.jsonl MODE=step MODEL_PATH=/root/smollm2_sft DATA_DIR=/root/data/gsm8k_tool_step STEPS=5 \
  timeout -k 10 $L bash examples/run_smollm2-135m_gsm8k_tool.sh trainer.n_gpus_per_node=2 data.val_max_samples=256 \
  trainer.test_freq=-1 actor_rollout_ref.actor.optim.lr=1e-5 > $OUT/gsm8k_tool_step_2gpu.log 2>&1
echo "exit $?"; date -u; bash .gpu/bin/cleanup.sh
bash .gpu/bin/steplines.sh $OUT/gsm8k_tool_step_2gpu.log "val-.*/(reward|acc)|critic/score/mean|agent_gym/|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated|response_length/mean" | tail -120
grep -E "Traceback|Error:" $OUT/gsm8k_tool_step_2gpu.log | tail -8
