#!/bin/bash
# Call V (after the stash, fresh machine): P3 on FrozenLake with random-weight models of three sizes
# (vLLM load_format=dummy: SmolLM2's tokenizer and config with other sizes). Random tokens never make a
# valid move, so every episode runs FrozenLake's 8 turns of (almost always) 128 tokens each: the same token
# pattern for every size. GPU0: 135M (SmolLM2's own shape), 512 episodes; GPU1: 8B (Llama-3.1-8B's shape),
# 256 episodes (512 x ~1.6k tokens of its KV cache would not fit).
date -u
python3 .gpu/bin/mkdummy.py /root/d135m 576 1536 30 9 3 tie
python3 .gpu/bin/mkdummy.py /root/d1b 2048 8192 16 32 8 tie
python3 .gpu/bin/mkdummy.py /root/d8b 4096 14336 32 32 8
L=$(bash .gpu/bin/left.sh 560)
B='benchmarks/rollout_throughput.py --env AgentR1/FrozenLake-v0 --max-new-tokens 128 --repeats 2 --gc-freeze --engine-kwargs {"load_format":"dummy"}'
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --model /root/d135m --episodes 512 --concurrency 512 --gpu-memory-utilization 0.3 --out $OUT/tp_d135m_512.json > $OUT/tp_d135m_512.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --model /root/d8b --episodes 256 --concurrency 256 --gpu-memory-utilization 0.9 --out $OUT/tp_d8b_256.json > $OUT/tp_d8b_256.log 2>&1
echo "8b exit $? at $(( $(date +%s) - JOB_START )) s"; wait; echo "135m done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_d135m_512 tp_d8b_256; do echo "== $f"; grep -E "^repeat|Error|error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -9; done
cd $OUT && tar czf p3_v.tgz tp_*.json tp_*.log && rm -f tp_*.json tp_*.log
