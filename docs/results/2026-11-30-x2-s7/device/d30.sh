#!/bin/bash
# Seventh session, call Z5 (third round on the same host, as much as the last device seconds allowed): the sandbox benchmark before and after
# the batcher's wait cap (a batch waits for more prompts no longer than the previous generate call took),
# A/B on one host: "old" is the same install with agent_gym/rollout/async_runner.py of commit 4f92316.
T0=$(date +%s); rm -rf /tmp/s2 /tmp/s_old
python3 -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target /tmp/s2 .gpu/wheels/gymnasium-*.whl .gpu/wheels/farama*.whl .gpu/wheels_sb/*.whl . ./envs/gsm8k ./envs/python 2>&1 | grep -v WARNING | tail -2
cp -r /tmp/s2 /tmp/s_old && cp .gpu/old_async_runner.py /tmp/s_old/agent_gym/rollout/async_runner.py
grep -c "_SHORTEST_WAIT_S" /tmp/s2/agent_gym/rollout/async_runner.py /tmp/s_old/agent_gym/rollout/async_runner.py
export AGENT_GYM_GSM8K_DIR=$PWD/.gpu/gsm8k_only/gsm8k
PYTHONPATH=/tmp/s2 python3 -c "import agent_gym_python, pydantic, jinja2, transformers; print(\"imports ok\")" || exit 1
echo "setup $(( $(date +%s) - T0 )) s, $(nproc) cores"; date -u
B="benchmarks/sandbox_throughput.py --tokenizer .gpu/tok --gc-freeze --no-baselines --serial-calls 0 --repeats 9"
k=0
for cfg in "new 48 11" "old 48 11" "new 48 11" "new 32 16"; do
  set -- $cfg; k=$((k+1))
  if [ $1 = old ]; then P=/tmp/s_old; else P=/tmp/s2; fi
  PYTHONPATH=$P timeout 100 python3 $B --workers $2 --prefork $3 > $OUT/sandbox_${k}_$1_w$2_p$3.log 2>&1
  echo "== run $k: $1 --workers $2 --prefork $3: exit $? at $(( $(date +%s) - T0 )) s"
  grep -E "^sleeping|per episode|runner:" $OUT/sandbox_${k}_$1_w$2_p$3.log
  [ $(( $(date +%s) - T0 )) -gt 110 ] && break
done
cd $OUT && tar czf sandbox_z5.tgz sandbox_*.log && rm -f sandbox_*.log
