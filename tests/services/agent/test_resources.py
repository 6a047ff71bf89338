"""Resource samples: the pure arithmetic with plain values, and the sampler on a real process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from spotsweep.services.agent.resources import MIB, GpuReading, Sampler, cpu_percent, devices, due, gpu_values

BUSY = """
import multiprocessing as mp, time
def spin():
    end = time.time() + 30
    while time.time() < end:
        pass
if __name__ == "__main__":
    ballast = bytearray(100 * 1024 * 1024)  # ~100 MiB resident
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    child = mp.get_context("fork").Process(target=spin)
    child.start()
    print("ready", flush=True)
    spin()
"""


def test_first_sample_soon_after_the_start_then_every_interval() -> None:
    assert not due(0.9, 0.0, None, 5.0) and due(1.0, 0.0, None, 5.0)
    assert due(0.5, 0.0, None, 0.5)  # an interval shorter than the first delay
    assert not due(5.9, 0.0, 1.0, 5.0) and due(6.0, 0.0, 1.0, 5.0)


def test_cpu_percent_over_the_tree_between_readings() -> None:
    before = {(1, 100.0): 10.0, (2, 100.0): 1.0}
    after = {(1, 100.0): 12.0, (2, 100.0): 2.0, (3, 104.0): 0.5, (4, 50.0): 7.0}
    # pid 1: 2 s, pid 2: 1 s, pid 3 new since the last reading: 0.5 s; pid 4 predates it (missed): not counted
    assert cpu_percent(before, after, 102.0, 107.0) == 100.0 * 3.5 / 5.0
    assert cpu_percent({}, {(1, 100.0): 2.0}, 100.0, 102.0) == 100.0  # the first reading: everything since the start
    assert cpu_percent({(1, 1.0): 5.0}, {(1, 2.0): 1.0}, 1.5, 2.5) == 100.0  # a reused pid is a new process
    assert cpu_percent({}, {}, 5.0, 5.0) == 0.0


def test_gpu_values_for_the_trials_gpus() -> None:
    assert gpu_values([], {1}) == {}
    gpus = [GpuReading(10.0, 4 * 1024 * MIB, {1: 1024 * MIB, 99: 2048 * MIB}), GpuReading(30.0, 1024 * MIB, {2: 512 * MIB})]
    assert gpu_values(gpus, {1, 2}) == {"sys/gpu_util": 20.0, "sys/gpu_mem_mb": 1536.0}
    # NVML shows none of our pids (a container's PID namespace): the devices' used memory
    assert gpu_values(gpus, {5}) == {"sys/gpu_util": 20.0, "sys/gpu_mem_mb": 5120.0}
    assert devices("0,1") == ["0", "1"] and devices(" GPU-ab12 ") == ["GPU-ab12"]
    assert devices(None) == [] and devices("") == [] and devices("-1") == []


def test_sampler_reads_the_whole_process_tree() -> None:
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        sampler = Sampler(proc.pid)
        first = sampler.sample()
        assert first["sys/rss_mb"] >= 80  # the ballast, in the parent
        assert first["sys/cpu_percent"] > 0
        assert "sys/gpu_util" not in first  # no GPU here: left out, no error
    finally:
        proc.kill()
        proc.wait()
    assert Sampler(proc.pid).sample() == {}  # gone: nothing, no error


def test_trials_share_one_reading_of_the_machines_processes() -> None:
    """An agent's trials find their descendants in one pass over the machine's processes
    per second, not one pass each (each pass reads every process: bench/scale.py)."""
    from spotsweep.services.agent.resources import ProcessTable

    procs = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, start_new_session=True)
             for _ in range(3)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        now = [0.0]
        table = ProcessTable(ttl=1.0, clock=lambda: now[0])
        samplers = [Sampler(p.pid, processes=table) for p in procs]
        trees = [table.descendants(p.pid) for p in procs]
        assert all(len(tree) == 1 for tree in trees) and len({t[0] for t in trees}) == 3  # each its own forked child
        assert all(s.sample()["sys/cpu_percent"] > 0 for s in samplers)
        assert table.passes == 1
        now[0] = 1.0
        assert all(s.sample() for s in samplers) and table.passes == 2
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)  # the forked child too
            proc.wait()
