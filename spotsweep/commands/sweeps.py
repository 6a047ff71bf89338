"""The CLI's commands that talk to the services: submit, wait, cancel, status, report, export (``ls``: :mod:`.listing`).

Kept apart from argument parsing so tests call them directly.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from spotsweep.commands import idle_classes
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter.budget_line import budget_line, caps_of, spent_of
from spotsweep.services.reporter.safe import cell, printable, shown
from spotsweep.services.reporter.values import json_ready
from spotsweep.shared import messages, topology
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.db.embedded import for_reading
from spotsweep.shared.db import Database
from spotsweep.shared.db.migrator import SchemaNotReady
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.limits import cap_text, is_sweep_id
from spotsweep.shared.runtime import CLI_BACKOFF, ExitCode, connect_broker
from spotsweep.shared.settings import Settings
from spotsweep.shared.naming import placeholders
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import SweepSpec, load_spec_file, parse_spec, spec_json_schema
from spotsweep.shared.spec_search import summary
from spotsweep.shared.tls import amqp_tls


def resolve_command(spec: SweepSpec, spec_dir: Path) -> SweepSpec:
    """Make a relative command argument that names a file next to the spec absolute.

    ``command: [python, mlp/train.py]`` in ``examples/x.yaml`` then works from
    any working directory (the agent starts trials in a fresh one). On a
    cluster the file must exist at the same path on every agent node, unless
    the spec has a ``workdir``: then the command is left as written, and its
    relative paths resolve inside the workdir, the trial's working directory.
    """
    if spec.workdir is not None:
        return spec
    argv = []
    for arg in spec.command:
        candidate = spec_dir / arg
        if "{" not in arg and not Path(arg).is_absolute() and candidate.is_file():
            arg = str(candidate.resolve())
        argv.append(arg)
    return spec.model_copy(update={"command": argv})


def load(path: Path) -> SweepSpec:
    return resolve_command(load_spec_file(path), path.parent)


_SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".jl", ".R", ".lua", ".js")


def warnings(spec: SweepSpec) -> list[str]:
    """Things that validate but are probably mistakes (after :func:`load`)."""
    out = []
    used = {name for arg in spec.command for name in placeholders(arg)}
    if spec.repeats > 1 and "seed" not in used:
        out.append(f"repeats: {spec.repeats} but no {{seed}} in command: the seed of each repeat is only in "
                   "SPOTSWEEP_PARAMS; a script that takes its seed from argv runs the same trial each time")
    for i, arg in enumerate(spec.command):
        if not arg.endswith(_SCRIPT_SUFFIXES) or "{" in arg:
            continue
        if spec.workdir is not None and not (Path(spec.workdir) / arg).is_file():
            out.append(f"command[{i}]: {arg!r} is not a file in workdir {spec.workdir}, where trials run")
        elif spec.workdir is None and not Path(arg).is_file():
            out.append(f"command[{i}]: {arg!r} is not a file next to the spec nor an absolute path; "
                       "trials run in an empty working directory")
    return out + spec.strategy.warnings(spec)


def describe(spec: SweepSpec) -> str:
    return (
        f"ok: {spec.name}: {total_trials(spec)} trial(s), {summary(spec)}, "
        f"metric {spec.metric.name} ({spec.metric.mode}), at most {spec.max_concurrent} at once"
    )


def schemas() -> dict[str, Any]:
    return {"spec": spec_json_schema(), "messages": messages.json_schemas()}


def migrate(settings: Settings) -> str:
    """``spotsweep migrate``: bring the results database's schema up to date."""
    from spotsweep.shared.db.embedded import configured as local_database

    applied = local_database(settings).migrate()
    return f"applied migration(s): {', '.join(applied)}" if applied else "the schema is up to date"


def _post(message: Outgoing, settings: Settings, served: str | None = None) -> None:
    """Declare the sweeps queue (so a message posted before the planner starts
    waits durably) and post ``message`` with a confirm; then, for ``served``,
    warn on stderr when no agent serves that resource class."""
    broker = connect_broker(settings.amqp_url.get_secret_value(), settings.heartbeat, CLI_BACKOFF, amqp_tls(settings))
    try:
        broker.declare([topology.dead_letter_queue(), topology.sweeps_queue()])
        broker.publish(message)
        for resource_class in idle_classes.unread(broker, [served] if served else []):
            print(idle_classes.advice(resource_class), file=sys.stderr)
    finally:
        broker.stop(drain=False)


