#!/bin/bash
# Call N (same machine, warm, SFT model still in /root): with vLLM's offline-batch defaults, the frontend in
# the env loop's process (GPU0) against in a child process (VLLMProcessPolicy, GPU1), both at once.
date -u
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 2 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout 215 python3 $B --out $OUT/tp_llm_class_inproc.json > $OUT/tp_llm_class_inproc.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 215 python3 $B --engine-process --out $OUT/tp_llm_class_proc.json > $OUT/tp_llm_class_proc.log 2>&1
echo "proc exit $? at $(( $(date +%s) - JOB_START )) s"; wait; date -u
for f in tp_llm_class_inproc tp_llm_class_proc; do echo "== $f"; grep -E "^repeat" $OUT/$f.log; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -6; done
cd $OUT && tar czf p3_n.tgz tp_*.json tp_*.log && rm -f tp_*.json tp_*.log
