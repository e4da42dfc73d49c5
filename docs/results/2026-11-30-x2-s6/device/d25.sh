#!/bin/bash
# Call Y (fresh machine, after the stash): the benchmark's new untimed warm-up env run and its
# same-parallelism baseline (--raw-turns-capped). GPU1: the 7.4B random-weight model, 256 episodes, one
# repeat (call V's setting); GPU0: the 135M random-weight model, 512 episodes, two repeats.
date -u
python3 .gpu/bin/mkdummy.py /root/d135m 576 1536 30 9 3 tie
python3 .gpu/bin/mkdummy.py /root/d8b 4096 14336 32 32 8
L=$(bash .gpu/bin/left.sh 300)
B='benchmarks/rollout_throughput.py --env AgentR1/FrozenLake-v0 --max-new-tokens 128 --gc-freeze --raw-turns-capped --engine-kwargs {"load_format":"dummy"}'
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --model /root/d135m --episodes 512 --concurrency 512 --repeats 2 --gpu-memory-utilization 0.3 --out $OUT/tp_d135m_capped.json > $OUT/tp_d135m_capped.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --model /root/d8b --episodes 256 --concurrency 256 --repeats 1 --gpu-memory-utilization 0.9 --out $OUT/tp_d8b_capped.json > $OUT/tp_d8b_capped.log 2>&1
echo "8b exit $? at $(( $(date +%s) - JOB_START )) s"; wait; echo "135m done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_d135m_capped tp_d8b_capped; do echo "== $f"; grep -E "^repeat|Error|error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -9; done
cd $OUT && tar czf p3_y.tgz tp_*.json tp_*.log && rm -f tp_*.json tp_*.log
