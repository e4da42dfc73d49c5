#!/bin/bash
# Call R (same machine, warm, right after Q): no log-probs at all on GPU0 (what log-prob handling costs at
# most) against flat log-probs under py-spy on GPU1 (where the frontend's and the engine's time goes).
date -u
if ! command -v py-spy; then
  python3 -m zipfile -e .gpu/wheels/py_spy-*.whl /tmp/pyspy && install -m 755 /tmp/pyspy/py_spy-*.data/scripts/py-spy /tmp/site/bin/py-spy
fi
L=$(bash .gpu/bin/left.sh 300)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 3 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --no-logprobs --out $OUT/tp_nolp.json > $OUT/tp_nolp.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --py-spy $OUT/pyspy_flat --out $OUT/tp_flat_pyspy.json > $OUT/tp_flat_pyspy.log 2>&1
echo "pyspy exit $? at $(( $(date +%s) - JOB_START )) s"; wait; date -u
for f in tp_nolp tp_flat_pyspy; do echo "== $f"; grep -E "^repeat|Error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -7; done
cd $OUT && gzip -9 pyspy_*.txt; tar czf p3_r.tgz tp_*.json tp_*.log pyspy_* && rm -f tp_*.json tp_*.log pyspy_*
