#!/bin/bash
# Call Q (fresh nvidia-h200-x2): log-probs as vLLM's FlatLogprobs (a few flat lists per request; now
# VLLMPolicy's default) on GPU0 against a {token: Logprob} dict per generated token (the old behaviour) on
# GPU1, both at once after the SFT warm start, default engine settings; then the sandbox benchmark on this
# host's 32 cores (quiet refills, the runners' env-id fix).
date -u
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 examples/sft_warmstart_gsm8k_tool.py --model /root/smollm2 --out /root/smollm2_sft \
  --offset 1000 --limit 3000 --epochs 2 --batch-size 32 --lr 1e-4 --no-progress > $OUT/sft.log 2>&1
echo "sft exit $? at $(( $(date +%s) - JOB_START )) s"; tail -1 $OUT/sft.log
L=$(bash .gpu/bin/left.sh 520)
B="benchmarks/rollout_throughput.py --model /root/smollm2_sft --episodes 512 --concurrency 512 --max-new-tokens 256 --repeats 3 --gc-freeze --gpu-memory-utilization 0.3"
CUDA_VISIBLE_DEVICES=0 timeout $L python3 $B --out $OUT/tp_flat.json > $OUT/tp_flat.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout $L python3 $B --sampling-kwargs '{"flat_logprobs": false}' --out $OUT/tp_dict.json > $OUT/tp_dict.log 2>&1
echo "dict exit $? at $(( $(date +%s) - JOB_START )) s"; wait; echo "flat done at $(( $(date +%s) - JOB_START )) s"; date -u
for f in tp_flat tp_dict; do echo "== $f"; grep -E "^repeat|Error" $OUT/$f.log | head -8; grep -v "it/s\]\|ep/s\]" $OUT/$f.log | tail -7; done
L=$(bash .gpu/bin/left.sh 588)
timeout $L python3 benchmarks/sandbox_throughput.py --tokenizer /root/smollm2 --workers 16 --prefork 32 --gc-freeze --no-baselines --serial-calls 0 --repeats 5 > $OUT/sandbox_w16_p32.log 2>&1
echo "sandbox exit $? at $(( $(date +%s) - JOB_START )) s"; grep -E "^sleeping|per episode|forked|machine|isolation" $OUT/sandbox_w16_p32.log
cd $OUT && tar czf p3_q.tgz sft.log tp_*.json tp_*.log sandbox_*.log && rm -f sft.log tp_*.json tp_*.log sandbox_*.log
