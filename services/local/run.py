"""``spotsweep run``: the whole sweep on one machine, no services configured.

The same planner, agent and collector code as in a cluster, wired to the
in-process broker (same ack and requeue semantics as RabbitMQ), an embedded
PostgreSQL (unless ``SPOTSWEEP_DATABASE_URL`` is set) and a local directory
for artifacts. Results land in the same views, so ``spotsweep report`` and
plain SQL work afterwards. Ctrl-C drains, and ``spotsweep resume`` goes on: :mod:`.interrupt`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.console import Console

from spotsweep.services.local import progress as local_progress
from spotsweep.services.local import spool as local_spool
from spotsweep.services.agent import main as agent
from spotsweep.services.agent.handlers import Connection, Slots
from spotsweep.services.collector import main as collector
from spotsweep.services.local.interrupt import Interrupts, sweep_lock, wait_settled
from spotsweep.services.planner import main as planner
from spotsweep.services.planner.bodies import new_sweep_id, submission
from spotsweep.services.planner.handlers import PlannerDeps, handle_events, handle_sweep_message, publish_pending
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.safe import printable
from spotsweep.shared import log, topology
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.batching import BatchingHandler
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import configured
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import without_store
from spotsweep.shared.limits import cap_text
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import LocalSettings
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import SweepSpec

_log = log.get("spotsweep.local")
GRACE = 30.0  # seconds a running trial gets to checkpoint after Ctrl-C (then SIGKILL)
AFTER_GRACE = 15.0  # for the stopped trials' uploads and reports past the grace


def run(spec: SweepSpec, settings: LocalSettings, workers: int, csv: Path | None, console: Console | None = None,
        dashboard: int | None = None) -> int:
    """Run a sweep on this machine; with ``dashboard`` (a port) serve the dashboard meanwhile."""
    console = console or Console(stderr=True)
    if settings.s3_endpoint is None and (why := without_store(spec.inputs)) is not None:
        raise PermanentError(why)  # before any trial: it would fail each one at staging
    db = configured(settings)  # the configured PostgreSQL, or the embedded one under SPOTSWEEP_HOME
    sweep_id = new_sweep_id(spec.name)
    with sweep_lock(settings.home, sweep_id):
        say(console, f"sweep {sweep_id} started; if this process stops or is killed, go on with:", resume_command(sweep_id))
        return serve(spec, settings, workers, db, sweep_id, csv, console, dashboard, submission(spec, sweep_id))


def resume_command(sweep_id: str) -> str:
    return f"spotsweep resume {sweep_id}"


def say(console: Console, text: str, command: str) -> None:
    """``text``, then ``command`` on a line of its own, never wrapped (a user copies it whole)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)


def serve(spec: SweepSpec, settings: LocalSettings, workers: int, db: Database, sweep_id: str, csv: Path | None,
          console: Console, dashboard: int | None, first: Outgoing | None = None) -> int:
    """Run the sweep's services here (``first`` published once they run) and the dashboard until the sweep ends."""
    note = concurrency_note(workers, spec.max_concurrent, total_trials(spec), os.cpu_count())
    if note is not None:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    stop_dashboard = serve_dashboard(db, dashboard, console)
    try:
        engine = start_engine(spec, settings, workers, db, sweep_id)
        if first is not None:
            engine.broker.publish(first)
        return drive(engine, db, sweep_id, csv, console)
    finally:
        stop_dashboard()


def concurrency_note(workers: int, max_concurrent: int, trials: int, cores: int | None) -> str | None:
    """Why this run holds fewer trials at once than the spec allows (said once, at the start), or None
    when it does not: local mode runs ``min(--workers, max_concurrent)``, and --workers defaults to 2."""
    wanted = min(max_concurrent, trials)
    if workers >= wanted:
        return None
    machine = f"; this machine has {cores} CPU cores" if cores else ""
    return (f"running {workers} trial(s) at once, not the spec's max_concurrent {max_concurrent}: --workers is {workers} "
            f"(default 2{machine}); --workers {wanted} runs {wanted} at once")


def serve_dashboard(db: Database, port: int | None, console: Console) -> Callable[[], None]:
    if port is None:
        return lambda: None
    from spotsweep.services.reporter.web.main import DEFAULT_HOST, serve_in_background  # deferred: Starlette, uvicorn

    db.migrate()  # the dashboard may be asked for a page before the planner has migrated
    stop = serve_in_background(db, DEFAULT_HOST, port)
    console.print(f"dashboard: http://{DEFAULT_HOST}:{port}/ (while the sweep runs; `spotsweep dashboard` afterwards)")
    return stop


@dataclass
class Engine:
    """Local mode's services in this process: the planner, the collector and an agent over one in-process broker."""

    broker: MemoryBroker
    planner: PlannerDeps
    collector: BatchingHandler
    agent: Connection
    home: Path  # SPOTSWEEP_HOME: where `spotsweep extend` leaves extensions for this process

    def take_extensions(self, sweep_id: str) -> None:
        """Hand the sweep's waiting extensions (:mod:`.spool`) to the planner, and wait until
        it has applied them: the sweep's state read next already counts their trials."""
        if local_spool.take(self.home, sweep_id, self.broker.publish):
            wait_settled(self.broker, (topology.SWEEPS_QUEUE,))

    def drain(self, grace: float) -> None:
        """The agent's preemption drain: no more trials; running ones get SIGTERM and ``grace``
        seconds to checkpoint, are reported preempted, and the planner puts them back."""
        self.agent.agent.preempt.set()
        if self.agent.trials_consumer is not None:
            self.agent.trials_consumer.cancel()  # prefetched trials are handed back, not started
        self.agent.wait_idle(timeout=grace + AFTER_GRACE)
        # Every event in: a point the collector has not stored would be lost with this broker.
        wait_settled(self.broker, (topology.PLANNER_EVENTS_QUEUE, topology.COLLECTOR_QUEUE))

    def close(self) -> None:
        self.broker.stop(drain=True)
        self.agent.slots.remove_workspaces()
        self.collector.close()
        self.planner.close()

    def kill(self) -> None:
        """No trial may outlive this process: stop them all now (an error, a second signal)."""
        self.agent.agent.kill.set()
        agent.kill_all()


