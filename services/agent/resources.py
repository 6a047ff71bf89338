"""Sampling a running trial's resource use: the ``sys/`` metric points.

Shortly after a trial starts (:data:`FIRST_SAMPLE_S`) and then every
``every`` seconds (at most 5), the agent measures the trial's whole process
tree (its first process and every descendant, from one reading of the
machine's processes per second that all the agent's trials share:
:class:`ProcessTable`) and the GPUs it holds, and sends the values as
metric points through the run's :class:`~.committer.MetricPump`, like the
trial's own:

* ``sys/cpu_percent``: CPU time the tree used since the last sample, as a
  percentage of one core (400 = four cores busy);
* ``sys/rss_mb``: resident memory of the tree, MiB;
* ``sys/gpu_util``: mean utilisation (%) of the GPUs in the trial's
  ``CUDA_VISIBLE_DEVICES``, and ``sys/gpu_mem_mb``: the GPU memory (MiB) its
  processes use there (the devices' used memory when NVML does not show the
  processes, as in a container with its own PID namespace). Only where NVML
  (``pip install nvidia-ml-py``, in the ``worker`` extra) sees GPUs; without
  it, GPU metrics are left out silently.

The step of a ``sys/`` point is the trial's running time in whole seconds
over all its attempts, so samples never collide with each other. They are
not the trial's progress: they touch neither the stall timer nor the final
metrics. The arithmetic is pure (:func:`cpu_percent`, :func:`gpu_values`,
:func:`due`); :class:`Sampler` does the reading.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil

FIRST_SAMPLE_S = 1.0  # the first sample, after the trial's start
SAMPLE_EVERY_S = 5.0  # then one every this many seconds (the "at most 5 s")
MIB = 1024 * 1024

Cpu = Mapping[tuple[int, float], float]  # (pid, create time) -> CPU seconds used so far


def due(now: float, started: float, last: float | None, every: float, first: float = FIRST_SAMPLE_S) -> bool:
    """Whether a sample is due at ``now`` for a run started at ``started`` whose last sample was at ``last``."""
    return now - started >= min(first, every) if last is None else now - last >= every


def cpu_percent(before: Cpu, after: Cpu, since: float, at: float) -> float:
    """The tree's CPU use between two readings (``since`` and ``at``, wall seconds) as % of one core.

    A process in ``after`` but not ``before`` counts whole when it was created
    after ``since`` (it used nothing before), and not at all otherwise (it was
    missed, e.g. it entered the tree by a fork just before the first reading).
    A process gone by ``at`` is not counted: its last moments are lost (at most one interval's)."""
    if at <= since:
        return 0.0
    used = 0.0
    for key, seconds in after.items():
        if key in before:
            used += max(0.0, seconds - before[key])
        elif key[1] >= since:
            used += seconds
    return 100.0 * used / (at - since)


@dataclass(frozen=True)
class GpuReading:
    """One GPU as NVML sees it: utilisation %, used memory, and memory by process id (bytes)."""

    util: float
    used_bytes: float
    processes: Mapping[int, float]


def gpu_values(readings: Iterable[GpuReading], pids: set[int]) -> dict[str, float]:
    """``sys/gpu_util`` (mean over the GPUs) and ``sys/gpu_mem_mb`` (the tree's processes' memory,
    or the devices' used memory when NVML shows none of the processes' ids); {} without GPUs."""
    readings = list(readings)
    if not readings:
        return {}
    ours = [b for r in readings for pid, b in r.processes.items() if pid in pids]
    memory = sum(ours) if ours else sum(r.used_bytes for r in readings)
    return {"sys/gpu_util": sum(r.util for r in readings) / len(readings), "sys/gpu_mem_mb": memory / MIB}


def devices(cuda_visible: str | None) -> list[str]:
    """The GPU indexes or UUIDs named by a ``CUDA_VISIBLE_DEVICES`` value (or ``NVIDIA_VISIBLE_DEVICES``'s ids)."""
    return [d.strip() for d in (cuda_visible or "").split(",") if d.strip() not in ("", "-1", "all", "none", "void")]


class _Nvml:
    """NVML through nvidia-ml-py, imported and initialised on first use; off for good when it cannot be."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._tried = False

    def read(self, names: list[str]) -> list[GpuReading]:
        nvml = self._load() if names else None
        if nvml is None:
            return []
        out = []
        try:
            for name in names:
                h = nvml.nvmlDeviceGetHandleByIndex(int(name)) if name.isdigit() else nvml.nvmlDeviceGetHandleByUUID(name)
                procs = {p.pid: float(p.usedGpuMemory or 0) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)}
                out.append(GpuReading(float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                                      float(nvml.nvmlDeviceGetMemoryInfo(h).used), procs))
        except Exception:  # noqa: BLE001 - a GPU NVML cannot read (gone, MIG, an odd name): no GPU metrics
            return []
        return out

    def _load(self) -> Any:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    import pynvml  # optional: the worker extra

                    pynvml.nvmlInit()
                    self._nvml = pynvml
                except Exception:  # noqa: BLE001 - not installed, no driver, no GPU: skip GPU metrics
                    self._nvml = None
            return self._nvml


NVML = _Nvml()  # one per agent process


class ProcessTable:
    """Who is whose child on this machine, read at most once per ``ttl`` seconds for all of an
    agent's trials.

    Finding a process's descendants means reading every process on the machine
    (psutil's ``children(recursive=True)`` does so per call): one trial's sample cost
    0.8 ms with 100 processes and 30 ms with 1,100, and an agent of 20 slots paid it
    per trial, about 40% of its CPU at 250 slots (``bench/scale.py``). Shared, it is
    one pass per ``ttl`` however many trials sample. A child forked since the pass is
    counted from the next sample (:func:`cpu_percent` counts a new process whole)."""

    def __init__(self, ttl: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl, self._clock = ttl, clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._children: dict[int, list[int]] = {}
        self.passes = 0  # how many times every process was read

    def descendants(self, pid: int) -> list[int]:
        """The ids of ``pid``'s children, theirs, and so on, as of the last pass."""
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self._ttl:
                children: dict[int, list[int]] = {}
                for proc in psutil.process_iter(["ppid"]):
                    children.setdefault(proc.info["ppid"], []).append(proc.pid)
                self._children, self._read_at = children, now
                self.passes += 1
            table = self._children
        out, todo = [], list(table.get(pid, ()))
        while todo:
            child = todo.pop()
            if child != pid and child not in out:
                out.append(child)
                todo.extend(table.get(child, ()))
        return out


PROCESSES = ProcessTable()  # one per agent process


def _tree(pid: int, table: ProcessTable) -> list[psutil.Process]:
    procs = [psutil.Process(pid)]
    for child in table.descendants(pid):
        try:
            procs.append(psutil.Process(child))
        except psutil.Error:
            continue  # ended since the pass
    return procs


class Sampler:
    """Reads one trial's resource use; :meth:`sample` returns the ``sys/`` values since the last call."""

    def __init__(self, pid: int, clock: Callable[[], float] = time.time, nvml: _Nvml = NVML,
                 processes: ProcessTable = PROCESSES) -> None:
        self._pid = pid
        self._processes = processes
        self._clock = clock
        self._nvml = nvml
        self._since: float | None = None  # the last reading's time; the first reading counts from the start
        self._cpu: Cpu = {}
        self._gpus: list[str] | None = None

    def sample(self) -> dict[str, float]:
        """The values now; {} when the trial's first process is gone."""
        try:
            tree = _tree(self._pid, self._processes)
            if self._since is None:
                self._since = tree[0].create_time()
                # The GPUs the agent gave it: CUDA_VISIBLE_DEVICES (a process), NVIDIA_VISIBLE_DEVICES (a container's init).
                env = tree[0].environ()
                self._gpus = devices(env.get("CUDA_VISIBLE_DEVICES") or env.get("NVIDIA_VISIBLE_DEVICES"))
        except (psutil.Error, OSError):
            return {}
        at = self._clock()
        cpu: dict[tuple[int, float], float] = {}
        rss = 0.0
        pids = set()
        for proc in tree:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu[(proc.pid, proc.create_time())] = times.user + times.system
                    rss += proc.memory_info().rss
                    pids.add(proc.pid)
            except (psutil.Error, OSError):
                continue  # ended between the listing and the reading
        values = {"sys/cpu_percent": cpu_percent(self._cpu, cpu, self._since, at), "sys/rss_mb": rss / MIB}
        self._cpu, self._since = cpu, at
        values.update(gpu_values(self._nvml.read(self._gpus or []), pids))
        return {k: v for k, v in values.items() if math.isfinite(v)}