def submit(spec: SweepSpec, settings: Settings) -> str:
    """Post the spec to the planner, its workdir packed and uploaded first; returns the new sweep's id."""
    # Imported here, as in cancel and extend: the packer (S3 client) and the planner's handlers
    # take 0.6 s to import, which `ls`, `status` and `report` would otherwise pay at every call.
    from spotsweep.commands import code_upload
    from spotsweep.services.planner.handlers import new_sweep_id, submission

    spec = code_upload.with_code(spec, settings)
    sweep_id = new_sweep_id(spec.name)
    _post(submission(spec, sweep_id), settings, served=spec.resources.resource_class)
    if (too_big := idle_classes.submit_warning(settings, spec.resources)) is not None:
        print(too_big, file=sys.stderr)
    return sweep_id


def _named(sweep_id: str) -> str:
    """A sweep id as an error message shows it: bounded, quoted, escaped."""
    return repr(printable(cap_text(sweep_id, 200)))


def _unknown(sweep_id: str) -> PermanentError:
    return PermanentError(f"no sweep with id {_named(sweep_id)} (see `spotsweep status`)")


def _sweep_database(settings: Settings, sweep_id: str) -> Database:
    """The database for a command about one sweep: on one where nothing ran yet, the sweep is unknown."""
    db = database_if_any(settings)
    if db is None:
        raise _unknown(sweep_id)
    return db


def _by_id_or_name(db: Database | None, sweep: str) -> str:
    """The id of sweep ``sweep``: an id, or a name (its newest sweep), as `logs --sweep` takes it
    (``db`` None: a database nothing ran on)."""
    from spotsweep.services.reporter.web.queries import find_sweep

    header = None
    if db is not None:
        with db.transaction() as conn:
            header = find_sweep(conn, sweep)
    if header is None:
        raise PermanentError(f"no sweep has the id or name {_named(sweep)} (see `spotsweep ls`)")
    return str(header["sweep_id"])


def _postable(sweep_id: str) -> None:
    """Refuse an id the planner would refuse (``submit`` makes ``name-<hex8>``), before posting it."""
    if not is_sweep_id(sweep_id):
        raise PermanentError(f"sweep id {_named(sweep_id)} is not of the form NAME-<8 hex digits> that `submit` makes; "
                             "the planner would refuse it")


def _resolve(settings: Settings, sweep: str) -> tuple[Database, str]:
    """The database and id of sweep ``sweep``: an id, or a name (its newest sweep), as `report` takes it."""
    db = database_if_any(settings)
    sweep_id = _by_id_or_name(db, sweep)
    assert db is not None  # a database nothing ran on knows no sweep: refused just above
    return db, sweep_id


def _run_here(settings: Settings, sweep_id: str) -> bool:
    """Whether the sweep is local mode's: no ``SPOTSWEEP_DATABASE_URL``, or a `spotsweep run`
    with this ``SPOTSWEEP_HOME`` started it (its lock file stays in ``runs/``). Its planner
    is in the process that runs it, which no RabbitMQ message reaches."""
    if settings.database_url is None:
        return True
    return is_sweep_id(sweep_id) and (settings.home / "runs" / f"{sweep_id}.lock").exists()


def _reachable(db: Database, sweep_id: str, what: str) -> None:
    """Refuse to post about a sweep that a `spotsweep run` elsewhere ran (its trials ran on
    agent ``local``): no planner reads the sweeps queue for it, so the message would lie there unread."""
    with db.transaction() as conn:
        local = conn.execute("SELECT 1 FROM trial_results WHERE sweep_id = %s AND agent = 'local' LIMIT 1",
                             (sweep_id,)).fetchone()
    if local is not None:
        raise PermanentError(f"sweep {_named(sweep_id)} was run by `spotsweep run` with another SPOTSWEEP_HOME (or on "
                             f"another machine), not by a planner: {what} it where it ran, with that SPOTSWEEP_HOME")


def cancel(sweep: str, settings: Settings) -> str:
    """Ask the planner to cancel a sweep the results database knows (by id or name): a typo
    is refused here (exit 2), instead of leaving a cancelled row for an id no one ran.
    A local mode sweep is cancelled in its database, no RabbitMQ involved
    (:func:`spotsweep.services.local.resume.cancel`)."""
    db, sweep_id = _resolve(settings, sweep)
    if _run_here(settings, sweep_id):
        from spotsweep.services.local import resume

        return resume.cancel(sweep_id, settings)
    _postable(sweep_id)
    _reachable(db, sweep_id, "cancel")
    from spotsweep.services.planner.handlers import cancellation

    _post(cancellation(sweep_id), settings)
    return f"cancel requested for {sweep_id}"


