"""The reconciliation's decision (services/planner/reconcile.py): which attempts the broker no longer holds."""

from __future__ import annotations

from spotsweep.services.planner.reconcile import Held, QueueFacts, decide


def queued(n: int, cls: str = "gpu", first: int = 0) -> list[Held]:
    return [Held(f"t{i}", 1, cls, idx=i) for i in range(first, first + n)]


def ids(verdict: object) -> list[str]:
    return [h.trial_id for h in verdict.republish]  # type: ignore[attr-defined]


def test_a_queue_that_is_gone_lost_every_queued_and_running_attempt_at_once() -> None:
    held = [*queued(2), Held("r", 3, "gpu", running=True)]
    verdict = decide(held, {"gpu": QueueFacts(ready=None)}, {}, now=0.0)
    assert ids(verdict) == ["t0", "t1", "r"] and verdict.certain == 3


def test_an_empty_queue_nobody_reads_lost_its_queued_attempts_at_once() -> None:
    verdict = decide(queued(4), {"gpu": QueueFacts(ready=0, consumers=0)}, {}, now=0.0)
    assert ids(verdict) == ["t0", "t1", "t2", "t3"] and verdict.certain == 4


def test_a_queue_holding_every_queued_attempt_is_left_alone() -> None:
    verdict = decide(queued(4), {"gpu": QueueFacts(ready=4, consumers=2)}, {}, now=0.0)
    assert verdict.republish == () and verdict.suspects == {}


def test_a_shortfall_with_agents_reading_waits_out_the_grace_then_republishes_only_what_is_short() -> None:
    held, facts = queued(4), {"gpu": QueueFacts(ready=1, consumers=2)}
    first = decide(held, facts, {}, now=100.0, grace=60)
    assert first.republish == () and set(first.suspects) == {(f"t{i}", 1) for i in range(4)}
    early = decide(held, facts, first.suspects, now=159.0, grace=60)
    assert early.republish == ()  # a start on its way to the planner has time to land
    late = decide(held, facts, early.suspects, now=160.0, grace=60)
    assert ids(late) == ["t0", "t1", "t2"] and late.certain == 0  # three short: the oldest three
    assert set(late.suspects) == {("t3", 1)}


def test_a_suspect_that_turns_up_is_forgotten() -> None:
    first = decide(queued(2), {"gpu": QueueFacts(ready=0, consumers=1)}, {}, now=0.0, grace=60)
    assert len(first.suspects) == 2
    later = decide(queued(2), {"gpu": QueueFacts(ready=2, consumers=1)}, first.suspects, now=100.0, grace=60)
    assert later.republish == () and later.suspects == {}


def test_a_running_attempt_is_left_to_its_agent_while_the_class_has_a_consumer() -> None:
    held = [Held("r", 1, "gpu", running=True)]
    verdict = decide(held, {"gpu": QueueFacts(ready=0, consumers=1)}, {("r", 1): 0.0}, now=1e6, grace=60)
    assert verdict.republish == () and verdict.suspects == {}


def test_a_running_attempt_with_no_consumer_left_is_republished_after_the_longer_running_grace() -> None:
    held = [Held("r", 2, "gpu", running=True)]
    facts = {"gpu": QueueFacts(ready=0, consumers=0)}
    first = decide(held, facts, {}, now=0.0, grace=60, running_grace=900)
    assert first.republish == ()  # maybe an agent draining, or cooling down, with its consumer cancelled
    assert decide(held, facts, first.suspects, now=899.0, grace=60, running_grace=900).republish == ()
    assert ids(decide(held, facts, first.suspects, now=900.0, grace=60, running_grace=900)) == ["r"]


def test_a_new_attempt_is_a_new_suspect() -> None:
    facts = {"gpu": QueueFacts(ready=0, consumers=1)}
    first = decide([Held("t", 1, "gpu")], facts, {}, now=0.0, grace=60)
    verdict = decide([Held("t", 2, "gpu")], facts, first.suspects, now=60.0, grace=60)
    assert verdict.republish == () and verdict.suspects == {("t", 2): 60.0}


def test_classes_are_reconciled_apart_and_an_unknown_class_is_left_alone() -> None:
    held = [*queued(2, "gpu"), *queued(2, "cpu", first=2)]
    verdict = decide(held, {"cpu": QueueFacts(ready=None)}, {}, now=0.0)
    assert ids(verdict) == ["t2", "t3"]
