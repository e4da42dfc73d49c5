#!/bin/bash
# (Ran with a temporary --switch-interval flag of the benchmark, removed afterwards: it changed nothing.)
# Call T (nvidia-h200-x2, no vLLM stack): the sandbox benchmark between 16 and 32 processes, and with a
# 0.5 ms GIL switch interval, interleaved.
T0=$(date +%s)
[ -f /tmp/s2/.ok ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target /tmp/s2 .gpu/wheels/gymnasium-*.whl .gpu/wheels/farama*.whl .gpu/wheels_sb/*.whl . ./envs/gsm8k ./envs/python 2>&1 | grep -v WARNING | tail -2; touch /tmp/s2/.ok; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --upgrade --target /tmp/s2 . 2>&1 | grep -v WARNING | tail -2
export PYTHONPATH=/tmp/s2 AGENT_GYM_GSM8K_DIR=$PWD/.gpu/gsm8k_only/gsm8k
echo "setup $(( $(date +%s) - T0 )) s, $(nproc) cores"; uptime; date -u
B="benchmarks/sandbox_throughput.py --tokenizer .gpu/tok --gc-freeze --no-baselines --serial-calls 0 --repeats 9"
for v in "w24:--workers 24 --prefork 22" "w32:--workers 32 --prefork 16" "w32_si:--workers 32 --prefork 16 --switch-interval 0.0005" "w24_si:--workers 24 --prefork 22 --switch-interval 0.0005"; do
  name=${v%%:*}; timeout 60 python3 $B ${v#*:} > $OUT/sandbox_$name.log 2>&1
  echo "$name exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^sleeping code  |per episode" $OUT/sandbox_$name.log
done
uptime; cd $OUT && for f in *.log; do sed -i '/clean_up_tokenization_spaces/d' $f; done; tar czf sandbox_u.tgz *.log && rm -f *.log
