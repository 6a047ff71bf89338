"""``spotsweep submit`` and ``validate``: a spec file loaded, checked and posted to the planner (``--wait``: followed)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from spotsweep.commands import command, spec_arg
from spotsweep.commands.idle_classes import submit_warning
from spotsweep.commands.sweeps import post, said
from spotsweep.services.planner.bodies import new_sweep_id, submission
from spotsweep.services.reporter import report as reporter
from spotsweep.shared.db.embedded import for_reading
from spotsweep.shared.db.migrator import SchemaNotReady
from spotsweep.shared.errors import PermanentError
from spotsweep.shared.inputs import without_store
from spotsweep.shared.naming import placeholders
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import Settings
from spotsweep.shared.space import total_trials
from spotsweep.shared.spec import SweepSpec, load_spec_file
from spotsweep.shared.spec_search import summary


def load(path: Path) -> SweepSpec:
    """The spec file, a relative command argument that names a file next to it made absolute.

    ``command: [python, mlp/train.py]`` in ``examples/x.yaml`` then works from
    any working directory (the agent starts trials in a fresh one). On a
    cluster the file must exist at the same path on every agent node, unless
    the spec has a ``workdir``: then the command is left as written, and its
    relative paths resolve inside the workdir, the trial's working directory.
    """
    spec = load_spec_file(path)
    if spec.workdir is not None:
        return spec
    argv = []
    for arg in spec.command:
        candidate = path.parent / arg
        if "{" not in arg and not Path(arg).is_absolute() and candidate.is_file():
            arg = str(candidate.resolve())
        argv.append(arg)
    return spec.model_copy(update={"command": argv})


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
                console.print(Text(f"rejected: {said(r['error'])}"))
                return ExitCode.USAGE
            if r["state"] != "running":
                for why in (r["error"], r["note"]):
                    if why:
                        console.print(Text(said(why)))
                good = r["state"] == "completed" and r["failed"] == 0 and r["cancelled"] == 0
                return ExitCode.OK if good else ExitCode.FAILED
        if deadline is not None and time.monotonic() > deadline:
            console.print(f"timed out after {timeout}s; the sweep goes on")
            return ExitCode.TIMEOUT
        time.sleep(poll)


def spec_of(args: argparse.Namespace) -> SweepSpec:
    """The spec file of run, submit and validate, its warnings printed."""
    spec = load(args.spec)
    for warning in warnings(spec):
        print(f"warning: {warning}", file=sys.stderr)
    return spec


def _submit_args(p: argparse.ArgumentParser) -> None:
    spec_arg(p)
    p.add_argument("--wait", action="store_true", help="follow the sweep; exit 0 only if every trial completed")
    p.add_argument("--timeout", type=float, help="with --wait: give up after S seconds (exit 124)")


@command("submit", _submit_args)
def submit(args: argparse.Namespace, settings: Settings) -> int:
    """Post the spec to the planner, its workdir packed and uploaded first; print the new sweep's id
    (``--wait``: and again once the sweep ended, its exit code saying how)."""
    spec = spec_of(args)
    if args.wait and settings.database_url is None:  # checked before posting: nothing is left running unwatched
        raise PermanentError("submit --wait follows the sweep in the planner's results database: set "
                             "SPOTSWEEP_DATABASE_URL to it (unset, --wait would watch local mode's embedded "
                             "database, which a submitted sweep never reaches)")
    from spotsweep.commands import code_upload  # deferred: the packer's S3 client, which validate never needs

    spec = code_upload.with_code(spec, settings)
    sweep_id = new_sweep_id(spec.name)
    post(submission(spec, sweep_id), settings, served=spec.resources.resource_class)
    if (too_big := submit_warning(settings, spec.resources)) is not None:
        print(too_big, file=sys.stderr)
    print(sweep_id)
    if not args.wait:
        return ExitCode.OK
    code = wait(sweep_id, settings, args.timeout)
    print(sweep_id)
    return code


@command("validate", spec_arg)
def validate(args: argparse.Namespace, settings: Settings) -> int:
    spec = spec_of(args)
    print(f"ok: {spec.name}: {total_trials(spec)} trial(s), {summary(spec)}, "
          f"metric {spec.metric.name} ({spec.metric.mode}), at most {spec.max_concurrent} at once")
    if settings.s3_endpoint is None and (why := without_store(spec.inputs)) is not None:
        print(f"note: `spotsweep run` here would refuse it: {why}", file=sys.stderr)
    return ExitCode.OK
