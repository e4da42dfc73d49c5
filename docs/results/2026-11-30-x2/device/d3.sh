#!/bin/bash
# Call C (nvidia-h200-x2): GSM8KTool-v0 in concat mode with the warm-started SmolLM2 on GPU0; on GPU1 the
# warm-started model's tool use (agent-gym eval, vLLM) and P3 throughput with multi-turn tool episodes.
date -u
L=$(bash .gpu/bin/left.sh 575)
(CUDA_VISIBLE_DEVICES=1 timeout 200 agent-gym eval AgentR1/GSM8KTool-v0 --backend vllm --model /root/smollm2_sft --episodes 512 \
   --batch-size 512 --max-new-tokens 256 --gpu-memory-utilization 0.3 --out $OUT/eval_sft.jsonl --json --no-progress > $OUT/eval_sft.json 2> $OUT/eval_sft.err
 echo "eval exit $?" >> $OUT/eval_sft.err
 CUDA_VISIBLE_DEVICES=1 timeout $(( L - 210 )) python3 benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 \
   --max-new-tokens 256 --repeats 2 --gpu-memory-utilization 0.3 --out $OUT/throughput_gsm8k_tool_sft.json > $OUT/throughput_gsm8k_tool_sft.log 2>&1
 echo "throughput exit $?" >> $OUT/throughput_gsm8k_tool_sft.log) &
VERL_FILE_LOGGER_PATH=$OUT/gsm8k_tool_concat.jsonl CUDA_VISIBLE_DEVICES=0 MODE=concat MODEL_PATH=/root/smollm2_sft DATA_DIR=/root/data/gsm8k_tool_concat STEPS=5 \
  timeout -k 10 $L bash examples/run_smollm2-135m_gsm8k_tool.sh data.val_max_samples=256 trainer.test_freq=-1 \
  actor_rollout_ref.actor.optim.lr=1e-5 > $OUT/gsm8k_tool_concat.log 2>&1
echo "exit $?"; wait; date -u; bash .gpu/bin/cleanup.sh
cat $OUT/eval_sft.json; tail -3 $OUT/eval_sft.err
grep -v "it/s\]\|ep/s\]" $OUT/throughput_gsm8k_tool_sft.log | tail -16
bash .gpu/bin/steplines.sh $OUT/gsm8k_tool_concat.log "val-.*/(reward|acc)|critic/score/mean|agent_gym/|timing_s/(step|gen|old_log_prob|update_actor):|perf/mfu/actor|max_memory_allocated|response_length/mean" | tail -120
grep -E "Traceback|Error:" $OUT/gsm8k_tool_concat.log | tail -8
