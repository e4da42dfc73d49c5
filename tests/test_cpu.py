"""agent_gym.cpu: one thread per physical core the process may use, OMP_NUM_THREADS first.

The sysfs topology and the cgroup quota are faked by redirecting the module's ``open`` from ``/sys/...``
to files under ``tmp_path`` (the code under test reads them as it does on a real machine)."""

from __future__ import annotations

import builtins
import os
import sys
import types

import pytest

import agent_gym.cpu as cpu


@pytest.fixture()
def fake_sys(tmp_path, monkeypatch):
    """A fake ``/sys`` under ``tmp_path``; returns ``(add_cpu, set_quota, usable)`` helpers."""
    root = tmp_path / "sys"

    def fake_open(path, *args, **kwargs):
        path = os.fspath(path)
        if path.startswith("/sys/"):
            path = str(root / path[len("/sys/"):])
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(cpu, "open", fake_open, raising=False)

    def add_cpu(cpu_id: int, core: int, package: int = 0) -> None:
        topology = root / "devices" / "system" / "cpu" / f"cpu{cpu_id}" / "topology"
        topology.mkdir(parents=True)
        (topology / "core_id").write_text(f"{core}\n")
        (topology / "physical_package_id").write_text(f"{package}\n")

    def set_quota(text: str) -> None:
        (root / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)
        (root / "fs" / "cgroup" / "cpu.max").write_text(text)

    def usable(cpus: list[int]) -> None:
        monkeypatch.setattr(cpu, "_usable_cpus", lambda: list(cpus))

    return add_cpu, set_quota, usable


def test_two_hyper_threads_of_one_core_count_once(fake_sys):
    add_cpu, _, usable = fake_sys
    add_cpu(0, core=0)
    add_cpu(1, core=0)
    usable([0, 1])
    assert cpu.physical_cores() == 1


def test_cores_are_told_apart_by_package_and_only_usable_cpus_count(fake_sys):
    add_cpu, _, usable = fake_sys
    add_cpu(0, core=0, package=0)
    add_cpu(1, core=1, package=0)
    add_cpu(2, core=0, package=1)  # core id 0 again, on the second socket: another core
    add_cpu(3, core=0, package=0)  # cpu 0's hyper-thread
    usable([0, 1, 2, 3])
    assert cpu.physical_cores() == 3
    usable([1, 3])  # an affinity mask: the rest of the machine is not ours
    assert cpu.physical_cores() == 2
    usable([0, 3])
    assert cpu.physical_cores() == 1


@pytest.mark.parametrize(("quota", "expected"), [
    ("max 100000\n", 4),          # no quota
    ("200000 100000\n", 2),       # two CPUs' worth
    ("150000 100000\n", 2),       # 1.5 CPUs: rounded up
    ("50000 100000\n", 1),        # half a CPU: still one thread
    ("800000 100000\n", 4),       # a quota above the cores does not add any
])  # fmt: skip
def test_the_cgroup_quota_caps_the_count(fake_sys, quota, expected):
    add_cpu, set_quota, usable = fake_sys
    for i in range(4):
        add_cpu(i, core=i)
    usable([0, 1, 2, 3])
    set_quota(quota)
    assert cpu.physical_cores() == expected


def test_no_topology_counts_logical_cpus_and_no_cgroup_file_means_no_cap(fake_sys):
    _, _, usable = fake_sys  # nothing under the fake /sys at all
    usable([0, 1, 2])
    assert cpu._cgroup_cpu_limit() is None
    assert cpu.physical_cores() == 3


def test_the_real_machine_gives_a_count_within_the_usable_cpus():
    assert 1 <= cpu.physical_cores() <= len(cpu._usable_cpus())


@pytest.fixture()
def thread_env(monkeypatch):
    """OMP_NUM_THREADS / MKL_NUM_THREADS / OMP_WAIT_POLICY unset, and restored after the test (also when
    the code under test sets them); an idle machine; a stand-in torch module that records set_num_threads."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.setenv(name, "")  # recorded, so that teardown restores the original state
        monkeypatch.delenv(name)
    monkeypatch.setattr(cpu, "_busy", lambda cores: False)  # an idle machine unless a test says otherwise
    calls: list[int] = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=calls.append))
    return calls


def test_omp_num_threads_set_by_the_user_wins(thread_env, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(cpu, "_busy", lambda cores: True)
    assert cpu.configure_cpu_threads() is None
    assert os.environ["OMP_NUM_THREADS"] == "3"
    assert "MKL_NUM_THREADS" not in os.environ and "OMP_WAIT_POLICY" not in os.environ
    assert thread_env == []  # torch's thread count is left alone too


def test_unset_omp_num_threads_becomes_the_physical_core_count(thread_env):
    n = cpu.physical_cores()
    assert cpu.configure_cpu_threads() == n
    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == str(n)
    assert "OMP_WAIT_POLICY" not in os.environ  # idle: the spinning default stays
    assert thread_env == [n]  # torch was already imported: its count is set as well


def test_configure_uses_physical_cores_and_keeps_a_users_mkl_setting(thread_env, monkeypatch):
    monkeypatch.setattr(cpu, "physical_cores", lambda: 5)
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    assert cpu.configure_cpu_threads() == 5
    assert (os.environ["OMP_NUM_THREADS"], os.environ["MKL_NUM_THREADS"]) == ("5", "7")
    assert thread_env == [5]


def test_configure_without_torch_imported_only_sets_the_variables(thread_env, monkeypatch):
    monkeypatch.setattr(cpu, "physical_cores", lambda: 2)
    monkeypatch.delitem(sys.modules, "torch")  # the stand-in; the real torch is restored after the test
    assert cpu.configure_cpu_threads() == 2
    assert os.environ["OMP_NUM_THREADS"] == "2"
    assert thread_env == []


def test_a_busy_machine_makes_waiting_threads_sleep_unless_the_user_chose(thread_env, monkeypatch):
    monkeypatch.setattr(cpu, "physical_cores", lambda: 2)
    seen = []
    monkeypatch.setattr(cpu, "_busy", lambda cores: seen.append(cores) or True)
    assert cpu.configure_cpu_threads() == 2
    assert (os.environ["OMP_WAIT_POLICY"], os.environ["OMP_NUM_THREADS"]) == ("PASSIVE", "2")
    assert seen == [2]
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpu.configure_cpu_threads() == 2
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


@pytest.mark.parametrize(("used", "cores", "busy"), [(1.0, 2, True), (0.99, 2, False), (0.0, 1, False), (2.0, 4, True)])
def test_busy_means_half_a_core_per_core_in_use_now(monkeypatch, used, cores, busy):
    """Two /proc/stat samples 1000 jiffies apart over the machine's CPUs; ``used`` cores of them busy."""
    online = 4
    monkeypatch.setattr(cpu.os, "cpu_count", lambda: online)
    samples = iter([(0, 0), (round(1000 * used / online), 1000)])
    monkeypatch.setattr(cpu, "_cpu_times", lambda: next(samples))
    assert cpu._busy(cores, window_s=0) is busy


def test_no_cpu_statistics_is_not_busy(monkeypatch):
    monkeypatch.setattr(cpu, "_cpu_times", lambda: None)
    assert cpu._busy(2, window_s=0) is False


def test_cpu_times_reads_proc_stat():
    times = cpu._cpu_times()
    if times is None:
        pytest.skip("no /proc/stat here")
    busy, total = times
    assert 0 <= busy <= total and total > 0
