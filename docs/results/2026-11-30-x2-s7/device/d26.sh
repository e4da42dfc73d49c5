#!/bin/bash
# Seventh session, call Z1: the hand-over between threads per request, and --one-loop (the env loop
# and vLLM's frontend on one event loop). Both GPUs run the 7.4B random-weight model on FrozenLake
# (call Y's setting) with the capped baseline, 3 repeats: GPU0 as before (two threads), GPU1 --one-loop.
date -u
python3 .gpu/bin/mkdummy.py /root/d8b 4096 14336 32 32 8
L=$(bash .gpu/bin/left.sh 570)
B='benchmarks/rollout_throughput.py --env AgentR1/FrozenLake-v0 --max-new-tokens 128 --gc-freeze --raw-turns-capped --engine-kwargs {"load_format":"dummy"} --model /root/d8b --episodes 256 --concurrency 256 --repeats 3 --gpu-memory-utilization 0.9'
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --out $OUT/tp_d8b_threads.json > $OUT/tp_d8b_threads.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --one-loop --out $OUT/tp_d8b_oneloop.json > $OUT/tp_d8b_oneloop.log 2>&1
echo "one-loop exit $? at $(( $(date +%s) - JOB_START )) s"; wait; echo "threads done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_d8b_threads tp_d8b_oneloop; do echo "== $f"; grep -E "^repeat|Error|error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -9; done
cd $OUT && tar czf p3_z1.tgz tp_*.json tp_*.log && rm -f tp_*.json tp_*.log