def start_engine(spec: SweepSpec, settings: LocalSettings, workers: int, db: Database, sweep_id: str) -> Engine:
    """Start the services for ``sweep_id``; its ``pending`` trials (none for a new sweep) are published."""
    broker = MemoryBroker()
    store = LocalArtifactStore(settings.home / "artifacts")
    resource_class = spec.resources.resource_class
    planner_deps = _planner(broker, db, resource_class, settings.queue_window, store, sweep_id)
    batcher = collector.start(broker, db)
    deps = agent.start(broker, store, Slots(workers, agent.detect_gpus()), resource_class, settings.home / "work",
                       agent_id="local", log_upload_seconds=settings.log_upload_seconds,
                       code_dir=Path(spec.workdir) if spec.workdir else None)  # workdir: trials run in it, in place
    deps.agent.grace = GRACE
    threading.Thread(target=broker.run, name="broker", daemon=True).start()
    return Engine(broker, planner_deps, batcher, deps, settings.home)


def _planner(broker: MemoryBroker, db: Database, resource_class: str, window: int | None, store: LocalArtifactStore,
             sweep_id: str) -> PlannerDeps:
    """:func:`planner.start`, with the outbox recovered for this sweep only: the embedded
    database may hold other interrupted sweeps, which only their own `resume` continues."""
    broker.declare(topology.service_queues((resource_class,)))
    db.migrate()
    deps = PlannerDeps(db=db, broker=broker, window=window, store=store)
    publish_pending(deps, sweep_id)
    broker.consume(topology.SWEEPS_QUEUE, partial(handle_sweep_message, deps=deps), prefetch=1)
    batcher = BatchingHandler(partial(handle_events, deps=deps), max_batch=planner.EVENT_BATCH, max_wait=0.0,
                              name="planner-events")
    broker.consume(topology.PLANNER_EVENTS_QUEUE, batcher, prefetch=planner.EVENT_BATCH * 2)
    deps.batchers.append(batcher)
    return deps


def drive(engine: Engine, db: Database, sweep_id: str, csv: Path | None, console: Console) -> int:
    """Follow the sweep to its end and report it; the first Ctrl-C or SIGTERM drains, the second stops at once."""
    hint = f"Resume with: {resume_command(sweep_id)}"
    try:
        with Interrupts(engine.kill, hint) as interrupts:
            state = local_progress.follow(db, sweep_id, console, interrupts.draining,
                                         partial(engine.take_extensions, sweep_id))
            if state is None:
                console.print(f"interrupted: draining, running trials checkpoint and stop (up to {GRACE:g} s; "
                              "Ctrl-C again to stop at once)")
                engine.drain(GRACE)
                engine.close()
                return _interrupted(db, sweep_id, console)
    except BaseException:  # an error: no trial may outlive this process
        engine.kill()
        engine.broker.stop(drain=False)
        engine.agent.slots.remove_workspaces()
        raise
    if state == "cancelled":  # `spotsweep cancel` from another terminal: stop its trials here
        engine.agent.agent.cancel(sweep_id)
    engine.close()
    return _finish(db, sweep_id, state, csv, console)


def _interrupted(db: Database, sweep_id: str, console: Console) -> int:
    rows = reporter.sweep_counts(db, sweep_id)
    if not rows:
        console.print("interrupted before the planner recorded the sweep: nothing to resume")
        return ExitCode.INTERRUPTED
    r = rows[0]
    if r["state"] != "running":
        console.print(f"interrupted: sweep {sweep_id} had ended meanwhile: {r['state']}")
        return ExitCode.INTERRUPTED
    console.print(f"interrupted: sweep {sweep_id} stopped with {r['completed']} of {r['total_trials']} trial(s) "
                  "completed; the others resume from their last checkpoint")
    say(console, "resume with:", resume_command(sweep_id))
    print(sweep_id)
    return ExitCode.INTERRUPTED


def _finish(db: Database, sweep_id: str, state: str, csv: Path | None, console: Console) -> int:
    if state == "rejected":
        raise PermanentError(f"sweep refused: {printable(cap_text(reporter.sweep_counts(db, sweep_id)[0]['error'] or ''))}")
    rep = reporter.build(db, sweep_id)
    reporter.print_leaderboard(rep)
    if csv is not None:
        n = reporter.write_csv(rep, csv)
        console.print(f"wrote {n} rows to {csv}")
    sweep = reporter.sweep_counts(db, sweep_id)[0]
    for why in (sweep["error"], sweep["note"]):
        if why:  # trial output can reach a sweep's error: escaped and bounded like every report line
            console.print(printable(cap_text(why), newlines=True), markup=False, highlight=False)
    say(console, f"sweep {sweep_id}: {state}; results in the trial_results view and in:", f"spotsweep report {sweep_id}")
    print(sweep_id)
    # Pruned trials did what early stopping asked of them; failed or cancelled ones did not.
    every_trial_ended_well = all(r["state"] in ("completed", "pruned") for r in rep.unranked)
    return ExitCode.OK if state == "completed" and every_trial_ended_well else ExitCode.FAILED
