#!/bin/bash
# Seventh session, call Z3 (fresh machine): P3's usual real setting (GSM8KTool, the warm-started SmolLM2,
# 512 episodes, 256 tokens a turn) with the same-parallelism baseline (--raw-turns-capped), 3 repeats;
# GPU0 as usual (two threads), GPU1 --one-loop. The SFT warm start runs first on GPU0.
date -u
timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
L=$(bash .gpu/bin/left.sh 585)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 3 --gc-freeze --raw-turns-capped --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --out $OUT/tp_sft_threads.json > $OUT/tp_sft_threads.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --one-loop --out $OUT/tp_sft_oneloop.json > $OUT/tp_sft_oneloop.log 2>&1
echo "one-loop exit $? at $(( $(date +%s) - JOB_START )) s"; wait; echo "threads done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_sft_threads tp_sft_oneloop; do echo "== $f"; grep -E "^repeat|Error|error" $OUT/$f.log | grep -v moe_C | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -8; done
cd $OUT && tar czf p3_z3.tgz sft.log tp_*.json tp_*.log && rm -f sft.log tp_*.json tp_*.log
