#!/bin/bash
# Call S (fresh nvidia-h200-x2, no vLLM stack): the sandbox benchmark with the per-stage call overhead,
# 16 processes x 32 episodes and 32 x 16, on the host's 32 cores.
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target /tmp/s2 .gpu/wheels/gymnasium-*.whl .gpu/wheels/farama*.whl .gpu/wheels_sb/*.whl . ./envs/gsm8k ./envs/python 2>&1 | grep -v WARNING | tail -2
export PYTHONPATH=/tmp/s2 AGENT_GYM_GSM8K_DIR=$PWD/.gpu/gsm8k_only/gsm8k
python3 -c "import agent_gym_python, pydantic, jinja2, transformers; print(\"imports ok\")" || exit 1
echo "setup $(( $(date +%s) - T0 )) s, $(nproc) cores"; date -u
B="benchmarks/sandbox_throughput.py --tokenizer .gpu/tok --gc-freeze --no-baselines --serial-calls 0 --repeats 5"
timeout 80 python3 $B --workers 16 --prefork 32 > $OUT/sandbox_w16_p32_stages.log 2>&1
echo "w16 exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^sleeping|per episode|forked|machine|stage" $OUT/sandbox_w16_p32_stages.log
timeout 80 python3 $B --workers 32 --prefork 16 > $OUT/sandbox_w32_p16_stages.log 2>&1
echo "w32 exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^sleeping|per episode|forked|stage" $OUT/sandbox_w32_p16_stages.log
cd $OUT && tar czf sandbox_s.tgz sandbox_*.log && rm -f sandbox_*.log
