"""A spot pool for the goodput benchmark: a fixed number of agent positions, each
held by one agent at a time; a preempted agent is replaced at once by a fresh one.

Each position draws its agents' lifetimes (seconds from *ready*, exponential with
the mean asked) from its own seeded stream, and alternates the kind of preemption
(SIGTERM with a drain, or kill -9 of the agent and its trials without notice) in
the share asked, so every faulted run sees the same schedule whatever its
checkpoint interval, and the mix is the one asked, not a small sample's. A clean pool
never preempts. :meth:`Pool.tick` is polled by the benchmark's loop: it notes
agents that became ready or finished draining, and preempts the ones whose
lifetime is up.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import harness
import psutil
from goodput_stats import Kill


@dataclass
class Agent:
    name: str
    position: int
    proc: subprocess.Popen[bytes]
    log: Path
    ready: float | None = None
    gone: float | None = None
    dies_at: float | None = None  # wall clock: when its lifetime is up
    how: str = ""


class Pool:
    def __init__(self, c: harness.Cluster, label: str, resource_class: str, positions: int, slots: int, grace: float,
                 mean_life: float | None, kill9_share: float, seed: int) -> None:
        self.c, self.label, self.cls, self.slots, self.grace = c, label, resource_class, slots, grace
        self.mean_life, self.kill9_share = mean_life, kill9_share
        self.rngs = [random.Random(seed * 1009 + p) for p in range(positions)]
        self.agents: list[Agent] = []
        self.kills: list[Kill] = []
        self.successors: list[Agent] = []  # the fresh agent that took each kill's position
        self.generation = 0
        self.drawn: dict[int, int] = {}  # position -> lifetimes drawn so far
        self.live: dict[int, Agent] = {}  # position -> its current agent
        for p in range(positions):
            self._start(p)

    def _start(self, position: int) -> Agent:
        self.generation += 1
        name = f"{self.label}-p{position}-g{self.generation}"
        proc = self.c.start(name, "agent", "--slots", str(self.slots), "--class", self.cls, "--grace", str(self.grace),
                            "--workdir", str(self.c.tmp / f"work-{name}"))
        agent = Agent(name, position, proc, self.c.tmp / f"{name}.log")
        self.agents.append(agent)
        self.live[position] = agent
        return agent

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while any(a.ready is None for a in self.live.values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"agents not ready after {timeout}s:\n{self.c.logs()}")
            self.tick(preempt=False)
            time.sleep(0.02)

    def _kind(self, position: int) -> str:
        """The kind of this position's next preemption: kill -9 for exactly ``kill9_share`` of them
        (spread evenly, each position starting at another phase), SIGTERM for the rest."""
        i = self.drawn[position] = self.drawn.get(position, -1) + 1
        phase = position / len(self.rngs)
        return "kill9" if int((i + 1) * self.kill9_share + phase) > int(i * self.kill9_share + phase) else "sigterm"

    def tick(self, preempt: bool) -> None:
        now = time.time()
        for a in self.agents:
            if a.gone is None and a.proc.poll() is not None:
                a.gone = now  # a drained agent exited (or one died on its own)
            if a.ready is None and a.gone is None and "agent ready" in a.log.read_text(errors="replace"):
                a.ready = now
                if self.mean_life is not None:
                    rng = self.rngs[a.position]
                    a.dies_at = now + rng.expovariate(1.0 / self.mean_life)
                    a.how = self._kind(a.position)
        if not preempt:
            return
        for position, a in list(self.live.items()):
            if a.dies_at is not None and now >= a.dies_at and a.gone is None:
                self.preempt(a)
                self.successors.append(self._start(position))

    def preempt(self, a: Agent) -> None:
        proc = a.proc
        at = time.time()
        if a.how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            kill9(proc.pid)
            a.gone = at
        self.kills.append(Kill(at, proc.pid, a.how))

    def end(self, t_end: float) -> None:
        """Every agent still there dies now (kill -9: the window is closed, nothing more is measured)."""
        for a in self.agents:
            if a.gone is None:
                if a.proc.poll() is None:
                    kill9(a.proc.pid)
                a.gone = max(t_end, time.time()) if a.ready is not None else None

    def boots(self) -> list[float | None]:
        """Per kill: seconds until its replacement was ready (None: not by the window's end)."""
        return [None if a.ready is None else a.ready - k.at for k, a in zip(self.kills, self.successors)]

    def lives(self) -> list[tuple[float | None, float | None]]:
        return [(a.ready, a.gone) for a in self.agents]


def kill9(pid: int) -> None:
    """The agent and everything it started (trials run in sessions of their own), at once, as a node loss."""
    try:
        victims = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        victims = []
    for p in [pid, *(v.pid for v in victims)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
