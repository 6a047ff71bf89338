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
from pathlib import Path

from spotsweep import __version__
from spotsweep.shared import log
from spotsweep.shared.errors import PermanentError, RetryableError, SpecError, SpotsweepError, UnsafeSetup
from spotsweep.shared.runtime import ExitCode
from spotsweep.shared.settings import PROCESSES, AgentSettings, DashboardSettings, LocalSettings, PlannerSettings, Settings, default
from spotsweep.shared.settings_cli import add_flags, load


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="spotsweep", description="Hyperparameter sweeps on spot GPUs.")
    p.add_argument("--version", action="version", version=f"spotsweep {__version__}")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING... (default INFO; WARNING for run, whose UI is a progress bar)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a sweep on this machine, no services needed")
    r.add_argument("spec", type=Path)
    r.add_argument("--workers", type=_positive, default=2, help="trials at once (default 2)")
    r.add_argument("--csv", type=Path)
    port = default(DashboardSettings, "dashboard_port")
    r.add_argument("--dashboard", nargs="?", const=port, type=_port, metavar="PORT",
                   help=f"serve the dashboard on 127.0.0.1:PORT (default {port}) while the sweep runs")
    add_flags(r, LocalSettings)

    rs = sub.add_parser("resume", help="finish a local sweep whose `spotsweep run` was interrupted or killed")
    rs.add_argument("sweep")
    rs.add_argument("--workers", type=_positive, default=2, help="trials at once (default 2)")
    rs.add_argument("--csv", type=Path)
    rs.add_argument("--dashboard", nargs="?", const=port, type=_port, metavar="PORT",
                    help=f"serve the dashboard on 127.0.0.1:PORT (default {port}) while the sweep runs")
    add_flags(rs, LocalSettings)

    s = sub.add_parser("submit", help="post a sweep to the planner queue")
    s.add_argument("spec", type=Path)
    s.add_argument("--wait", action="store_true", help="follow the sweep; exit 0 only if every trial completed")
    s.add_argument("--timeout", type=float, help="with --wait: give up after S seconds (exit 124)")

    v = sub.add_parser("validate", help="check a spec (exit 0 or 2)")
    v.add_argument("spec", type=Path)

    st = sub.add_parser("status", help="sweeps and their trial counts, newest first")
    st.add_argument("sweep", nargs="?")
    st.add_argument("--json", action="store_true")
    shown = st.add_mutually_exclusive_group()
    shown.add_argument("--limit", type=_positive, default=STATUS_LIMIT, metavar="N",
                       help=f"the newest N sweeps (default {STATUS_LIMIT})")
    shown.add_argument("--all", action="store_true", help="every sweep")

    ls = sub.add_parser("ls", help="list trials")
    ls.add_argument("--filter", action="append", default=[], metavar="KEY=GLOB", help="name=, state= or sweep= (repeatable)")
    ls.add_argument("--json", action="store_true")

    tp = sub.add_parser("top", help="live view of the running trials: agent, GPU, memory, step, last metric, ETA")
    tp.add_argument("--sweep", help="only this sweep (id or name)")
    tp.add_argument("--once", action="store_true", help="print one table and exit")
    tp.add_argument("--json", action="store_true", help="print the rows as JSON and exit")

    e = sub.add_parser("extend", help="more trials or a larger budget for a running or finished sweep")
    e.add_argument("sweep", help="the sweep's id, or its name (the newest sweep of that name)")
    e.add_argument("--trials", type=_positive, help="configurations to add (each runs `repeats` times)")
    e.add_argument("--max-trials", type=_positive, help="new budget.max_trials")
    e.add_argument("--max-steps", type=_positive, help="new budget.max_steps")
    e.add_argument("--max-gpu-hours", type=float, help="new budget.max_gpu_hours")
    e.add_argument("--max-cost", type=float, help="new budget.max_cost")
    e.add_argument("--wall-time", help="new budget.wall_time (seconds, or 30m, 12h, 1d)")

    c = sub.add_parser("cancel", help="cancel a sweep")
    c.add_argument("sweep", help="the sweep's id, or its name (the newest sweep of that name)")

    sub.add_parser("schema", help="print the JSON Schemas of the spec and the messages")
    sub.add_parser("migrate", help="apply the results database's pending schema migrations (the planner and "
                   "the collector do it when they start; readers never do)")

    rep = sub.add_parser("report", help="leaderboard, CSV and offline HTML report of a sweep")
    rep.add_argument("sweep", help="a sweep id, or a name (its newest sweep)")
    rep.add_argument("--csv", type=Path)
    rep.add_argument("--html", type=Path, metavar="FILE",
                     help="write the dashboard's sweep page as one self-contained HTML file (works offline)")
    rep.add_argument("--top", type=int)
    rep.add_argument("--metrics", type=_names, metavar="NAME,NAME",
                     help="metric columns beside the objective (default: the first 8 by name; --csv then writes only these)")

    ex = sub.add_parser("export", help="write a sweep's results for another tool")
    formats = ex.add_subparsers(dest="format", required=True, metavar="FORMAT")
    tb = formats.add_parser("tensorboard", help="one TensorBoard run per trial: scalars by step, params and final "
                                                "metrics in the HParams plugin")
    tb.add_argument("sweep", help="a sweep id, or a name (its newest sweep)")
    tb.add_argument("dir", type=Path, help="an empty or new folder; then: tensorboard --logdir DIR")

    lg = sub.add_parser("logs", help="a trial's stdout and stderr, from the artifact store (also after its node is gone)")
    lg.add_argument("trial", help="a trial id, or a trial name (within --sweep)")
    lg.add_argument("--sweep", help="the sweep (id, or name: its newest sweep) whose trial name TRIAL is")
    lg.add_argument("--attempt", type=_positive, help="this attempt's logs (default: the newest attempt with logs)")
    lg.add_argument("--follow", "-f", action="store_true", help="print what the trial writes until it ends "
                                                                 "(the store is at most SPOTSWEEP_LOG_UPLOAD_SECONDS behind)")

    ck = sub.add_parser("checkpoint", help="download a trial's latest complete checkpoint (or one step's)")
    ck.add_argument("trial", help="a trial id, or a trial name (within --sweep)")
    ck.add_argument("--sweep", help="the sweep (id, or name: its newest sweep) whose trial name TRIAL is")
    ck.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder to download into")
    ck.add_argument("--step", type=_step, help="the checkpoint of this step (default: the latest complete one)")

    add_flags(sub.add_parser("dashboard", help="serve the web dashboard of every sweep (results database or local mode's)"),
              DashboardSettings)

    # The services' flags are their settings' own knobs (shared/settings.py), each also a SPOTSWEEP_* variable.
    add_flags(sub.add_parser("planner", help="run the planner service"), PROCESSES["planner"])
    add_flags(sub.add_parser("collector", help="run the collector service"), PROCESSES["collector"])
    add_flags(sub.add_parser("agent", help="run an agent on this node"), PROCESSES["agent"])

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
        return _dispatch(args, _settings(args))
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


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    cmd = args.cmd
    if cmd in ("planner", "collector", "agent"):
        return _service(args, settings)
    from spotsweep.commands import sweeps as commands

    if cmd in ("validate", "run", "submit"):
        spec = commands.load(args.spec)
        for warning in commands.warnings(spec):
            print(f"warning: {warning}", file=sys.stderr)
    if cmd == "validate":
        print(commands.describe(spec))
        return ExitCode.OK
    if cmd == "schema":
        print(json.dumps(commands.schemas(), indent=2))
        return ExitCode.OK
    if cmd == "run":
        from spotsweep.services.local import run as local

        assert isinstance(settings, LocalSettings)
        return local.run(spec, settings, args.workers, args.csv, dashboard=args.dashboard)
    if cmd == "resume":
        from spotsweep.services.local import resume

        assert isinstance(settings, LocalSettings)
        return resume.resume(args.sweep, settings, args.workers, args.csv, dashboard=args.dashboard)
    if cmd == "submit":
        if args.wait and settings.database_url is None:  # checked before posting: nothing is left running unwatched
            raise PermanentError("submit --wait follows the sweep in the planner's results database: set "
                                 "SPOTSWEEP_DATABASE_URL to it (unset, --wait would watch local mode's embedded "
                                 "database, which a submitted sweep never reaches)")
        sweep_id = commands.submit(spec, settings)
        print(sweep_id)
        if not args.wait:
            return ExitCode.OK
        code = commands.wait(sweep_id, settings, args.timeout)
        print(sweep_id)
        return code
    if cmd == "extend":
        budget = {k: v for k, v in (("max_trials", args.max_trials), ("max_steps", args.max_steps),
                                    ("max_gpu_hours", args.max_gpu_hours), ("max_cost", args.max_cost),
                                    ("wall_time", args.wall_time)) if v is not None}
        if not args.trials and not budget:
            raise PermanentError("extend: give --trials and/or a budget (--max-trials, --max-steps, --max-gpu-hours, "
                                 "--max-cost, --wall-time)")
        print(commands.extend(args.sweep, settings, args.trials or 0, budget))
        return ExitCode.OK
    if cmd == "cancel":
        print(commands.cancel(args.sweep, settings))
        return ExitCode.OK
    if cmd == "migrate":
        print(commands.migrate(settings))
        return ExitCode.OK
    if cmd == "status":
        return commands.status(args.sweep, settings, args.json, limit=None if args.all else args.limit)
    if cmd == "dashboard":
        from spotsweep.services.reporter.web import serve

        assert isinstance(settings, DashboardSettings)
        _say_when_listening(settings.dashboard_host, settings.dashboard_port)
        return serve(settings, settings.dashboard_host, settings.dashboard_port)
    if cmd == "export":
        return commands.export_tensorboard(args.sweep, settings, args.dir)
    if cmd in ("logs", "checkpoint"):
        from spotsweep.commands import artifacts as artifacts_cli

        if cmd == "logs":
            return artifacts_cli.logs(args.trial, args.sweep, args.attempt, args.follow, settings)
        return artifacts_cli.checkpoint(args.trial, args.sweep, args.out, args.step, settings)
    if cmd == "ls":
        from spotsweep.commands import listing

        return listing.list_trials(args.filter, settings, args.json)
    if cmd == "top":
        from spotsweep.commands import top

        return top.main(settings, args.sweep, args.once, args.json)
    if cmd == "report":
        return commands.report(args.sweep, settings, args.csv, args.top, args.metrics, args.html)
    raise AssertionError(cmd)  # argparse refuses unknown commands


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


def _service(args: argparse.Namespace, settings: Settings) -> int:
    """A long-running service; each imports only what it runs (an agent on a GPU
    node never loads the planner's Optuna, NumPy and SciPy: ~30 MiB and an
    OpenBLAS thread less)."""
    if args.cmd == "planner":
        from spotsweep.services.planner.main import main as planner_main

        assert isinstance(settings, PlannerSettings)
        return planner_main(settings)
    if args.cmd == "collector":
        from spotsweep.services.collector.main import main as collector_main

        return collector_main(settings)
    from spotsweep.services.agent.main import main as agent_main

    assert isinstance(settings, AgentSettings)
    return agent_main(settings)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
