#!/bin/bash
# Call H (fresh nvidia-h200-x2): P3 throughput with multi-turn tool use on an otherwise idle host (the
# warm-started model, rebuilt first on GPU0); meanwhile on GPU1 a probe of one actor micro-batch outside verl.
date -u
(CUDA_VISIBLE_DEVICES=1 timeout 170 python3 .gpu/bin/update_bench.py /root/smollm2 > $OUT/update_bench.log 2>&1; echo "bench exit $?" >> $OUT/update_bench.log) &
CUDA_VISIBLE_DEVICES=0 timeout 180 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
wait; grep -v Warning $OUT/update_bench.log | tail -14
L=$(bash .gpu/bin/left.sh 585)
CUDA_VISIBLE_DEVICES=0 timeout $L python3 benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 \
  --max-new-tokens 256 --repeats 3 --gpu-memory-utilization 0.3 --out $OUT/throughput_gsm8k_tool_sft_idle.json > $OUT/throughput_gsm8k_tool_sft_idle.log 2>&1
echo "throughput exit $?"; date -u
grep -v "it/s\]\|ep/s\]" $OUT/throughput_gsm8k_tool_sft_idle.log | tail -20
