"""Summarize py-spy raw profiles (``py-spy record --format raw --threads --subprocesses``) of the rollout
benchmark's env runs: active seconds per process and thread, and for vLLM's EngineCore main thread the
inclusive seconds of the functions that say where a step's time goes. 250 samples per second.

    python summarize.py pyspy_inproc-2.txt.gz pyspy_proc-2.txt.gz
"""

import collections
import gzip
import sys

RATE = 250
KEYS = ("EngineCore.step_with_batch_queue", "GPUModelRunner.execute_model", "CudaGraphManager.run_pw_graph",
        "CudaGraphManager.run_fullgraph", "GPUModelRunner.add_requests", "Scheduler.schedule",
        "GPUModelRunner.sample_tokens", "Scheduler.update_from_output", "GPUModelRunner.prepare_inputs")


def samples(path):
    """(process name, thread name, frames, count) per line of a raw profile."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            k = sum(1 for x in frames if x.startswith("process "))
            process = frames[k - 1].split(":", 1)[1][:40]
            thread = frames[k].split(":", 1)[1].strip() if ":" in frames[k] else frames[k]
            yield process, thread, frames[k + 1:], int(n)


for path in sys.argv[1:]:
    threads, engine = collections.Counter(), collections.Counter()
    for process, thread, frames, n in samples(path):
        threads[(process, thread)] += n
        if "EngineCore" in process and "policy-loop" in thread:
            names = {fr.split(" (")[0] for fr in frames}
            for key in KEYS:
                if key in names:
                    engine[key] += n
    print(f"== {path}: active seconds per process / thread")
    for (process, thread), n in threads.most_common(8):
        print(f"  {n / RATE:6.2f} s  {process:42s} {thread}")
    print("  EngineCore main thread, inclusive: " + ", ".join(f"{k.split('.')[-1]} {engine[k] / RATE:.2f} s" for k in KEYS))
