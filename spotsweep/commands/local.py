"""``spotsweep run`` and ``resume``: a sweep run on this machine by local mode (services/local), no services needed.

Imported only for these two commands, so local mode's planner and agent (Optuna, NumPy) load at the top.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spotsweep.commands import command, port, positive, spec_arg
from spotsweep.commands.submit import spec_of
from spotsweep.services.local import resume
from spotsweep.services.local import run as local
from spotsweep.shared.settings import DashboardSettings, LocalSettings, Settings, default
from spotsweep.shared.settings_cli import add_flags


def _local_args(p: argparse.ArgumentParser) -> None:
    """run's and resume's flags beside their first argument."""
    p.add_argument("--workers", type=positive, default=2, help="trials at once (default 2)")
    p.add_argument("--csv", type=Path)
    usual = default(DashboardSettings, "dashboard_port")
    p.add_argument("--dashboard", nargs="?", const=usual, type=port, metavar="PORT",
                   help=f"serve the dashboard on 127.0.0.1:PORT (default {usual}) while the sweep runs")
    add_flags(p, LocalSettings)


def _run_args(p: argparse.ArgumentParser) -> None:
    spec_arg(p)
    _local_args(p)


def _resume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep")
    _local_args(p)


@command("run", _run_args)
def _run(args: argparse.Namespace, settings: Settings) -> int:
    assert isinstance(settings, LocalSettings)
    return local.run(spec_of(args), settings, args.workers, args.csv, dashboard=args.dashboard)


@command("resume", _resume_args)
def _resume(args: argparse.Namespace, settings: Settings) -> int:
    assert isinstance(settings, LocalSettings)
    return resume.resume(args.sweep, settings, args.workers, args.csv, dashboard=args.dashboard)
