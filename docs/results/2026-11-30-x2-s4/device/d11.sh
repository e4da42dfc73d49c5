#!/bin/bash
# Call L (fresh nvidia-h200-x2): P3 with vLLM's frontend in the env loop's process (GPU0) against in a child
# process (VLLMProcessPolicy, GPU1), both at once after the SFT warm start, both with gc.freeze and py-spy.
date -u
if ! command -v py-spy; then
  python3 -m zipfile -e .gpu/wheels/py_spy-*.whl /tmp/pyspy && install -m 755 /tmp/pyspy/py_spy-*.data/scripts/py-spy /tmp/site/bin/py-spy
  command -v py-spy || echo "no py-spy"
fi
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
L=$(bash .gpu/bin/left.sh 585)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 4 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --py-spy $OUT/pyspy_inproc --out $OUT/tp_inproc.json > $OUT/tp_inproc.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --engine-process --py-spy $OUT/pyspy_proc --out $OUT/tp_proc.json > $OUT/tp_proc.log 2>&1
echo "proc exit $? at $(( $(date +%s) - JOB_START )) s"
wait; echo "inproc done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_inproc tp_proc; do echo "== $f"; grep -E "^repeat|WARNING: --py|Error|error" $OUT/$f.log | grep -v "output_handler\|EngineDead\|async_llm.py:7" | head -12; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -8; done
for f in $OUT/pyspy_*.txt; do gzip -9 $f; done
ls -la $OUT
