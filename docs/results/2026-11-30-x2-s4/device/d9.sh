#!/bin/bash
# Call J (fresh nvidia-h200-x2): P3 gc A/B with py-spy on GPU0 after the SFT warm start (the host otherwise idle).
date -u
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
which py-spy
L=$(bash .gpu/bin/left.sh 585)
CUDA_VISIBLE_DEVICES=0 timeout $L python3 benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 \
  --max-new-tokens 256 --repeats 4 --gc-ab --py-spy $OUT/pyspy_env --gpu-memory-utilization 0.3 \
  --out $OUT/throughput_gc_ab.json > $OUT/throughput_gc_ab.log 2>&1
echo "throughput exit $? at $(( $(date +%s) - JOB_START )) s"; date -u
grep -v "it/s\]\|ep/s\]" $OUT/throughput_gc_ab.log | tail -24
ls -la $OUT
