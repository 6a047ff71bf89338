"""The commands about one sweep the database knows: ``extend``, ``cancel``, ``report``, ``export``; ``schema`` and
``migrate``; and what the other commands share: posting to the planner, finding a sweep, printing for a person.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotsweep.commands import command, idle_classes, names, positive
from spotsweep.services.local import spool as local_spool
from spotsweep.services.local.interrupt import is_locked, quoted, run_here
from spotsweep.services.planner.bodies import cancellation, extension
from spotsweep.services.planner.extend import extended
from spotsweep.services.reporter import report as reporter
from spotsweep.services.reporter import tensorboard
from spotsweep.services.reporter.safe import printable
from spotsweep.shared.nonfinite import json_safe
from spotsweep.services.reporter.web.queries import find_sweep
from spotsweep.shared import messages, topology
from spotsweep.shared.broker.port import Outgoing
from spotsweep.shared.db import Database
from spotsweep.shared.db.embedded import configured, for_reading
from spotsweep.shared.db.migrator import SchemaNotReady
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.limits import cap_text, is_sweep_id
from spotsweep.shared.runtime import CLI_BACKOFF, ExitCode, connect_broker
from spotsweep.shared.settings import Settings
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import parse_spec, spec_json_schema
from spotsweep.shared.tls import amqp_tls


def post(message: Outgoing, settings: Settings, served: str | None = None) -> None:
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


def unknown(sweep_id: str) -> PermanentError:
    return PermanentError(f"no sweep with id {quoted(sweep_id)} (see `spotsweep status`)")


def _resolve(settings: Settings, sweep: str) -> tuple[Database, str]:
    """The database and id of sweep ``sweep``: an id, or a name (its newest sweep), as `logs --sweep` takes it."""
    db = database_if_any(settings)
    header = None
    if db is not None:  # else a database nothing ran on: it knows no sweep
        with db.transaction() as conn:
            header = find_sweep(conn, sweep)
    if db is None or header is None:
        raise PermanentError(f"no sweep has the id or name {quoted(sweep)} (see `spotsweep ls`)")
    return db, str(header["sweep_id"])


def _postable(db: Database, sweep_id: str, what: str) -> None:
    """Refuse, before posting, an id the planner would refuse (``submit`` makes ``name-<hex8>``), and a sweep that
    a `spotsweep run` elsewhere ran (its trials ran on agent ``local``): no planner reads the sweeps queue for it,
    so the message would lie there unread."""
    if not is_sweep_id(sweep_id):
        raise PermanentError(f"sweep id {quoted(sweep_id)} is not of the form NAME-<8 hex digits> that `submit` makes; "
                             "the planner would refuse it")
    with db.transaction() as conn:
        local = conn.execute("SELECT 1 FROM trial_results WHERE sweep_id = %s AND agent = 'local' LIMIT 1",
                             (sweep_id,)).fetchone()
    if local is not None:
        raise PermanentError(f"sweep {quoted(sweep_id)} was run by `spotsweep run` with another SPOTSWEEP_HOME (or on "
                             f"another machine), not by a planner: {what} it where it ran, with that SPOTSWEEP_HOME")


def said(text: str) -> str:
    """An error or note as printed for a person: bounded, escaped, its lines kept."""
    return printable(cap_text(text), newlines=True)


def print_json(rows: list[Any]) -> None:
    """Strict JSON (non-finite values as the contract's strings); json escapes every control character."""
    print(json.dumps(json_safe(rows), default=str, indent=2, allow_nan=False))


def database_if_any(settings: Settings) -> Database | None:
    """The database for a listing, or None when it has no spotsweep schema at all:
    nothing ran there yet, so the list is empty (an older schema is still an error)."""
    try:
        return for_reading(settings)
    except SchemaNotReady as e:
        if not e.empty:
            raise
        return None


def sweep_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="the sweep's id, or its name (the newest sweep of that name)")


# extend's budget flags, each a budget key: --max-trials sets budget.max_trials
BUDGET_FLAGS: dict[str, Callable[[str], object]] = {"max_trials": positive, "max_steps": positive,
                                                    "max_gpu_hours": float, "max_cost": float, "wall_time": str}


def _extend_args(p: argparse.ArgumentParser) -> None:
    sweep_arg(p)
    p.add_argument("--trials", type=positive, help="configurations to add (each runs `repeats` times)")
    for key, kind in BUDGET_FLAGS.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=kind,
                       help=f"new budget.{key}" + (" (seconds, or 30m, 12h, 1d)" if key == "wall_time" else ""))


