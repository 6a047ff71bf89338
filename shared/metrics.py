"""The process's Prometheus metrics: one registry, every metric spotsweep exports.

One :class:`~prometheus_client.CollectorRegistry` per process (not the
library's global one, which other code may also fill): the services add to
these metrics from thin wrappers at their edges (the planner's publishes, the
collector's batch handler, the agent's slots and uploads) and
:mod:`spotsweep.shared.health` serves them at ``/metrics``. Labels are
bounded: a trial's state and a resource class, never a trial or sweep id.

Values the planner reads from PostgreSQL or RabbitMQ (trials in flight and
finished, queue depths) are sampled in the background and handed to
:class:`Sampled`, so a scrape never waits on a dependency.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

disable_created_metrics()  # no *_created series: dashboards never use them, and they double a scrape's size
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
PlatformCollector(registry=REGISTRY)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # the text format every Prometheus (2.x too) reads

# Planner.
TRIALS_DISPATCHED = Counter("spotsweep_trials_dispatched", "trial messages the planner published (confirmed by RabbitMQ), "
                            "first attempts and retries", registry=None)
# Collector.
POINTS_INGESTED = Counter("spotsweep_points_ingested", "metric points the collector stored (new ones: a redelivered "
                          "point is not counted twice)", registry=None)
INGEST_BATCH_SECONDS = Histogram("spotsweep_ingest_batch_seconds", "time to decode and write one batch of events",
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=None)
# Agent.
AGENT_SLOTS = Gauge("spotsweep_agent_slots", "trials this agent runs at once", registry=None)
AGENT_SLOTS_BUSY = Gauge("spotsweep_agent_slots_busy", "slots running a trial now", registry=None)
AGENT_PREEMPTIONS = Counter("spotsweep_agent_preemptions", "drains of this agent on a preemption (a notice or SIGTERM)",
                            registry=None)
CHECKPOINT_UPLOAD_SECONDS = Histogram("spotsweep_checkpoint_upload_seconds", "time to upload one checkpoint",
                                      buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600), registry=None)
CHECKPOINT_UPLOAD_BYTES = Counter("spotsweep_checkpoint_upload_bytes", "bytes of checkpoints uploaded", registry=None)


class Sampled(Collector):
    """Metrics whose values a background sampler sets (a scrape reads the last sample).

    ``kind`` is ``counter`` or ``gauge``; a counter's value is a total kept
    elsewhere (the database's count of trials that reached a state), so it
    survives the process's restarts. Before the first sample, and when the
    last one failed, nothing is exported (no made-up zeros)."""

    def __init__(self, name: str, documentation: str, kind: str, label: str | None = None) -> None:
        self.name, self.documentation, self.kind, self.label = name, documentation, kind, label
        self._values: dict[str, float] | None = None
        self._lock = threading.Lock()

    def set(self, values: dict[str, float] | None) -> None:
        """The new sample: by label value (``""`` without a label); None forgets the last one."""
        with self._lock:
            self._values = None if values is None else dict(values)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            values = self._values
        labels = [self.label] if self.label else []
        family: CounterMetricFamily | GaugeMetricFamily
        if self.kind == "counter":
            family = CounterMetricFamily(self.name, self.documentation, labels=labels)
        else:
            family = GaugeMetricFamily(self.name, self.documentation, labels=labels)
        for key, value in sorted((values or {}).items()):
            family.add_metric([key] if self.label else [], value)
        yield family


TRIALS_FINISHED = Sampled("spotsweep_trials_finished", "trials that ended, by final state (the results database's count)",
                          "counter", label="state")
TRIALS_IN_FLIGHT = Sampled("spotsweep_trials_in_flight", "trials pending, queued or running (the results database's count)",
                           "gauge")
QUEUE_DEPTH = Sampled("spotsweep_queue_depth", "trials waiting in spotsweep.trials.<class> (RabbitMQ's count, the "
                      "classes this planner published to)", "gauge", label="class")
# What each process exports: a service registers its own group (:func:`export`), so a planner's scrape
# has no agent series (and a sum over every pod of spotsweep_agent_slots counts agents only).
PLANNER: tuple[Collector, ...] = (TRIALS_DISPATCHED, TRIALS_FINISHED, TRIALS_IN_FLIGHT, QUEUE_DEPTH)
COLLECTOR: tuple[Collector, ...] = (POINTS_INGESTED, INGEST_BATCH_SECONDS)
AGENT: tuple[Collector, ...] = (AGENT_SLOTS, AGENT_SLOTS_BUSY, AGENT_PREEMPTIONS, CHECKPOINT_UPLOAD_SECONDS,
                                CHECKPOINT_UPLOAD_BYTES)
_exported: set[int] = set()
_exported_lock = threading.Lock()


def export(group: tuple[Collector, ...]) -> None:
    """Add a process's metrics to :data:`REGISTRY` (once each: local mode's one process may add several)."""
    with _exported_lock:
        for collector in group:
            if id(collector) not in _exported:
                _exported.add(id(collector))
                REGISTRY.register(collector)


def exposition() -> bytes:
    """The registry in Prometheus's text format."""
    return generate_latest(REGISTRY)


def names() -> set[str]:
    """Every spotsweep series a scrape of some process may show, as a query names it
    (counters with ``_total``, histograms' ``_bucket``, ``_sum`` and ``_count``)."""
    out: set[str] = set()
    for collector in (*PLANNER, *COLLECTOR, *AGENT):
        for metric in collector.collect():
            if metric.type == "histogram":
                out.update(f"{metric.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            else:
                out.add(f"{metric.name}_total" if metric.type == "counter" else metric.name)
    return out
