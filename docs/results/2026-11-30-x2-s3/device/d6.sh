#!/bin/bash
# Call F (the same nvidia-h200-x2, warm): the sandbox benchmark on 32 cores with the warm pool sized to the
# episodes of each process (--prefork 32), then GSM8KTool-v0 in step mode on TWO GPUs (MICRO=16).
date -u
timeout 150 python3 benchmarks/sandbox_throughput.py --workers 16 --prefork 32 --serial-calls 100 > $OUT/sandbox_w16_p32.log 2>&1
echo "sandbox exit $?"; grep -E "^sleeping|^code|^calc|per episode|sleep cost|isolation" $OUT/sandbox_w16_p32.log
timeout 100 python3 benchmarks/sandbox_throughput.py --workers 16 --prefork 32 --gc-freeze --no-baselines --serial-calls 0 > $OUT/sandbox_w16_p32_gcfreeze.log 2>&1
echo "sandbox exit $?"; grep -E "^sleeping|per episode" $OUT/sandbox_w16_p32_gcfreeze.log
L=$(bash .gpu/bin/left.sh 585)
VERL_FILE_LOGGER_PATH=$OUT/gsm8k_tool_step_2gpu.jsonl MODE=step MICRO=16 MODEL_PATH=/root/smollm2_sft DATA_DIR=/root/data/gsm8k_tool_step STEPS=4 \
  timeout -k 10 $L bash examples/run_smollm2-135m_gsm8k_tool.sh trainer.n_gpus_per_node=2 data.val_max_samples=128 trainer.test_freq=-1 \
  actor_rollout_ref.actor.optim.lr=1e-5 > $OUT/gsm8k_tool_step_2gpu.log 2>&1
echo "step 2gpu exit $?"; date -u; bash .gpu/bin/cleanup.sh
bash .gpu/bin/steplines.sh $OUT/gsm8k_tool_step_2gpu.log "val-.*/(reward|acc)|critic/score/mean|agent_gym/|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated" | tail -90
grep -E "Traceback|Error:" $OUT/gsm8k_tool_step_2gpu.log | tail -8
