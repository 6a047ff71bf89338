"""The command line's commands: their names, help and modules (:data:`COMMANDS`), and the registry each
module fills with :func:`command`, declaring its commands' arguments beside what they run. A module is
imported only when one of its commands runs (or a parser of them all is built): `spotsweep --help` loads none.

A new command: a function ``(args, settings) -> exit code`` under ``@command("name", args)`` in the module
of its family (or a new one), and its line in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from importlib import import_module
from pathlib import Path
from typing import NamedTuple

from spotsweep.shared.settings import Settings

Args = Callable[[argparse.ArgumentParser], object]  # adds a subcommand's arguments (what it returns is ignored)
Run = Callable[[argparse.Namespace, Settings], int]  # runs it; returns the exit code

# name: (the module here that declares it, its help), in the order `spotsweep --help` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("local", "run a sweep on this machine, no services needed"),
    "resume": ("local", "finish a local sweep whose `spotsweep run` was interrupted or killed"),
    "submit": ("submit", "post a sweep to the planner queue"),
    "validate": ("submit", "check a spec (exit 0 or 2)"),
    "status": ("listing", "sweeps and their trial counts, newest first"),
    "ls": ("listing", "list trials"),
    "top": ("top", "live view of the running trials: agent, GPU, memory, step, last metric, ETA"),
    "extend": ("sweeps", "more trials or a larger budget for a running or finished sweep"),
    "cancel": ("sweeps", "cancel a sweep"),
    "schema": ("sweeps", "print the JSON Schemas of the spec and the messages"),
    "migrate": ("sweeps", "apply the results database's pending schema migrations (the planner and the collector do "
                          "it when they start; readers never do)"),
    "report": ("sweeps", "leaderboard, CSV and offline HTML report of a sweep"),
    "export": ("sweeps", "write a sweep's results for another tool"),
    "logs": ("artifacts", "a trial's stdout and stderr, from the artifact store (also after its node is gone)"),
    "checkpoint": ("artifacts", "download a trial's latest complete checkpoint (or one step's)"),
    "dashboard": ("processes", "serve the web dashboard of every sweep (results database or local mode's)"),
    "planner": ("processes", "run the planner service"),
    "collector": ("processes", "run the collector service"),
    "agent": ("processes", "run an agent on this node"),
}


class Command(NamedTuple):
    """One subcommand as its module declares it: its arguments and what it runs."""

    args: Args
    run: Run


_DECLARED: dict[str, Command] = {}


def command(name: str, args: Args = lambda p: None) -> Callable[[Run], Run]:
    """Declare command ``name`` (a key of :data:`COMMANDS`): the decorated function runs it; ``args`` adds its arguments."""
    def register(run: Run) -> Run:
        _DECLARED[name] = Command(args, run)
        return run
    return register


def load(name: str) -> Command:
    """Command ``name``, its module imported (once)."""
    import_module(f"{__name__}.{COMMANDS[name][0]}")
    return _DECLARED[name]


# What more than one command's arguments share: the checked value types and the spec file.
def _whole(text: str, floor: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < floor:
        raise argparse.ArgumentTypeError(f"must be at least {floor}, got {value}")
    return value


positive = partial(_whole, floor=1)
step = partial(_whole, floor=0)


def port(text: str) -> int:
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {text!r}")
    return value


def names(text: str) -> list[str]:
    found = [n.strip() for n in text.split(",") if n.strip()]
    if not found:
        raise argparse.ArgumentTypeError(f"expected NAME,NAME..., got {text!r}")
    return found


def spec_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", type=Path)
