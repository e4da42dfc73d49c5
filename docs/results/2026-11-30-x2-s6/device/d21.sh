#!/bin/bash
# Call U (fresh nvidia-h200-x2, no vLLM stack): the sandbox benchmark with more processes than cores:
# 32 x 16 episodes against 48 x ~11 and 64 x 8, alternating, 9 repeats each, on the host's 32 cores.
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target /tmp/s2 .gpu/wheels/gymnasium-*.whl .gpu/wheels/farama*.whl .gpu/wheels_sb/*.whl . ./envs/gsm8k ./envs/python 2>&1 | grep -v WARNING | tail -2
export PYTHONPATH=/tmp/s2 AGENT_GYM_GSM8K_DIR=$PWD/.gpu/gsm8k_only/gsm8k
python3 -c "import agent_gym_python, pydantic, jinja2, transformers; print(\"imports ok\")" || exit 1
echo "setup $(( $(date +%s) - T0 )) s, $(nproc) cores"; date -u
B="benchmarks/sandbox_throughput.py --tokenizer .gpu/tok --gc-freeze --no-baselines --serial-calls 0 --repeats 9"
k=0
for wp in "32 16" "64 8" "48 11" "32 16" "64 8" "48 11"; do
  set -- $wp; k=$((k+1))
  timeout 100 python3 $B --workers $1 --prefork $2 > $OUT/sandbox_${k}_w$1_p$2.log 2>&1
  echo "== run $k: --workers $1 --prefork $2: exit $? at $(( $(date +%s) - T0 )) s"
  grep -E "^sleeping|per episode|forked|stage" $OUT/sandbox_${k}_w$1_p$2.log
  [ $(( $(date +%s) - T0 )) -gt 420 ] && break
done
cd $OUT && tar czf sandbox_u.tgz sandbox_*.log && rm -f sandbox_*.log
