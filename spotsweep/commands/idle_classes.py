"""Trials wait in silence when no agent serves their resource class, or none can hold them: ``submit`` and ``status`` say so.

Agents serve class ``gpu`` by default while a CPU example asks for ``cpu``:
its trials sit in ``spotsweep.trials.cpu`` and nothing else tells the user
why nothing runs. The broker knows each queue's consumers; a class whose
queue has none (or does not exist yet: no agent ever declared it) gets a
warning naming the class and the command that serves it.

A trial asking more ``resources.cpus``/``memory`` than any agent of its
class offers in all is refused by each agent it reaches. Agents announce
what they offer (``services/agent/announce.py``; the view ``agent_capacity``):
:func:`unfit`, pure, names the field, what was asked and the most any agent
seen in the last :data:`RECENT_S` seconds offers. No agent seen (none yet, or
agents older than the announcement): nothing is said, the consumer check speaks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import configured
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.quantity import human_bytes
from spotsweep.shared.runtime import connect_broker
from spotsweep.shared.settings import Settings
from spotsweep.shared.spec_models import Resources
from spotsweep.shared.tls import amqp_tls

_log = log.get("spotsweep.cli")
DEFAULT_CLASS = Resources.model_fields["resource_class"].default
ONCE = Backoff(attempts=1)  # `status` must answer at once even when RabbitMQ is down
RECENT_S = 300  # agents announce every minute (services/agent/announce.py): five missed, it is gone


def unread(broker: Broker, classes: Iterable[str]) -> list[str]:
    """The classes whose trial queue no agent consumes, in order."""
    return [c for c in dict.fromkeys(classes) if not broker.consumers(topology.trials_queue(c))]


def advice(resource_class: str) -> str:
    return (f"warning: no agent serves resource class {resource_class!r} (queue {topology.trials_queue(resource_class)} "
            f"has no consumer): its trials wait until one runs `spotsweep agent --class {resource_class}`")


def waiting_classes(db: Database) -> list[str]:
    """Resource classes of running sweeps that have trials waiting for an agent."""
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT DISTINCT COALESCE(spec->'resources'->>'class', %s) AS class FROM sweep_results"
            " WHERE state = 'running' AND pending + queued > 0 ORDER BY 1", (DEFAULT_CLASS,)).fetchall()
    return [r["class"] for r in rows]


def warnings_for(settings: Settings, classes: list[str]) -> list[str]:
    """Best effort, for ``status``: one connection attempt, and nothing said when RabbitMQ cannot be asked."""
    if not classes:
        return []
    try:
        broker = connect_broker(settings.amqp_url.get_secret_value(), settings.heartbeat, ONCE, amqp_tls(settings))
        try:
            return [advice(c) for c in unread(broker, classes)]
        finally:
            broker.stop(drain=False)
    except SpotsweepError as e:
        _log.debug("cannot ask RabbitMQ which classes agents serve", error=str(e))
        return []


@dataclass(frozen=True)
class Offer:
    """What one agent offers its trials in all (a row of ``agent_capacity``)."""

    cpus: float
    memory: int


def unfit(resource_class: str, resources: Resources, offers: list[Offer]) -> str | None:
    """Why no agent in ``offers`` (those of ``resource_class`` seen recently) can ever hold a trial asking
    ``resources``: the field, the request and the most offered; None when one can, or none is known."""
    cpus, memory = resources.cpus or 0.0, resources.memory or 0
    if not offers or any(cpus <= o.cpus + 1e-9 and memory <= o.memory for o in offers):
        return None
    most_memory, most_cpus = max(o.memory for o in offers), max(o.cpus for o in offers)
    seen = f"{len(offers)} agent{'s' if len(offers) > 1 else ''} seen"
    short = []
    if memory > most_memory:
        short.append(f"{human_bytes(memory)} (resources.memory; the most any of {seen} offers is {human_bytes(most_memory)})")
    if cpus > most_cpus + 1e-9:
        short.append(f"{cpus:g} cores (resources.cpus; the most any of {seen} offers is {most_cpus:g})")
    if not short:
        short.append(f"both {cpus:g} cores and {human_bytes(memory)} (resources.cpus and resources.memory; "
                     f"each of the {seen} lacks one)")
    return f"no agent of class {resource_class} offers " + " or ".join(short)


def offers(db: Database, resource_class: str) -> list[Offer]:
    """What the agents of ``resource_class`` seen in the last :data:`RECENT_S` seconds offer (the database's clock)."""
    with db.transaction() as conn:
        rows = conn.execute("SELECT cpus, memory FROM agent_capacity WHERE resource_class = %s"
                            " AND last_seen > now() - make_interval(secs => %s)", (resource_class, RECENT_S)).fetchall()
    return [Offer(r["cpus"], r["memory"]) for r in rows]


def unfit_for(db: Database, resources: Resources) -> str | None:
    """:func:`unfit` over the database's recent agents; None (logged) when it cannot be asked
    (down, or a schema from before the ``agents`` table)."""
    try:
        return unfit(resources.resource_class, resources, offers(db, resources.resource_class))
    except SpotsweepError as e:
        _log.debug("cannot ask the database what agents offer", error=str(e))
        return None


def waiting_unfit(db: Database) -> dict[str, str]:
    """For ``status``: why, by sweep id, for each running sweep with trials waiting that no agent can hold."""
    with db.transaction() as conn:
        rows = conn.execute("SELECT sweep_id, spec->'resources' AS resources FROM sweep_results"
                            " WHERE state = 'running' AND pending + queued > 0").fetchall()
    found = {}
    for row in rows:
        resources = _resources(row["resources"])
        if resources is not None and (reason := unfit_for(db, resources)) is not None:
            found[row["sweep_id"]] = reason
    return found


def staging(db: Database) -> dict[str, int]:
    """For ``status``: by running sweep, its queued trials whose agent is setting them up (``trial.staging``:
    inputs, setup.pip env, image) and has not started their process yet: waiting on data, not on a slot."""
    with db.transaction() as conn:
        rows = conn.execute(  # over the views (docs/results.md): what the reader role may read
            "SELECT t.sweep_id, count(*) AS n FROM trial_results t JOIN sweep_results s USING (sweep_id)"
            " JOIN LATERAL (SELECT j.run_id FROM trial_journal j WHERE j.trial_id = t.trial_id"
            "   AND j.attempt = t.attempts AND j.kind = 'trial.staging' ORDER BY recorded_at DESC LIMIT 1) st ON true"
            " WHERE s.state = 'running' AND t.state = 'queued' AND NOT EXISTS (SELECT 1 FROM trial_journal j"
            "   WHERE j.trial_id = t.trial_id AND j.kind = 'trial.started' AND j.run_id = st.run_id)"
            " GROUP BY t.sweep_id").fetchall()
    return {r["sweep_id"]: r["n"] for r in rows}


def _resources(value: Any) -> Resources | None:
    try:
        return Resources.model_validate(value or {})
    except ValueError:
        return None  # the planner accepted it: a spec of another version, not this check's to judge


def submit_warning(settings: Settings, resources: Resources) -> str | None:
    """For ``submit``: a warning when no agent of the class seen recently can hold ``resources``.
    Only with ``SPOTSWEEP_DATABASE_URL`` (the cluster's database, where the collector records agents)."""
    if settings.database_url is None:
        return None
    db = configured(settings)
    try:
        reason = unfit_for(db, resources)
    finally:
        db.close()
    return None if reason is None else (f"warning: {reason}: each agent of the class refuses its trials (an attempt "
                                        "failed each) until one that offers it serves the class (docs/faults.md)")
