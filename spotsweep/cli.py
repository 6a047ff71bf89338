"""The ``spotsweep`` command line.

Errors the user can act on (a bad spec, a missing sweep, a service that is
down) print one clear message and exit with a named code; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spotsweep import __version__
from spotsweep.commands import sweeps
from spotsweep.shared import log
from spotsweep.shared.errors import PermanentError, RetryableError, SpecError, SpotsweepError, UnsafeSetup
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import PROCESSES, AgentSettings, DashboardSettings, LocalSettings, PlannerSettings, Settings, default
from spotsweep.shared.settings_cli import add_flags, load
from spotsweep.shared.spec import SweepSpec


def _whole(text: str, floor: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < floor:
        raise argparse.ArgumentTypeError(f"must be at least {floor}, got {value}")
    return value


STATUS_LIMIT = 20  # sweeps `status` shows unless told otherwise (2,000 sweeps printed 233 KB)


def _positive(text: str) -> int:
    return _whole(text, 1)


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {text!r}")
    return value


def _step(text: str) -> int:
    return _whole(text, 0)


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected NAME,NAME..., got {text!r}")
    return names


Args = Callable[[argparse.ArgumentParser], None]  # adds a subcommand's arguments
Run = Callable[[argparse.Namespace, Settings], int]  # runs it; returns the exit code


@dataclass(frozen=True)
class Command:
    """One subcommand: its help, its arguments and what it runs (declared together, below)."""

    help: str
    args: Args
    run: Run


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, args: Args = lambda p: None) -> Callable[[Run], Run]:
    """Declare the subcommand ``name``: the decorated function runs it; ``args`` adds its arguments."""
    def register(run: Run) -> Run:
        COMMANDS[name] = Command(help, args, run)
        return run
    return register


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spotsweep", description="Hyperparameter sweeps on spot GPUs.")
    p.add_argument("--version", action="version", version=f"spotsweep {__version__}")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING... (default INFO; WARNING for run, whose UI is a progress bar)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        cmd.args(sub.add_parser(name, help=cmd.help))
    # Only listed here: main() hands `train ...` to the trainer's own parser before this one runs.
    sub.add_parser("train", help="train a built-in model under the trial contract (needs torch): "
                                 "spotsweep train tinylm --help", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        return _train(argv[1:])
    args = _parser().parse_args(argv)
    log.configure(args.log_level or ("WARNING" if args.cmd in ("run", "resume") else "INFO"))
    try:
        return COMMANDS[args.cmd].run(args, _settings(args))
    except SpecError as e:
        for field, message in e.errors:
            _error(f"{field}: {message}" if field else message)
        return ExitCode.USAGE
    except UnsafeSetup as e:
        _error(e)
        return ExitCode.UNSAFE
    except PermanentError as e:
        _error(e)
        return ExitCode.USAGE
    except RetryableError as e:
        _error(e)
        return ExitCode.UNAVAILABLE
    except SpotsweepError as e:  # pragma: no cover - the two above cover the taxonomy
        _error(e)
        return ExitCode.FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except OSError as e:  # e.g. --csv into a folder that cannot be written
        print(f"error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return ExitCode.FAILED


def _error(what: object) -> None:
    """An error for the person typing: a value it quotes (a spec's field, a sweep id) may hold
    anything, so control characters are shown escaped, never sent to the terminal raw."""
    from spotsweep.services.reporter.safe import printable

    print(f"error: {printable(str(what), newlines=True)}", file=sys.stderr)


def _train(argv: list[str]) -> int:
    """``spotsweep train``: the one command that needs torch, imported only here."""
    try:
        import numpy  # noqa: F401 - both come with the worker extra
        import torch  # noqa: F401
    except ImportError:
        print("spotsweep train needs torch: pip install 'spotsweep[worker]'", file=sys.stderr)
        return ExitCode.USAGE
    from spotsweep.trainer.cli import main as train_main

    return train_main(argv)


def _settings(args: argparse.Namespace) -> Settings:
    """The command's settings (its process's model, or the shared one) from its flags over
    the environment; a bad value names its flag or variable (PermanentError: exit 2)."""
    return load(PROCESSES.get("run" if args.cmd == "resume" else args.cmd, Settings), args)


def _local_args(p: argparse.ArgumentParser) -> None:
    """run's and resume's flags beside their first argument."""
    p.add_argument("--workers", type=_positive, default=2, help="trials at once (default 2)")
    p.add_argument("--csv", type=Path)
    port = default(DashboardSettings, "dashboard_port")
    p.add_argument("--dashboard", nargs="?", const=port, type=_port, metavar="PORT",
                   help=f"serve the dashboard on 127.0.0.1:PORT (default {port}) while the sweep runs")
    add_flags(p, LocalSettings)


def _spec_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", type=Path)


def _spec(args: argparse.Namespace) -> SweepSpec:
    """The spec file of run, submit and validate, its warnings printed."""
    spec = sweeps.load(args.spec)
    for warning in sweeps.warnings(spec):
        print(f"warning: {warning}", file=sys.stderr)
    return spec


def _sweep_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="the sweep's id, or its name (the newest sweep of that name)")


def _trial_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial", help="a trial id, or a trial name (within --sweep)")
    p.add_argument("--sweep", help="the sweep (id, or name: its newest sweep) whose trial name TRIAL is")


def _run_args(p: argparse.ArgumentParser) -> None:
    _spec_arg(p)
    _local_args(p)


def _resume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep")
    _local_args(p)


@command("run", "run a sweep on this machine, no services needed", _run_args)
def _run(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.local import run as local

    assert isinstance(settings, LocalSettings)
    return local.run(_spec(args), settings, args.workers, args.csv, dashboard=args.dashboard)


@command("resume", "finish a local sweep whose `spotsweep run` was interrupted or killed", _resume_args)
def _resume(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.local import resume

    assert isinstance(settings, LocalSettings)
    return resume.resume(args.sweep, settings, args.workers, args.csv, dashboard=args.dashboard)


def _submit_args(p: argparse.ArgumentParser) -> None:
    _spec_arg(p)
    p.add_argument("--wait", action="store_true", help="follow the sweep; exit 0 only if every trial completed")
    p.add_argument("--timeout", type=float, help="with --wait: give up after S seconds (exit 124)")


@command("submit", "post a sweep to the planner queue", _submit_args)
def _submit(args: argparse.Namespace, settings: Settings) -> int:
    spec = _spec(args)
    if args.wait and settings.database_url is None:  # checked before posting: nothing is left running unwatched
        raise PermanentError("submit --wait follows the sweep in the planner's results database: set "
                             "SPOTSWEEP_DATABASE_URL to it (unset, --wait would watch local mode's embedded "
                             "database, which a submitted sweep never reaches)")
    sweep_id = sweeps.submit(spec, settings)
    print(sweep_id)
    if not args.wait:
        return ExitCode.OK
    code = sweeps.wait(sweep_id, settings, args.timeout)
    print(sweep_id)
    return code


@command("validate", "check a spec (exit 0 or 2)", _spec_arg)
def _validate(args: argparse.Namespace, settings: Settings) -> int:
    print(sweeps.describe(_spec(args)))
    return ExitCode.OK


def _status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", nargs="?")
    p.add_argument("--json", action="store_true")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=_positive, default=STATUS_LIMIT, metavar="N",
                       help=f"the newest N sweeps (default {STATUS_LIMIT})")
    shown.add_argument("--all", action="store_true", help="every sweep")


@command("status", "sweeps and their trial counts, newest first", _status_args)
def _status(args: argparse.Namespace, settings: Settings) -> int:
    return sweeps.status(args.sweep, settings, args.json, limit=None if args.all else args.limit)


def _ls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", action="append", default=[], metavar="KEY=GLOB", help="name=, state= or sweep= (repeatable)")
    p.add_argument("--json", action="store_true")


@command("ls", "list trials", _ls_args)
def _ls(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.commands import listing

    return listing.list_trials(args.filter, settings, args.json)


def _top_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", help="only this sweep (id or name)")
    p.add_argument("--once", action="store_true", help="print one table and exit")
    p.add_argument("--json", action="store_true", help="print the rows as JSON and exit")


@command("top", "live view of the running trials: agent, GPU, memory, step, last metric, ETA", _top_args)
def _top(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.commands import top

    return top.main(settings, args.sweep, args.once, args.json)


# extend's budget flags, each a budget key: --max-trials sets budget.max_trials
BUDGET_FLAGS: dict[str, Callable[[str], object]] = {"max_trials": _positive, "max_steps": _positive,
                                                    "max_gpu_hours": float, "max_cost": float, "wall_time": str}


def _extend_args(p: argparse.ArgumentParser) -> None:
    _sweep_arg(p)
    p.add_argument("--trials", type=_positive, help="configurations to add (each runs `repeats` times)")
    for key, kind in BUDGET_FLAGS.items():
        p.add_argument(f"--{key.replace('_', '-')}", type=kind,
                       help=f"new budget.{key}" + (" (seconds, or 30m, 12h, 1d)" if key == "wall_time" else ""))


@command("extend", "more trials or a larger budget for a running or finished sweep", _extend_args)
def _extend(args: argparse.Namespace, settings: Settings) -> int:
    budget = {k: getattr(args, k) for k in BUDGET_FLAGS if getattr(args, k) is not None}
    if not args.trials and not budget:
        raise PermanentError("extend: give --trials and/or a budget (--max-trials, --max-steps, --max-gpu-hours, "
                             "--max-cost, --wall-time)")
    print(sweeps.extend(args.sweep, settings, args.trials or 0, budget))
    return ExitCode.OK


@command("cancel", "cancel a sweep", _sweep_arg)
def _cancel(args: argparse.Namespace, settings: Settings) -> int:
    print(sweeps.cancel(args.sweep, settings))
    return ExitCode.OK


@command("schema", "print the JSON Schemas of the spec and the messages")
def _schema(args: argparse.Namespace, settings: Settings) -> int:
    print(json.dumps(sweeps.schemas(), indent=2))
    return ExitCode.OK


@command("migrate", "apply the results database's pending schema migrations (the planner and the collector do it "
         "when they start; readers never do)")
def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    print(sweeps.migrate(settings))
    return ExitCode.OK


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep", help="a sweep id, or a name (its newest sweep)")
    p.add_argument("--csv", type=Path)
    p.add_argument("--html", type=Path, metavar="FILE",
                   help="write the dashboard's sweep page as one self-contained HTML file (works offline)")
    p.add_argument("--top", type=int)
    p.add_argument("--metrics", type=_names, metavar="NAME,NAME",
                   help="metric columns beside the objective (default: the first 8 by name; --csv then writes only these)")


@command("report", "leaderboard, CSV and offline HTML report of a sweep", _report_args)
def _report(args: argparse.Namespace, settings: Settings) -> int:
    return sweeps.report(args.sweep, settings, args.csv, args.top, args.metrics, args.html)


def _export_args(p: argparse.ArgumentParser) -> None:
    tb = p.add_subparsers(dest="format", required=True, metavar="FORMAT").add_parser(
        "tensorboard", help="one TensorBoard run per trial: scalars by step, params and final metrics in the HParams plugin")
    tb.add_argument("sweep", help="a sweep id, or a name (its newest sweep)")
    tb.add_argument("dir", type=Path, help="an empty or new folder; then: tensorboard --logdir DIR")


@command("export", "write a sweep's results for another tool", _export_args)
def _export(args: argparse.Namespace, settings: Settings) -> int:
    return sweeps.export_tensorboard(args.sweep, settings, args.dir)


def _logs_args(p: argparse.ArgumentParser) -> None:
    _trial_args(p)
    p.add_argument("--attempt", type=_positive, help="this attempt's logs (default: the newest attempt with logs)")
    p.add_argument("--follow", "-f", action="store_true", help="print what the trial writes until it ends "
                                                                "(the store is at most SPOTSWEEP_LOG_UPLOAD_SECONDS behind)")


@command("logs", "a trial's stdout and stderr, from the artifact store (also after its node is gone)", _logs_args)
def _logs(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.commands import artifacts

    return artifacts.logs(args.trial, args.sweep, args.attempt, args.follow, settings)


def _checkpoint_args(p: argparse.ArgumentParser) -> None:
    _trial_args(p)
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to download into")
    p.add_argument("--step", type=_step, help="the checkpoint of this step (default: the latest complete one)")


@command("checkpoint", "download a trial's latest complete checkpoint (or one step's)", _checkpoint_args)
def _checkpoint(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.commands import artifacts

    return artifacts.checkpoint(args.trial, args.sweep, args.out, args.step, settings)


@command("dashboard", "serve the web dashboard of every sweep (results database or local mode's)",
         lambda p: add_flags(p, DashboardSettings))
def _dashboard(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.reporter.web import serve

    assert isinstance(settings, DashboardSettings)
    _say_when_listening(settings.dashboard_host, settings.dashboard_port)
    return serve(settings, settings.dashboard_host, settings.dashboard_port)


def _say_when_listening(host: str, port: int) -> None:
    """Print "dashboard: open http://HOST:PORT/" once the dashboard answers there: not before,
    so no address is shown for one that waits for the schema or refuses to start."""
    wildcard = host in ("", "0.0.0.0", "::")
    shown = socket.gethostname() if wildcard else f"[{host}]" if ":" in host else host
    target = "::1" if host == "::" else "127.0.0.1" if wildcard else host

    def wait() -> None:
        while True:
            try:
                socket.create_connection((target, port), timeout=1).close()
            except OSError:
                time.sleep(0.2)
                continue
            print(f"dashboard: open http://{shown}:{port}/ (Ctrl-C stops it)", file=sys.stderr, flush=True)
            return

    threading.Thread(target=wait, name="dashboard-address", daemon=True).start()


# The services' flags are their settings' own knobs (shared/settings.py), each also a SPOTSWEEP_* variable.
# Each imports only what it runs (an agent on a GPU node never loads the planner's Optuna, NumPy and SciPy:
# ~30 MiB and an OpenBLAS thread less).
@command("planner", "run the planner service", lambda p: add_flags(p, PROCESSES["planner"]))
def _planner(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.planner.main import main as planner_main

    assert isinstance(settings, PlannerSettings)
    return planner_main(settings)


@command("collector", "run the collector service", lambda p: add_flags(p, PROCESSES["collector"]))
def _collector(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.collector.main import main as collector_main

    return collector_main(settings)


@command("agent", "run an agent on this node", lambda p: add_flags(p, PROCESSES["agent"]))
def _agent(args: argparse.Namespace, settings: Settings) -> int:
    from spotsweep.services.agent.main import main as agent_main

    assert isinstance(settings, AgentSettings)
    return agent_main(settings)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
