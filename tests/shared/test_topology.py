"""Each message kind is declared once: shared/messages.py's models are exactly the kinds shared/topology.py routes,
each to one consumer, and the bindings are built from those tables."""

from __future__ import annotations

import json
from pathlib import Path

from spotsweep.shared import messages, topology


def kind(model: type[messages.Envelope]) -> str:
    return str(model.model_fields["kind"].default)


def test_every_event_model_is_routed_to_exactly_one_consumer_and_every_routed_kind_has_a_model() -> None:
    routed = topology.PLANNER_KINDS + topology.COLLECTOR_KINDS
    assert len(set(routed)) == len(routed)  # one consumer each
    assert sorted(kind(m) for m in messages.EVENTS) == sorted(routed)


def test_the_commands_are_the_sweeps_queues_kinds() -> None:
    assert tuple(kind(m) for m in messages.COMMANDS) == topology.COMMAND_KINDS == messages.COMMAND_KINDS


def test_the_bindings_are_the_kinds_tables() -> None:
    assert topology.planner_events_queue().bindings == tuple((topology.EVENTS_EXCHANGE, f"{k}.#")
                                                             for k in topology.PLANNER_KINDS)
    assert topology.collector_queue().bindings == tuple((topology.EVENTS_EXCHANGE, f"{k}.#")
                                                        for k in topology.COLLECTOR_KINDS)


def test_every_model_decodes_by_its_kind() -> None:
    every = {kind(m) for m in (messages.TrialMessage, *messages.EVENTS, *messages.CONTROLS)}
    schemas = messages.json_schemas()
    assert every <= {d["properties"]["kind"]["const"] for d in schemas["$defs"].values() if "kind" in d.get("properties", {})}


def test_the_broker_definitions_file_binds_the_events_as_the_tables_do() -> None:
    """deploy/rabbitmq/definitions.json sets up a broker ahead of the services: the same event bindings."""
    definitions = json.loads((Path(__file__).resolve().parents[2] / "deploy/rabbitmq/definitions.json").read_text())
    bound = {(b["destination"], b["routing_key"]) for b in definitions["bindings"] if b["source"] == topology.EVENTS_EXCHANGE}
    assert bound == {(q.name, key) for q in (topology.planner_events_queue(), topology.collector_queue())
                     for _, key in q.bindings}
