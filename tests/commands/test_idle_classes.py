"""A request no agent of its class can ever hold is named, with the field, the request and the most offered."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from spotsweep.services.collector.handlers import write_events
from spotsweep.commands.idle_classes import Offer, unfit, unfit_for
from spotsweep.shared.db import Database
from spotsweep.shared.messages import AgentSeen
from spotsweep.shared.spec_models import Resources

GI = 2**30
FLEET = [Offer(cpus=8, memory=32 * GI), Offer(cpus=32, memory=16 * GI)]


def ask(**resources: object) -> Resources:
    return Resources.model_validate({"class": "gpu", **resources})


def test_a_request_one_agent_can_hold_is_not_named() -> None:
    assert unfit("gpu", ask(memory="32Gi", cpus=8), FLEET) is None
    assert unfit("gpu", ask(cpus=32), FLEET) is None
    assert unfit("gpu", ask(), FLEET) is None


def test_nothing_is_said_when_no_agent_of_the_class_was_seen() -> None:
    assert unfit("gpu", ask(memory="1Ti"), []) is None  # older agents, or none yet: the consumer check speaks


def test_the_field_the_request_and_the_most_offered_are_named() -> None:
    assert unfit("gpu", ask(memory="64Gi"), FLEET) == (
        "no agent of class gpu offers 64 GiB (resources.memory; the most any of 2 agents seen offers is 32 GiB)")
    assert unfit("gpu", ask(cpus=64), FLEET) == (
        "no agent of class gpu offers 64 cores (resources.cpus; the most any of 2 agents seen offers is 32)")
    both = unfit("gpu", ask(cpus=64, memory="64Gi"), FLEET)
    assert both is not None and "64 GiB (resources.memory" in both and " or 64 cores (resources.cpus" in both


def test_a_request_each_agent_lacks_a_different_part_of_is_named_whole() -> None:
    reason = unfit("gpu", ask(cpus=16, memory="24Gi"), FLEET)
    assert reason == ("no agent of class gpu offers both 16 cores and 24 GiB (resources.cpus and resources.memory; "
                      "each of the 2 agents seen lacks one)")


def test_only_agents_of_the_class_seen_in_the_last_minutes_count(database_url: str) -> None:
    db = Database(database_url)
    db.migrate()
    now = datetime.now(timezone.utc)
    write_events([AgentSeen(agent="big-gone", resource_class="gpu", slots=1, cpus=64, memory=512 * GI,
                            time=now - timedelta(hours=1)),
                  AgentSeen(agent="big-cpu", resource_class="cpu", slots=1, cpus=64, memory=512 * GI, time=now),
                  AgentSeen(agent="small", resource_class="gpu", slots=1, cpus=8, memory=32 * GI, time=now)], db)
    assert unfit_for(db, ask(memory="64Gi")) == (
        "no agent of class gpu offers 64 GiB (resources.memory; the most any of 1 agent seen offers is 32 GiB)")
    assert unfit_for(db, ask(memory="32Gi")) is None
