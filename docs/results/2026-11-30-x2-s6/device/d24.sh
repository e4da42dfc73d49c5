#!/bin/bash
# Call X (same machine, warm): the SFT warm start on GPU0 while GPU1 runs the 8B random-weight model with the
# collector off (call V's GPU1 run with --gc-off); then P3's usual setting (GSM8KTool, the warm-started
# SmolLM2, 512 episodes, 256 tokens a turn) with the collector as usual (GPU0) and off (GPU1).
date -u
B8='benchmarks/rollout_throughput.py --env AgentR1/FrozenLake-v0 --max-new-tokens 128 --repeats 2 --gc-freeze --gc-off --engine-kwargs {"load_format":"dummy"} --model /root/d8b --episodes 256 --concurrency 256 --gpu-memory-utilization 0.9'
CUDA_VISIBLE_DEVICES=1 timeout 280 python3 $B8 --out $OUT/tp_d8b_gcoff.json > $OUT/tp_d8b_gcoff.log 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
wait; echo "8b done at $(( $(date +%s) - JOB_START )) s"
L=$(bash .gpu/bin/left.sh 575)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 3 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --out $OUT/tp_sft_gcon.json > $OUT/tp_sft_gcon.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --gc-off --out $OUT/tp_sft_gcoff.json > $OUT/tp_sft_gcoff.log 2>&1
echo "gc off exit $? at $(( $(date +%s) - JOB_START )) s"; wait; date -u
for f in tp_d8b_gcoff tp_sft_gcon tp_sft_gcoff; do echo "== $f"; grep -E "^repeat|Error|error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -8; done
cd $OUT && tar czf p3_x.tgz sft.log tp_*.json tp_*.log && rm -f sft.log tp_*.json tp_*.log
