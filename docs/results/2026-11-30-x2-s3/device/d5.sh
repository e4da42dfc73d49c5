#!/bin/bash
# Call E (nvidia-h200-x2, 2026-11-30 third session): the tool-use warm start on GPU0, then GSM8KTool-v0 in
# STEP mode with the warm-started model on ONE GPU (GPU0); meanwhile on GPU1 the Countdown run of call A
# with verl's own fused log-prob kernels (use_fused_kernels, torch backend) instead of fast_logprobs.
date -u
L=$(bash .gpu/bin/left.sh 585)
(CUDA_VISIBLE_DEVICES=1 VERL_USE_EXTERNAL_MODULES= VERL_FILE_LOGGER_PATH=$OUT/countdown_fused.jsonl MODEL_PATH=/root/smollm2 \
   DATA_DIR=/root/data/countdown CKPT_DIR=/root/ckpt/cd_fused STEPS=6 timeout -k 10 $(( L - 15 )) bash examples/run_smollm2-135m_countdown.sh \
   actor_rollout_ref.model.use_fused_kernels=True actor_rollout_ref.model.fused_kernel_options.impl_backend=torch \
   trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=-1 trainer.resume_mode=disable > $OUT/countdown_fused.log 2>&1
 echo "fused exit $?" >> $OUT/countdown_fused.log) &
CUDA_VISIBLE_DEVICES=0 timeout 180 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -3 $OUT/sft.log
L=$(bash .gpu/bin/left.sh 585)
VERL_FILE_LOGGER_PATH=$OUT/gsm8k_tool_step.jsonl CUDA_VISIBLE_DEVICES=0 MODE=step MODEL_PATH=/root/smollm2_sft DATA_DIR=/root/data/gsm8k_tool_step STEPS=4 \
  timeout -k 10 $L bash examples/run_smollm2-135m_gsm8k_tool.sh data.val_max_samples=128 trainer.test_freq=-1 \
  actor_rollout_ref.actor.optim.lr=1e-5 > $OUT/gsm8k_tool_step.log 2>&1
echo "step exit $?"; wait; date -u; bash .gpu/bin/cleanup.sh
bash .gpu/bin/steplines.sh $OUT/gsm8k_tool_step.log "val-.*/(reward|acc)|critic/score/mean|agent_gym/|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated|response_length/mean" | tail -100
grep -E "Traceback|Error:|exceeds|refuse" $OUT/gsm8k_tool_step.log | tail -8
bash .gpu/bin/steplines.sh $OUT/countdown_fused.log "critic/score/mean|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated" | tail -50
grep -E "Traceback|Error:|fused|Fused" $OUT/countdown_fused.log | tail -8; tail -1 $OUT/countdown_fused.log
