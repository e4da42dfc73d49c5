#!/bin/bash
# Call A (nvidia-h200-x2): issue #4's sandbox benchmark on the host's cores, then the actor-update A/B:
# the same Countdown step-mode run on GPU0 with verl's own token log-probs (VERL_USE_EXTERNAL_MODULES
# empty) and on GPU1 with agent_gym_verl.fast_logprobs (the script default); beside them, on GPU0 during
# verl's start-up, the GSM8K tool-use warm start for calls B and C.
date -u
timeout 120 python3 benchmarks/sandbox_throughput.py --workers 16 --tokenizer /root/smollm2 > $OUT/sandbox_w16.log 2>&1; echo "sandbox w16 exit $?"
timeout 90 python3 benchmarks/sandbox_throughput.py --workers 32 --tokenizer /root/smollm2 --no-baselines > $OUT/sandbox_w32.log 2>&1; echo "sandbox w32 exit $?"
(CUDA_VISIBLE_DEVICES=0 timeout 240 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
   --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1; echo "sft exit $?" >> $OUT/sft.log
 cp /root/smollm2_sft/sft_summary.json $OUT/ 2>/dev/null) &
L=$(bash .gpu/bin/left.sh 570)
run_cd() {  # tag gpu external-modules
  VERL_FILE_LOGGER_PATH=$OUT/countdown_$1.jsonl VERL_USE_EXTERNAL_MODULES=$3 CUDA_VISIBLE_DEVICES=$2 \
  MODEL_PATH=/root/smollm2 DATA_DIR=/root/data/countdown CKPT_DIR=/root/ckpt/cd_$1 STEPS=6 \
    timeout -k 10 $L bash examples/run_smollm2-135m_countdown.sh trainer.val_before_train=False trainer.test_freq=-1 \
    trainer.save_freq=-1 trainer.resume_mode=disable > $OUT/countdown_$1.log 2>&1
  echo "countdown $1 exit $?"
}
run_cd verl 0 "" &
sleep 20
run_cd fast 1 agent_gym_verl.fast_logprobs
wait; date -u; bash .gpu/bin/cleanup.sh
tail -4 $OUT/sft.log; grep -E "^\|" $OUT/sandbox_w16.log | head -40; grep -E "^\|" $OUT/sandbox_w32.log | head -20
for t in verl fast; do echo "== $t"; grep -c "fast_logprobs" $OUT/countdown_$t.log
  bash .gpu/bin/steplines.sh $OUT/countdown_$t.log "critic/score/mean|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated|actor/entropy|actor/pg_loss" | tail -60
  grep -E "Traceback|Error:" $OUT/countdown_$t.log | tail -5; done
