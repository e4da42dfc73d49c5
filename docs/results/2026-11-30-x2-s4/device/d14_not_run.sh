#!/bin/bash
# Call O (fresh nvidia-h200-x2, no vLLM stack): the sandbox benchmark alone, quiet refills, on another host.
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target /tmp/s2 .gpu/wheels/gymnasium-*.whl .gpu/wheels/farama*.whl . ./envs/gsm8k ./envs/python 2>&1 | grep -v WARNING | tail -2
export PYTHONPATH=/tmp/s2 AGENT_GYM_GSM8K_DIR=$PWD/.gpu/gsm8k_only/gsm8k
echo "setup $(( $(date +%s) - T0 )) s, $(nproc) cores"
timeout 50 python3 benchmarks/sandbox_throughput.py --tokenizer .gpu/tok --workers 16 --prefork 32 --gc-freeze --no-baselines --serial-calls 0 --repeats 3 > $OUT/sandbox_w16_p32_quiet_o.log 2>&1
echo "exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^sleeping|per episode|forked|machine|isolation" $OUT/sandbox_w16_p32_quiet_o.log
