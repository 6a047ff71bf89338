"""What one agent can hold at once (``--cpus``, ``--memory``) and whether a trial's request fits now.

:func:`fit` is the decision, pure: a request fits when it and the requests of
the trials this agent runs stay within its capacity; a request bigger than the
whole capacity never fits here, nor one for more GPUs than a slot has. :class:`Ledger` keeps the running trials'
requests and holds a trial's handler until its request fits (the delivery
stays unacked on this agent, as a prefetched trial does), so memory and CPUs
are never promised twice. A trial without ``resources.cpus``/``memory``
reserves none of them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import psutil

from spotsweep.shared.quantity import human_bytes


@dataclass(frozen=True)
class Request:
    """A trial's ``resources.cpus`` (cores), ``resources.memory`` (bytes), None: not asked; and ``resources.gpus``."""

    cpus: float | None = None
    memory: int | None = None
    gpus: int = 0


@dataclass(frozen=True)
class Capacity:
    """What the agent offers its trials in all, and the GPUs each of its slots has."""

    cpus: float
    memory: int
    resource_class: str = "gpu"
    gpus: int = 0  # per slot (--gpus-per-slot on a GPU node; 0 on a CPU node)


@dataclass(frozen=True)
class Fit:
    """``take``: start it now; ``wait``: it fits once running trials end; ``never``: not on this agent (``reason``)."""

    verdict: Literal["take", "wait", "never"]
    reason: str = ""


def fit(request: Request, capacity: Capacity, held: Iterable[Request]) -> Fit:
    """Whether ``request`` fits beside the ``held`` requests of the running trials."""
    cpus, memory = request.cpus or 0.0, request.memory or 0
    where = f"this agent of class {capacity.resource_class}"
    # The spec's default (gpus: 1) runs on a CPU agent as it always did; more than the slot has never does.
    if request.gpus > max(capacity.gpus, 1):
        return Fit("never", f"resources.gpus: {request.gpus} requested, this agent's slots have {capacity.gpus} "
                            "(--gpus-per-slot)")
    if memory > capacity.memory:
        return Fit("never", f"resources.memory asks for {human_bytes(memory)}, but {where} offers "
                            f"{human_bytes(capacity.memory)} (--memory) in all")
    if cpus > capacity.cpus:
        return Fit("never", f"resources.cpus asks for {cpus:g} cores, but {where} offers {capacity.cpus:g} (--cpus) in all")
    held = list(held)
    used_cpus = sum(r.cpus or 0.0 for r in held)
    used_memory = sum(r.memory or 0 for r in held)
    if used_memory + memory > capacity.memory or used_cpus + cpus > capacity.cpus + 1e-9:
        return Fit("wait")
    return Fit("take")


def share(capacity: Capacity, slots: int) -> int:
    """The memory limit of a trial that asks none: its slot's share of what the agent offers (a container
    always has a limit, so one trial without a request cannot take the node's memory from its neighbours)."""
    return capacity.memory // max(1, slots)


def detect(cpus: float | None, memory: int | None, resource_class: str, memory_limit: int | None = None,
           gpus: int = 0) -> Capacity:
    """The agent's capacity: the flags where given, else the CPUs it may run on and the node's memory
    (or its own cgroup's limit, ``memory_limit``, when lower: an agent in a pod offers the pod's);
    ``gpus``: each slot's."""
    found = psutil.virtual_memory().total
    if memory_limit is not None:
        found = min(found, memory_limit)
    return Capacity(cpus=cpus if cpus is not None else float(len(os.sched_getaffinity(0))),
                    memory=memory if memory is not None else found, resource_class=resource_class, gpus=gpus)


class Ledger:
    """The requests of the trials this agent runs, and the wait for room (see the module's docstring)."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self._held: dict[int, Request] = {}
        self._next = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, request: Request, give_up: Callable[[], bool], poll: float = 0.5) -> Iterator[Fit]:
        """Wait until ``request`` fits and hold it for the block (``take``); ``never`` at once when it
        cannot fit here; ``wait`` (holding nothing) when ``give_up()`` turned true first."""
        token: int | None = None
        with self._cond:
            while True:
                decision = fit(request, self.capacity, self._held.values())
                if decision.verdict == "take":
                    token, self._next = self._next, self._next + 1
                    self._held[token] = request
                    break
                if decision.verdict == "never" or give_up():
                    break
                self._cond.wait(poll)
        try:
            yield decision
        finally:
            if token is not None:
                with self._cond:
                    del self._held[token]
                    self._cond.notify_all()

    @property
    def held(self) -> list[Request]:
        with self._cond:
            return list(self._held.values())
