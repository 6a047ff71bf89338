"""Which trials the broker no longer holds: PostgreSQL against RabbitMQ, decided without I/O.

PostgreSQL is the record (docs/faults.md, "RabbitMQ comes back empty"): a
broker that lost its messages leaves attempts ``queued`` or ``running`` that
the outbox (``pending`` rows only) would never publish again. :func:`decide`
compares them with each class's queue (a passive declare: ready messages,
consumers; ``None`` when the queue is gone); :mod:`.reconciler` does the I/O.

A classic queue tells how many messages it holds, not which, so only a queue
gone (every ``queued`` and ``running`` attempt lost) or empty with no consumer
(every ``queued`` one lost) is certain. Otherwise a shortfall may be an
agent's start or end still on its way: an attempt is republished only once
suspect for ``grace`` seconds in a row, the longest-suspect first, only as
many as are short. A wrong guess is harmless: attempt fencing stops a second
run of a live attempt (:mod:`.decide`, :mod:`services.agent.attempts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

GRACE_S = 60.0  # how long a queued attempt stays suspect before an uncertain case republishes it
# A running one, with no consumer on its class: longer than an agent's drain (--grace + --after-grace)
# and its node breaker's cooldown (10 min), during which it runs its trials with its consumer cancelled.
RUNNING_GRACE_S = 900.0

Key = tuple[str, int]  # (trial_id, attempt)


@dataclass(frozen=True)
class Held:
    """A trial the database holds as waiting on the broker: ``queued`` or ``running``."""

    trial_id: str
    attempt: int
    resource_class: str
    running: bool = False
    idx: int = 0  # tie-break between attempts suspect since the same moment: older trials first

    @property
    def key(self) -> Key:
        return self.trial_id, self.attempt


@dataclass(frozen=True)
class QueueFacts:
    """One class's trials queue as a passive declare saw it; ``ready`` None: the queue does not exist."""

    ready: int | None
    consumers: int = 0


@dataclass(frozen=True)
class Verdict:
    republish: tuple[Held, ...] = ()
    suspects: dict[Key, float] = field(default_factory=dict)  # since when each attempt has been suspect (kept)
    certain: int = 0  # of ``republish``, those certainly missing (queue gone or empty and unread)


def decide(held: Sequence[Held], queues: Mapping[str, QueueFacts], suspects: Mapping[Key, float], now: float,
           grace: float = GRACE_S, running_grace: float = RUNNING_GRACE_S) -> Verdict:
    """The attempts to publish again, given the database's ``held`` trials (read before the
    broker was asked), each class's ``queues`` facts (a class missing from it: unknown, left
    alone), the ``suspects`` of the last call and the time ``now`` (seconds, any monotonic clock)."""
    out: list[Held] = []
    kept: dict[Key, float] = {}
    certain = 0
    for cls in sorted({h.resource_class for h in held}):
        facts = queues.get(cls)
        if facts is None:
            continue
        mine = [h for h in held if h.resource_class == cls]
        queued = [h for h in mine if not h.running]
        running = [h for h in mine if h.running]
        if facts.ready is None:  # the queue is gone, and every delivery of it
            out += queued + running
            certain += len(queued) + len(running)
            continue
        if facts.ready == 0 and facts.consumers == 0:  # nothing ready, nothing held by an agent
            out += queued
            certain += len(queued)
        else:
            short = max(0, len(queued) - facts.ready)
            out += _due(queued if short else [], suspects, now, grace, kept)[:short]
        if facts.consumers == 0:  # running with no consumer: lost, or an agent draining or cooling down
            out += _due(running, suspects, now, running_grace, kept)
    return Verdict(republish=tuple(out), suspects={k: v for k, v in kept.items() if k not in {h.key for h in out}},
                   certain=certain)


def _due(unsure: list[Held], suspects: Mapping[Key, float], now: float, grace: float,
         kept: dict[Key, float]) -> list[Held]:
    """Of ``unsure``, those suspect for ``grace`` seconds, longest first; every one is kept suspect."""
    for h in unsure:
        kept[h.key] = suspects.get(h.key, now)
    ripe = [h for h in unsure if now - kept[h.key] >= grace]
    return sorted(ripe, key=lambda h: (kept[h.key], h.idx))
