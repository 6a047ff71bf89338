"""``spotsweep run`` and ``resume``: a sweep run on this machine by local mode (services/local), no services needed.

Imported only for these two commands, so local mode's planner and agent (Optuna, NumPy) load at the top.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from spotsweep.commands import Args, command, port, positive, spec_arg
from spotsweep.commands.submit import spec_of
from spotsweep.services.local import resume
from spotsweep.services.local import run as local
from spotsweep.shared.settings import DashboardSettings, LocalSettings, Settings, default
from spotsweep.shared.settings_cli import add_flags


def _local_args(first: Args) -> Args:
    """run's and resume's arguments: ``first``, then their flags."""
    def add(p: argparse.ArgumentParser) -> None:
        first(p)
        p.add_argument("--workers", type=positive, default=2, help="trials at once (default 2)")
        p.add_argument("--csv", type=Path)
        usual = default(DashboardSettings, "dashboard_port")
        p.add_argument("--dashboard", nargs="?", const=usual, type=port, metavar="PORT",
                       help=f"serve the dashboard on 127.0.0.1:PORT (default {usual}) while the sweep runs")
        add_flags(p, LocalSettings)
    return add


@command("run", _local_args(spec_arg))
def _run(args: argparse.Namespace, settings: Settings) -> int:
    assert isinstance(settings, LocalSettings)
    return local.run(spec_of(args), settings, args.workers, args.csv, dashboard=args.dashboard)


@command("resume", _local_args(lambda p: p.add_argument("sweep")))
def _resume(args: argparse.Namespace, settings: Settings) -> int:
    assert isinstance(settings, LocalSettings)
    return resume.resume(args.sweep, settings, args.workers, args.csv, dashboard=args.dashboard)