@command("extend", _extend_args)
def extend(args: argparse.Namespace, settings: Settings) -> int:
    """Ask the planner for ``--trials`` more trials and/or new budget caps; checked here
    first, so a mistake is reported to the person typing, not only in the planner's log.
    A local mode sweep's extension is left for the process that runs it, or the next
    ``resume`` (:mod:`spotsweep.services.local.spool`)."""
    trials, budget = args.trials or 0, {k: getattr(args, k) for k in BUDGET_FLAGS if getattr(args, k) is not None}
    if not trials and not budget:
        raise PermanentError("extend: give --trials and/or a budget (--max-trials, --max-steps, --max-gpu-hours, "
                             "--max-cost, --wall-time)")
    db, sweep_id = _resolve(settings, args.sweep)
    with db.transaction() as conn:
        row = conn.execute("SELECT spec, spec_version, state FROM sweep_results WHERE sweep_id = %s",
                           (sweep_id,)).fetchone()
    if row is None or row["spec"] is None:
        raise unknown(sweep_id)
    if row["state"] not in ("running", "completed"):
        raise PermanentError(f"sweep {quoted(sweep_id)} is {row['state']}; only a running or completed sweep can be extended")
    new = extended(parse_spec(row["spec"]), trials, budget)  # SpecError names the field
    if run_here(settings, sweep_id):
        local_spool.put(settings.home, sweep_id, row["spec_version"], trials, budget)
        taker = ("the `spotsweep run` running it takes it within a moment" if is_locked(settings.home, sweep_id)
                 else f"`spotsweep resume {sweep_id}` runs it")
        print(f"extension of {sweep_id} saved: {total_trials(new)} trial(s) in all; {taker}")
        return ExitCode.OK
    _postable(db, sweep_id, "extend")
    post(extension(sweep_id, row["spec_version"], trials, budget), settings)
    print(f"extension requested for {sweep_id}: {total_trials(new)} trial(s) in all")
    return ExitCode.OK


@command("cancel", sweep_arg)
def cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Ask the planner to cancel a sweep the results database knows (by id or name): a typo
    is refused here (exit 2), instead of leaving a cancelled row for an id no one ran.
    A local mode sweep is cancelled in its database, no RabbitMQ involved
    (:func:`spotsweep.services.local.resume.cancel`)."""
    db, sweep_id = _resolve(settings, args.sweep)
    if run_here(settings, sweep_id):
        from spotsweep.services.local import resume  # deferred: local mode's planner (Optuna, NumPy)

        print(resume.cancel(sweep_id, settings))
        return ExitCode.OK
    _postable(db, sweep_id, "cancel")
    post(cancellation(sweep_id), settings)
    print(f"cancel requested for {sweep_id}")
    return ExitCode.OK


@command("schema")
def schema(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps({"spec": spec_json_schema(), "messages": messages.json_schemas()}, indent=2))
    return ExitCode.OK


@command("migrate")
def migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Bring the results database's schema up to date."""
    applied = configured(settings).migrate()
    print(f"applied migration(s): {', '.join(applied)}" if applied else "the schema is up to date")
    return ExitCode.OK


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="a sweep id, or a name (its newest sweep)")
    p.add_argument("--csv", type=Path)
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="write the dashboard's sweep page as one self-contained HTML file (works offline)")
    p.add_argument("--top", type=int)
    p.add_argument("--metrics", type=names, metavar="NAME,NAME",
                   help="metric columns beside the objective (default: the first 8 by name; --csv then writes only these)")


@command("report", _report_args)
def report(args: argparse.Namespace, settings: Settings) -> int:
    """The leaderboard of the sweep (an id, or a name: its newest sweep) (the objective and ``--metrics``, default a
    few), every metric in ``--csv``, and in ``--html`` the dashboard's sweep page as one offline file."""
    db, sweep_id = _resolve(settings, args.sweep)
    rep = reporter.build(db, sweep_id, args.metrics or ())
    reporter.print_leaderboard(rep, top=args.top)
    if args.csv is not None:
        n = reporter.write_csv(rep, args.csv, rep.metrics if args.metrics else None)
        print(f"wrote {n} rows to {args.csv}")
    if args.html is not None:
        from spotsweep.services.reporter import html as html_report  # deferred: the dashboard's Starlette, Optuna

        size = html_report.write(db, sweep_id, args.html)
        print(f"wrote {args.html} ({size / 1e6:.1f} MB): open it in a browser, no network needed")
    return ExitCode.OK


def _export_args(p: argparse.ArgumentParser) -> None:
    tb = p.add_subparsers(dest="format", required=True, metavar="FORMAT").add_parser(
        "tensorboard", help="one TensorBoard run per trial: scalars by step, params and final metrics in the HParams plugin")
    tb.add_argument("sweep", help="a sweep id, or a name (its newest sweep)")
    tb.add_argument("dir", type=Path, help="an empty or new folder; then: tensorboard --logdir DIR")


@command("export", _export_args)
def export(args: argparse.Namespace, settings: Settings) -> int:
    """``spotsweep export tensorboard SWEEP DIR``: one TensorBoard run per trial."""
    if (db := database_if_any(settings)) is None:  # nothing ran there yet
        raise unknown(args.sweep)
    done = tensorboard.export(db, args.sweep, args.dir)
    print(f"wrote {done.runs} run(s), {done.scalars} scalar(s) of {done.sweep_id} to {args.dir}: "
          f"tensorboard --logdir {args.dir}")
    return ExitCode.OK
