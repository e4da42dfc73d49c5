#!/bin/bash
# Call D (fresh nvidia-h200-x2): the Countdown step-mode run of call A (fast log-probs) on TWO GPUs: FSDP over
# 2 GPUs and two vLLM replicas; trainer.n_gpus_per_node=2 is the only change.
date -u
L=$(bash .gpu/bin/left.sh 470)
VERL_FILE_LOGGER_PATH=$OUT/countdown_2gpu.jsonl MODEL_PATH=/root/smollm2 DATA_DIR=/root/data/countdown CKPT_DIR=/root/ckpt/cd_2gpu STEPS=8 \
  timeout -k 10 $L bash examples/run_smollm2-135m_countdown.sh trainer.n_gpus_per_node=2 trainer.val_before_train=False trainer.test_freq=-1 \
  trainer.save_freq=-1 trainer.resume_mode=disable > $OUT/countdown_2gpu.log 2>&1
echo "exit $?"; date -u; bash .gpu/bin/cleanup.sh
bash .gpu/bin/steplines.sh $OUT/countdown_2gpu.log "critic/score/mean|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated|agent_gym/step/(samples|pad_rows)" | tail -80
grep -E "Traceback|Error:" $OUT/countdown_2gpu.log | tail -8
