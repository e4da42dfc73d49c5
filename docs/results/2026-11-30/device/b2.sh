#!/bin/bash
# Call B: the Countdown learning run (faster config) with the P3 throughput benchmark running beside it.
date -u
(timeout -k 10 300 python3 benchmarks/rollout_throughput.py --model /root/smollm2 --episodes 512 --concurrency 512 \
  --max-new-tokens 256 --repeats 2 --gpu-memory-utilization 0.2 --out $OUT/throughput_gsm8k_tool.json > $OUT/throughput_gsm8k_tool.log 2>&1; echo "throughput exit $?" >> $OUT/throughput_gsm8k_tool.log) &
sleep 45
export VERL_FILE_LOGGER_PATH=$OUT/countdown_metrics_2.jsonl
MODEL_PATH=/root/smollm2 DATA_DIR=/root/data/countdown CKPT_DIR=/root/ckpt/countdown2 STEPS=60 \
  timeout -k 10 ${LIMIT:-480} bash examples/run_smollm2-135m_countdown.sh data.train_batch_size=32 \
  actor_rollout_ref.actor.use_torch_compile=False \
  actor_rollout_ref.rollout.enforce_eager=True actor_rollout_ref.actor.ppo_mini_batch_size=16 > $OUT/countdown_2.log 2>&1
echo "exit $?"; date -u; wait; bash .gpu/bin/cleanup.sh
grep -v "it/s\]\|ep/s\]" $OUT/throughput_gsm8k_tool.log | tail -14
bash .gpu/bin/steplines.sh $OUT/countdown_2.log "val-core/.*(reward|acc)/mean@|critic/score/mean|timing_s/(step|gen|old_log_prob|update_actor|testing):|timing_per_token_ms/update_actor" | tail -150
grep -E "Traceback|Error:" $OUT/countdown_2.log | tail -8; ls /root/ckpt/countdown2
