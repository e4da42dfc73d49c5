"""The sandbox throughput benchmark end to end at a tiny size (real envs, tokenizer, sandbox server):
it finishes, plays every episode to the end and reports the per-stage call overhead."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "sandbox_throughput.py"


def test_sandbox_benchmark_reports_stages_for_first_and_later_calls():
    cmd = [sys.executable, str(BENCHMARK), "--episodes", "4", "--repeats", "1", "--serial-calls", "0",
           "--no-baselines", "--sleep-ms", "10"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "4 GSM8KPython episodes in flight, 3 tool turns sleeping 10 ms" in out
    processes = min(-(-3 * len(os.sched_getaffinity(0)) // 2), 4)  # the default --workers: three per two usable cores
    assert (f"; {processes} worker processes (" if processes > 1 else "; one process") in out, out
    # the default --prefork: a worker for every episode of the busiest process, so none is forked while timed
    assert f"(prefork {-(-4 // processes)} per server, refill quiet)" in out, out
    assert "WARNING" not in out  # every episode made its 4 turns and every sandbox call was ok
    assert re.search(r"sandbox workers forked inside the timed run \(sleeping code\): 0 for 4 episodes", out), out
    # 4 sessions: each worker's first call, then 2 more calls per session
    first = re.search(r"call overhead by stage \(sleeping code, a worker's first call, (\d+) calls; p50/p95\): (.*)", out)
    later = re.search(r"call overhead by stage \(sleeping code, later calls of a session, (\d+) calls; p50/p95\): (.*)", out)
    assert first and later, out
    assert (first.group(1), later.group(1)) == ("4", "8")
    for line in (first.group(2), later.group(2)):
        assert [p.split()[0] for p in line.split(", ")] == ["to_server", "queued", "to_worker", "from_worker", "to_client"]
