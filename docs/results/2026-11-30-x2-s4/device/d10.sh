#!/bin/bash
# Call K (same machine, warm): the sandbox benchmark on 32 cores with quiet pool refills (nothing forked inside
# the timed run when the pool holds a worker per episode), A/B against eager refills; other splits.
date -u
T="--tokenizer /root/smollm2"
timeout 150 python3 benchmarks/sandbox_throughput.py $T --workers 16 --prefork 32 --gc-freeze --serial-calls 100 > $OUT/sandbox_w16_p32_quiet.log 2>&1
echo "exit $? at $(( $(date +%s) - JOB_START )) s"; grep -E "^sleeping|^code|^calc|per episode|forked|sleep cost|isolation|machine" $OUT/sandbox_w16_p32_quiet.log
timeout 100 python3 benchmarks/sandbox_throughput.py $T --workers 16 --prefork 32 --gc-freeze --prefork-refill eager --no-baselines --serial-calls 0 > $OUT/sandbox_w16_p32_eager.log 2>&1
echo "exit $? at $(( $(date +%s) - JOB_START )) s"; grep -E "^sleeping|per episode|forked" $OUT/sandbox_w16_p32_eager.log
timeout 100 python3 benchmarks/sandbox_throughput.py $T --workers 32 --prefork 16 --gc-freeze --no-baselines --serial-calls 0 > $OUT/sandbox_w32_p16_quiet.log 2>&1
echo "exit $? at $(( $(date +%s) - JOB_START )) s"; grep -E "^sleeping|per episode|forked" $OUT/sandbox_w32_p16_quiet.log
L=$(bash .gpu/bin/left.sh 560)
timeout $L python3 benchmarks/sandbox_throughput.py $T --workers 8 --prefork 64 --gc-freeze --no-baselines --serial-calls 0 > $OUT/sandbox_w8_p64_quiet.log 2>&1
echo "exit $? at $(( $(date +%s) - JOB_START )) s"; grep -E "^sleeping|per episode|forked" $OUT/sandbox_w8_p64_quiet.log
date -u
