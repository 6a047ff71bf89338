"""Trials wait in silence when no agent serves their resource class: ``submit`` and ``status`` say so.

Agents serve class ``gpu`` by default while a CPU example asks for ``cpu``:
its trials sit in ``spotsweep.trials.cpu`` and nothing else tells the user
why nothing runs. The broker knows each queue's consumers; a class whose
queue has none (or does not exist yet: no agent ever declared it) gets a
warning naming the class and the command that serves it.
"""

from __future__ import annotations

from collections.abc import Iterable

from spotsweep.shared import log, topology
from spotsweep.shared.broker.port import Broker
from spotsweep.shared.db import Database
from spotsweep.shared.errors import SpotsweepError
from spotsweep.shared.middleware import Backoff
from spotsweep.shared.runtime import connect_broker
from spotsweep.shared.settings import Settings
from spotsweep.shared.spec_models import Resources
from spotsweep.shared.tls import amqp_tls

_log = log.get("spotsweep.cli")
DEFAULT_CLASS = Resources.model_fields["resource_class"].default
ONCE = Backoff(attempts=1)  # `status` must answer at once even when RabbitMQ is down


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
    except SpotsweepError as e:
        _log.debug("cannot ask RabbitMQ which classes agents serve", error=str(e))
        return []
    try:
        return [advice(c) for c in unread(broker, classes)]
    except SpotsweepError as e:
        _log.debug("cannot ask RabbitMQ which classes agents serve", error=str(e))
        return []
    finally:
        broker.stop(drain=False)
