#!/bin/bash
# Call M (fresh nvidia-h200-x2): P3 with AsyncLLM's engine-context batch limits (128 sequences, 2,048 tokens
# per step: what every earlier P3 run had) on GPU0 against vLLM's offline-batch defaults (LLM_CLASS, now
# VLLMPolicy's default) on GPU1, both at once after the SFT warm start.
date -u
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
L=$(bash .gpu/bin/left.sh 570)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 3 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --engine-kwargs '{"max_num_seqs": 128, "max_num_batched_tokens": 2048}' --out $OUT/tp_seqs128.json > $OUT/tp_seqs128.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --out $OUT/tp_llm_class.json > $OUT/tp_llm_class.log 2>&1
echo "llm_class exit $? at $(( $(date +%s) - JOB_START )) s"
wait; echo "seqs128 done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_seqs128 tp_llm_class; do echo "== $f"; grep -E "max_num_batched_tokens|max_num_seqs" $OUT/$f.log | head -2 | cut -c1-200; grep -E "^repeat" $OUT/$f.log; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -7; done
cd $OUT && tar czf p3_m.tgz sft.log tp_*.json tp_*.log && rm -f sft.log tp_*.json tp_*.log && ls -la $OUT