def extend(sweep: str, settings: Settings, trials: int, budget: dict[str, Any]) -> str:
    """Ask the planner for ``trials`` more trials and/or new budget caps; checked here
    first, so a mistake is reported to the person typing, not only in the planner's log.
    A local mode sweep's extension is left for the process that runs it, or the next
    ``resume`` (:mod:`spotsweep.services.local.spool`)."""
    from spotsweep.services.planner.extend import extended

    db, sweep_id = _resolve(settings, sweep)
    with db.transaction() as conn:
        row = conn.execute("SELECT spec, spec_version, state FROM sweep_results WHERE sweep_id = %s",
                           (sweep_id,)).fetchone()
    if row is None or row["spec"] is None:
        raise _unknown(sweep_id)
    if row["state"] not in ("running", "completed"):
        raise PermanentError(f"sweep {_named(sweep_id)} is {row['state']}; only a running or completed sweep can be extended")
    new = extended(parse_spec(row["spec"]), trials, budget)  # SpecError names the field
    if _run_here(settings, sweep_id):
        from spotsweep.services.local import spool as local_spool
        from spotsweep.services.local.interrupt import is_locked

        local_spool.put(settings.home, sweep_id, row["spec_version"], trials, budget)
        taker = ("the `spotsweep run` running it takes it within a moment" if is_locked(settings.home, sweep_id)
                 else f"`spotsweep resume {sweep_id}` runs it")
        return f"extension of {sweep_id} saved: {total_trials(new)} trial(s) in all; {taker}"
    _postable(sweep_id)
    _reachable(db, sweep_id, "extend")
    from spotsweep.services.planner.handlers import extension

    _post(extension(sweep_id, row["spec_version"], trials, budget), settings)
    return f"extension requested for {sweep_id}: {total_trials(new)} trial(s) in all"


SCHEMA_PATIENCE = 10.0  # seconds `submit --wait` waits for the schema before it says why


def wait(sweep_id: str, settings: Settings, timeout: float | None, poll: float = 0.5) -> int:
    """Follow a submitted sweep in the database until it ends."""
    console = Console(stderr=True)
    db = for_reading(settings, ready=False)
    deadline = None if timeout is None else time.monotonic() + timeout
    last, ready, unready_since = "", False, time.monotonic()
    while True:
        try:
            # Right after `submit` the planner may still be creating or migrating the schema
            # (one transaction per migration): read only once every migration is in.
            if not ready:
                db.check()
                ready = True
            rows = reporter.sweep_counts(db, sweep_id)
        except SchemaNotReady as e:
            rows = []
            # Longer than a migration takes: no planner is running, or an older one that lacks
            # this build's migrations. Say so once, rather than wait in silence.
            if time.monotonic() - unready_since > SCHEMA_PATIENCE:
                console.print(Text(f"still waiting: {e}"))
                unready_since = float("inf")
        if rows:
            r = rows[0]
            line = (f"{r['state']}: {r['completed']} completed, {r['running']} running, {r['queued']} queued, "
                    f"{r['failed']} failed, {r['pruned']} pruned of {r['total_trials']}")
            if line != last:
                console.print(line, highlight=False)
                last = line
            if r["state"] == "rejected":
                console.print(Text(f"rejected: {_said(r['error'])}"))
                return ExitCode.USAGE
            if r["state"] != "running":
                for why in (r["error"], r["note"]):
                    if why:
                        console.print(Text(_said(why)))
                good = r["state"] == "completed" and r["failed"] == 0 and r["cancelled"] == 0
                return ExitCode.OK if good else ExitCode.FAILED
        if deadline is not None and time.monotonic() > deadline:
            console.print(f"timed out after {timeout}s; the sweep goes on")
            return ExitCode.TIMEOUT
        time.sleep(poll)


def _said(text: str) -> str:
    """An error or note as printed for a person: bounded, escaped, its lines kept."""
    return printable(cap_text(text), newlines=True)


def print_json(rows: list[Any]) -> None:
    """Strict JSON (non-finite values as the contract's strings); json escapes every control character."""
    print(json.dumps(json_ready(rows), default=str, indent=2, allow_nan=False))


