#!/bin/bash
# Call A: the Countdown learning run (step mode), checkpoints in /root/ckpt for a resumed call.
date -u
export VERL_FILE_LOGGER_PATH=$OUT/countdown_metrics_${PART:-1}.jsonl
MODEL_PATH=/root/smollm2 DATA_DIR=/root/data/countdown CKPT_DIR=/root/ckpt/countdown STEPS=${STEPS:-60} \
  timeout -k 10 ${LIMIT:-520} bash examples/run_smollm2-135m_countdown.sh > $OUT/countdown_${PART:-1}.log 2>&1
echo "exit $?"; date -u; bash .gpu/bin/cleanup.sh
bash .gpu/bin/steplines.sh $OUT/countdown_${PART:-1}.log "val-core/.*reward/mean@|critic/score/mean|timing_s/(step|gen|old_log_prob|update_actor|testing):|agent_gym/step/padding_fraction:|response_length/mean" | tail -150
grep -E "Error|error" $OUT/countdown_${PART:-1}.log | grep -v "UserWarning\|DeprecationWarning" | tail -15
ls /root/ckpt/countdown 2>/dev/null
