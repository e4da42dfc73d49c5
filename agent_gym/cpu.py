"""How many threads local generation should use on a CPU.

torch starts one thread per logical CPU it sees. Where that is more threads than the cores a process
may really use (hyper-threads, a CPU affinity mask, a container's CPU quota, or other busy processes),
its OpenMP threads spin-wait in barriers on one another and decoding slows down by several times.
One thread per physical core that the process may run on is the setting that never oversubscribes
by itself. When other processes already keep the cores busy, spinning is what costs (a decode step
ran 8x slower beside two busy processes on 2 cores), so threads then sleep while they wait
(``OMP_WAIT_POLICY=PASSIVE``), which on an idle machine costs about 15% and so is not the default.
"""

from __future__ import annotations

import math
import os
import sys

__all__ = ["physical_cores", "configure_cpu_threads"]


def _usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def _cgroup_cpu_limit() -> int | None:
    """The CPU quota of a cgroup v2 container, rounded up (``None``: no quota)."""
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on, capped by a container's CPU quota."""
    cores: set[tuple[str, str | int]] = set()  # (package, core), or ("cpu", n) without topology
    for cpu in _usable_cpus():
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/core_id", encoding="ascii") as fh:
                core = fh.read().strip()
            with open(f"{topology}/physical_package_id", encoding="ascii") as fh:
                package = fh.read().strip()
        except OSError:  # no topology (not Linux, some VMs): count logical CPUs
            cores.add(("cpu", cpu))
            continue
        cores.add((package, core))
    n = max(1, len(cores))
    limit = _cgroup_cpu_limit()
    return min(n, limit) if limit else n


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, from ``/proc/stat`` (``None`` off Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _busy(cores: int, window_s: float = 0.25) -> bool:
    """Whether other work keeps the machine busy now: at least half a core per core of ours in use
    over a short window. Sampled, not read off the load average, which lags by a minute: right after
    a ``pip install`` it still says busy on an idle machine."""
    import time

    first = _cpu_times()
    if first is None:
        return False
    time.sleep(window_s)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return False
    online = os.cpu_count() or 1
    used_cores = (second[0] - first[0]) / (second[1] - first[1]) * online
    return used_cores >= 0.5 * cores


def configure_cpu_threads() -> int | None:
    """Use one torch/OpenMP thread per physical core, unless ``OMP_NUM_THREADS`` is set (it wins).

    On a machine that other processes keep busy, OpenMP threads are also told to sleep rather than spin
    while they wait (``OMP_WAIT_POLICY=PASSIVE``, unless set). Call it before torch is imported where
    possible (OpenMP reads these variables once); if torch is
    already imported its thread count is set too. Returns the count chosen, or ``None`` when the
    user's ``OMP_NUM_THREADS`` stands.
    """
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    n = physical_cores()
    if "OMP_WAIT_POLICY" not in os.environ and _busy(n):
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ.setdefault("MKL_NUM_THREADS", str(n))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    return n