def database_if_any(settings: Settings) -> Database | None:
    """The database for a listing, or None when it has no spotsweep schema at all:
    nothing ran there yet, so the list is empty (an older schema is still an error)."""
    try:
        return for_reading(settings)
    except SchemaNotReady as e:
        if not e.empty:
            raise
        return None


def status(sweep_id: str | None, settings: Settings, as_json: bool, limit: int | None = None) -> int:
    """Sweeps newest first, at most ``limit`` (None: all), and a line on stderr saying how many more."""
    db = database_if_any(settings)
    rows = [] if db is None else reporter.sweep_counts(db, sweep_id)
    if sweep_id and not rows:
        raise _unknown(sweep_id)
    more = 0 if limit is None else max(0, len(rows) - limit)
    rows = rows[:limit]
    if more:  # stderr: the table and the JSON stay what they were
        print(f"{more:,} older sweep{'s' if more > 1 else ''} not shown: spotsweep status --limit N, or --all",
              file=sys.stderr)
    if as_json:
        print_json(rows)
        return ExitCode.OK
    table = Table(title="sweeps")
    # The id is what a user copies: never cut nor wrapped; a narrow terminal folds the other columns.
    table.add_column("sweep_id", no_wrap=True, min_width=max((len(shown(r["sweep_id"])) for r in rows), default=8))
    for col in ("name", "state", "total", "completed", "pruned", "running", "queued", "failed", "cancelled"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(cell(r["sweep_id"]), cell(r["name"]), r["state"], str(r["total_trials"]), str(r["completed"]),
                      str(r["pruned"]), str(r["running"]), str(r["queued"]), str(r["failed"]), str(r["cancelled"]))
    reporter.console().print(table)
    if db is not None:
        for warning in idle_classes.warnings_for(settings, idle_classes.waiting_classes(db)):
            print(warning, file=sys.stderr)
    unfit = {} if db is None else idle_classes.waiting_unfit(db)
    staging = {} if db is None else idle_classes.staging(db)
    for r in rows:
        if r["sweep_id"] in staging:
            print(f"{shown(r['sweep_id'])}: staging: {staging[r['sweep_id']]} queued trial(s) being set up on their "
                  "agents (inputs, setup.pip env, image), not yet training")
        if r["sweep_id"] in unfit:
            print(f"{shown(r['sweep_id'])}: waiting: {unfit[r['sweep_id']]}")
        if r["state"] in ("rejected", "failed") and r["error"]:
            print(f"{shown(r['sweep_id'])} {r['state']}: {_said(r['error'])}")
        if r["note"]:
            print(f"{shown(r['sweep_id'])}: {_said(r['note'])}")
        if (line := budget_line(caps_of(r["budget"]), spent_of(r, datetime.now(timezone.utc)))) is not None:
            print(f"{shown(r['sweep_id'])}: {line}")
    return ExitCode.OK


def report(sweep_id: str, settings: Settings, csv: Path | None, top: int | None, metrics: list[str] | None = None,
           html: Path | None = None) -> int:
    """The leaderboard of sweep ``sweep_id`` (or of the newest sweep of that name) (the objective and ``metrics``, default a few), every metric in
    ``csv``, and in ``html`` the dashboard's sweep page as one offline file."""
    db = database_if_any(settings)
    sweep_id = _by_id_or_name(db, sweep_id)
    assert db is not None  # a database nothing ran on knows no sweep: refused just above
    rep = reporter.build(db, sweep_id, metrics or ())
    reporter.print_leaderboard(rep, top=top)
    if csv is not None:
        n = reporter.write_csv(rep, csv, rep.metrics if metrics else None)
        print(f"wrote {n} rows to {csv}")
    if html is not None:
        from spotsweep.services.reporter import html as html_report

        size = html_report.write(db, sweep_id, html)
        print(f"wrote {html} ({size / 1e6:.1f} MB): open it in a browser, no network needed")
    return ExitCode.OK


def export_tensorboard(sweep: str, settings: Settings, out: Path) -> int:
    """``spotsweep export tensorboard SWEEP DIR``: one TensorBoard run per trial."""
    from spotsweep.services.reporter import tensorboard

    done = tensorboard.export(_sweep_database(settings, sweep), sweep, out)
    print(f"wrote {done.runs} run(s), {done.scalars} scalar(s) of {done.sweep_id} to {out}: tensorboard --logdir {out}")
    return ExitCode.OK
