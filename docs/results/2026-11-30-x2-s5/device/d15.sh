#!/bin/bash
# Call P (fresh nvidia-h200-x2): P3 with CUDA graphs for bigger mixed batches. GPU0: the default mode
# (FULL_AND_PIECEWISE: full graphs for decode-only steps, piecewise for mixed ones) with graphs captured up
# to 2,048 tokens per step instead of 512; GPU1: the same sizes with cudagraph_mode FULL (FlashAttention 3
# on Hopper runs mixed prefill/decode batches in full graphs too). Both at once after the SFT warm start.
date -u
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
L=$(bash .gpu/bin/left.sh 575)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 3 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --engine-kwargs '{"compilation_config": {"max_cudagraph_capture_size": 2048}}' --out $OUT/tp_pw2048.json > $OUT/tp_pw2048.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --engine-kwargs '{"compilation_config": {"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 2048}}' --out $OUT/tp_full2048.json > $OUT/tp_full2048.log 2>&1
echo "full2048 exit $? at $(( $(date +%s) - JOB_START )) s"
wait; echo "pw2048 done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_pw2048 tp_full2048; do echo "== $f"; grep -E "cudagraph_mode|Graph capturing finished|Capturing CUDA graphs \([A-Z]*\): 100" $OUT/$f.log | grep -o "cudagraph_mode': [^,]*\|Graph capturing finished.*\|Capturing CUDA graphs ([A-Z]*): 100%[^|]*|[^[]*" | head -4; grep -E "^repeat|Error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -7; done
cd $OUT && tar czf p3_p.tgz sft.log tp_*.json tp_*.log && rm -f sft.log tp_*.json tp_*.log && ls -la $OUT
