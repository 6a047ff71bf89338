"""``spotsweep run``: the whole sweep on one machine, no services configured.

The same planner, agent and collector code as in a cluster, wired to the
in-process broker (same ack and requeue semantics as RabbitMQ), an embedded
PostgreSQL (unless ``SPOTSWEEP_DATABASE_URL`` is set) and a local directory
for artifacts. Results land in the same views, so ``spotsweep report`` and
plain SQL work afterwards.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spotsweep.services.agent import main as agent
from spotsweep.services.agent.handlers import Slots
from spotsweep.services.collector import main as collector
from spotsweep.services.planner import main as planner
from spotsweep.services.planner import store as planner_store
from spotsweep.services.planner.handlers import new_sweep_id, submission
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.safe import printable
from spotsweep.shared import log
from spotsweep.shared.artifacts.local import LocalArtifactStore
from spotsweep.shared.broker.memory import MemoryBroker
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import embedded_url
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.limits import cap_text
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import LocalSettings, Settings
from spotsweep.shared.spec import SweepSpec
from spotsweep.shared.tls import pg_options

_log = log.get("spotsweep.local")


def database(settings: Settings) -> Database:
    """The configured PostgreSQL, or the embedded one under ``SPOTSWEEP_HOME``."""
    if settings.database_url is not None:
        return Database(settings.database_url.get_secret_value(), options=pg_options(settings))
    return Database(embedded_url(settings.home / "pg"))


def run(spec: SweepSpec, settings: LocalSettings, workers: int, csv: Path | None, console: Console | None = None,
        dashboard: int | None = None) -> int:
    """Run a sweep on this machine; with ``dashboard`` (a port) serve the dashboard meanwhile."""
    console = console or Console(stderr=True)
    db = database(settings)
    stop_dashboard = _dashboard(db, dashboard, console)
    try:
        return _run(spec, settings, workers, csv, console, db)
    finally:
        stop_dashboard()


def _dashboard(db: Database, port: int | None, console: Console) -> Callable[[], None]:
    if port is None:
        return lambda: None
    from spotsweep.services.reporter.web.main import DEFAULT_HOST, serve_in_background

    db.migrate()  # the dashboard may be asked for a page before the planner has migrated
    stop = serve_in_background(db, DEFAULT_HOST, port)
    console.print(f"dashboard: http://{DEFAULT_HOST}:{port}/ (while the sweep runs; `spotsweep dashboard` afterwards)")
    return stop


def _run(spec: SweepSpec, settings: LocalSettings, workers: int, csv: Path | None, console: Console, db: Database) -> int:
    broker = MemoryBroker()
    store = LocalArtifactStore(settings.home / "artifacts")
    resource_class = spec.resources.resource_class
    planner_deps = planner.start(broker, db, (resource_class,), window=settings.queue_window, store=store)
    batcher = collector.start(broker, db)
    deps = agent.start(broker, store, Slots(workers, agent.detect_gpus()), resource_class, settings.home / "work",
                       agent_id="local", log_upload_seconds=settings.log_upload_seconds)
    io = threading.Thread(target=broker.run, name="broker", daemon=True)
    io.start()

    sweep_id = new_sweep_id(spec.name)
    broker.publish(submission(spec, sweep_id))
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill`/`timeout` stop trials like Ctrl-C does
    followed = False
    try:
        state = _follow(db, sweep_id, console)
        followed = True
    except KeyboardInterrupt:
        with db.transaction() as conn:
            planner_store.cancel_sweep(conn, sweep_id)
        console.print(f"interrupted: trials stopped, sweep {sweep_id} cancelled")
        return ExitCode.KILLED
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not followed:  # interrupted, or an error: no trial may outlive this process
            deps.agent.kill.set()
            agent.kill_all()
            broker.stop(drain=False)
            deps.agent.slots.remove_workspaces()
    broker.stop(drain=True)
    deps.agent.slots.remove_workspaces()
    batcher.close()
    planner_deps.close()
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
    console.print(f"sweep {sweep_id}: {state}; results in `spotsweep report {sweep_id}` and the trial_results view")
    print(sweep_id)
    # Pruned trials did what early stopping asked of them; failed or cancelled ones did not.
    every_trial_ended_well = all(r["state"] in ("completed", "pruned") for r in rep.unranked)
    return ExitCode.OK if state == "completed" and every_trial_ended_well else ExitCode.FAILED


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _follow(db: Database, sweep_id: str, console: Console, poll: float = 0.2, accept_within: float = 30.0) -> str:
    """Show a progress bar until the sweep leaves ``running``; return its state.

    The planner records every spec it receives, even a refused one; a sweep
    that never shows up means the planner failed on it (its log says why).
    """
    deadline = time.monotonic() + accept_within
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("trials", total=None, detail="")
        while True:
            rows = reporter.sweep_counts(db, sweep_id)
            if rows:
                r = rows[0]
                done = r["completed"] + r["failed"] + r["cancelled"] + r["pruned"]
                detail = f"running {r['running']}  failed {r['failed']}" if r["failed"] else f"running {r['running']}"
                progress.update(task, total=r["total_trials"] or None, completed=done, detail=detail)
                if r["state"] != "running":
                    return str(r["state"])
            elif time.monotonic() > deadline:
                raise PermanentError(f"the planner did not record sweep {sweep_id} within {accept_within:.0f}s; "
                                     "run with --log-level INFO to see why")
            time.sleep(poll)
