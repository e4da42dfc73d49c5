#!/bin/bash
# Call W (fresh machine): the collector's cost in P3. 135M random weights, FrozenLake, 512 episodes (call V's
# GPU0 run) on both GPUs at once: GPU0 as in call V (gc.freeze() after start-up), GPU1 the same with the
# collector off during each timed run (--gc-off: env and raw runs alike; one collection after each, untimed).
date -u
python3 .gpu/bin/mkdummy.py /root/d135m 576 1536 30 9 3 tie
python3 .gpu/bin/mkdummy.py /root/d1b 2048 8192 16 32 8 tie
python3 .gpu/bin/mkdummy.py /root/d8b 4096 14336 32 32 8
L=$(bash .gpu/bin/left.sh 540)
B='benchmarks/rollout_throughput.py --env AgentR1/FrozenLake-v0 --max-new-tokens 128 --repeats 2 --gc-freeze --engine-kwargs {"load_format":"dummy"} --model /root/d135m --episodes 512 --concurrency 512 --gpu-memory-utilization 0.3'
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --out $OUT/tp_d135m_gcon.json > $OUT/tp_d135m_gcon.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --gc-off --out $OUT/tp_d135m_gcoff.json > $OUT/tp_d135m_gcoff.log 2>&1
echo "gc off exit $? at $(( $(date +%s) - JOB_START )) s"; wait; echo "gc on done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_d135m_gcon tp_d135m_gcoff; do echo "== $f"; grep -E "^repeat|Error|error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -8; done
cd $OUT && tar czf p3_w.tgz tp_*.json tp_*.log && rm -f tp_*.json tp_*.log
